"""A recipe's [kernels] filter (cuforge.config.kernels) as the plan, the command line and the
manifest carry it (issue 51, points 1 and 5). Pure planning: nothing is built."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from cuforge.cli.parser import make_parser
from cuforge.config.combos import select_combo, with_overrides
from cuforge.config.kernels import UNITS_VARIABLE, VARIABLE, KernelSet, parse_kernels
from cuforge.config.recipes import build_order, load_recipes, parse_recipe
from cuforge.pipeline.request import BuildRequest
from cuforge.env.target import resolve
from cuforge.core.errors import ConfigError
from cuforge.core.project import Project, find_project
from cuforge.env.toolchain import Toolkit
from cuforge.env.torchinfo import TorchInfo
from cuforge.env.venv import ComboEnv
from cuforge.pipeline.plan import make_plan
from cuforge.publish.wheelhouse import Entry, Status, Wheelhouse

ROOT = Path(__file__).resolve().parents[2]
SPCONV = ROOT / "recipes" / "spconv.toml"


def _kernels_table() -> str:
    """The real spconv recipe's [kernels] section, as text (a fixture recipe carries it)."""
    text = SPCONV.read_text()
    start = text.index("\n[kernels]\n")
    return text[start:text.index("\n[upstream_tests]\n")]


def _setup(tmp_path: Path, arches: str):
    proj = tmp_path / "proj"
    shutil.copytree(ROOT / "envs", proj / "envs")
    (proj / "recipes").mkdir()
    (proj / "src" / "k").mkdir(parents=True)
    (proj / "src" / "k" / "k.cu").write_text("// k\n")
    (proj / "recipes" / "k.toml").write_text('[source]\npath = "src/k"\n' + _kernels_table())
    combo = with_overrides(select_combo(find_project(ROOT), name="3.11-cu130"), arches=arches)
    info = TorchInfo(python=Path("/x/bin/python"), py_version="3.11", site_packages=Path("/x"),
                     machine="x86_64", torch="2.14.1", cuda="13.0")
    combo_env = ComboEnv(combo, info, Toolkit(Path("/x/cuda"), combo.accel.cuda), None, True,
                   resolve(find_project(ROOT), combo))
    return Project(proj), combo, combo_env


def _package(project, combo, combo_env, kernels=None):
    req = BuildRequest(combo=combo, jobs=2, packages=("k",), kernels=kernels)
    order = build_order(load_recipes(project), ["k"])
    return make_plan(project, req, combo_env, order,
                     log_dir=project.state_dir / "logs").package("k")


@pytest.mark.parametrize("arches", ["9.0", "12.0", "12.1+PTX;12.0"])
def test_the_plan_gives_the_build_the_rules_that_hold(tmp_path: Path, arches: str) -> None:
    project, combo, combo_env = _setup(tmp_path, arches)
    lean = _package(project, combo, combo_env)
    rules = json.loads(dict(lean.env)[VARIABLE])
    assert [(r["family"], r["algo"], r["io_dtypes"]) for r in rules] == [
        ("gemm", "Volta", []), ("conv", "Volta", []), ("conv", "Simt", ["f16", "f16", "f16"])]
    assert lean.kernels.startswith("lean: without gemm Volta; conv Volta; conv Simt")
    # every step of the build runs with it, so the key and the dry run see it
    assert all(dict(s.env)[VARIABLE] == dict(lean.env)[VARIABLE] for s in lean.commands())


def test_the_dry_run_says_which_kernel_set(tmp_path: Path) -> None:
    from cuforge.pipeline.dryrun import package_lines
    project, combo, combo_env = _setup(tmp_path, "12.0")
    lines = package_lines(project, _package(project, combo, combo_env))
    assert ("# kernels: lean: without gemm Volta; conv Volta; conv Simt f16,f16,f16; ConvParams "
            "in their headers (arches 12.0)") in lines
    full = _package(project, combo, combo_env, KernelSet.FULL)
    assert "# kernels: full" in package_lines(project, full)


def test_full_kernels_is_another_build_of_the_same_tree(tmp_path: Path) -> None:
    project, combo, combo_env = _setup(tmp_path, "12.0")
    lean = _package(project, combo, combo_env)
    full = _package(project, combo, combo_env, KernelSet.FULL)
    assert json.loads(dict(full.env)[VARIABLE]) == [] and full.kernels == "full"
    # upstream's build in full: each ConvParams in a unit of its own (patches/cumm)
    assert dict(full.env)[UNITS_VARIABLE] == "1" and dict(lean.env)[UNITS_VARIABLE] == "0"
    assert full.key != lean.key                    # never "up to date" for each other
    assert full.source_key == lean.source_key      # same tree: ninja keeps what both compile


def test_the_3d_set_is_lean_plus_its_variables_and_a_key_of_its_own(tmp_path: Path) -> None:
    project, combo, combo_env = _setup(tmp_path, "12.0")
    lean = _package(project, combo, combo_env)
    narrow = _package(project, combo, combo_env, "3d")
    env = dict(narrow.env)
    assert env[VARIABLE] == dict(lean.env)[VARIABLE] and env[UNITS_VARIABLE] == "0"
    assert (env["CUFORGE_SPCONV_NDIMS"], env["CUFORGE_SPCONV_SORT_KEYS"]) == ("3", "uint32")
    assert "CUFORGE_SPCONV_NDIMS" not in dict(lean.env)
    assert narrow.kernels.startswith("3d: the 3-D sparse ops only")
    assert narrow.kernels.endswith(lean.kernels)   # the manifest says both what and on top of what
    assert narrow.key != lean.key and narrow.source_key == lean.source_key


def test_an_unknown_kernel_set_names_the_ones_there_are(tmp_path: Path) -> None:
    project, combo, combo_env = _setup(tmp_path, "12.0")
    with pytest.raises(ConfigError) as err:
        _package(project, combo, combo_env, "2d")
    assert "recipes/k.toml has no kernel set '2d'" in str(err.value)
    assert err.value.hint == "--kernels takes one of: lean, full, 3d"


@pytest.mark.parametrize(("table", "words"), [
    ({"sets": {"lean": {"env": {"X": "1"}, "says": "s", "why": "w"}}}, "'lean' is a built-in set"),
    ({"sets": {"3d": {"says": "s", "why": "w"}}}, "missing ['env']"),
    ({"sets": {"3d": {"env": {"X": "1"}, "says": "s", "why": "w", "drop": []}}},
     "unknown keys ['drop']"),
])
def test_a_bad_narrower_set_is_a_config_error(table: dict, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_kernels(table, "recipes/x.toml")
    assert words in str(err.value)


def test_a_turing_target_still_leaves_the_three_out(tmp_path: Path) -> None:
    # 7.5 is the lowest arch CUDA 13 compiles: every rule holds there too (a Volta target,
    # which keeps the Volta kernels, is tests/unit/test_spconv_kernel_choice.py's)
    project, combo, combo_env = _setup(tmp_path, "7.5;9.0")
    assert len(json.loads(dict(_package(project, combo, combo_env).env)[VARIABLE])) == 3


def test_a_recipe_without_kernels_gets_no_variable(tmp_path: Path) -> None:
    project, combo, combo_env = _setup(tmp_path, "12.0")
    (project.root / "recipes" / "k.toml").write_text('[source]\npath = "src/k"\n')
    pkg = _package(project, combo, combo_env)
    assert VARIABLE not in dict(pkg.env) and pkg.kernels == ""


def test_spconv_recipe_is_lean_by_default_and_cites_upstream() -> None:
    kernels = parse_recipe(SPCONV).kernels
    assert kernels.default is KernelSet.LEAN and len(kernels.rules) == 3
    assert all("spconv/csrc/sparse/convops.py:" in r.mirrors for r in kernels.rules)


@pytest.mark.parametrize(("table", "words"), [
    ({"set": "tiny"}, "kernels.set must be 'lean' or 'full'"),
    ({"drop": [{"family": "gemm", "algo": "Volta", "arch_at_least": "7.5"}]}, "missing ['mirrors']"),
    ({"drop": [{"family": "nope", "algo": "Volta", "arch_at_least": "7.5", "mirrors": "x"}]},
     "family must be one of"),
    ({"drop": [{"family": "conv", "algo": "Simt", "arch_at_least": "7.0", "mirrors": "x",
                "io_dtypes": ["f16"]}]}, "io_dtypes names input, weight and output"),
    ({"keep": []}, "unknown keys in [kernels]"),
])
def test_a_bad_kernels_table_is_a_config_error(table: dict, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_kernels(table, "recipes/x.toml")
    assert words in str(err.value)


def test_full_kernels_on_the_command_line() -> None:
    args = make_parser().parse_args(["build", "--only", "spconv", "--full-kernels"])
    assert args.full_kernels is True
    assert make_parser().parse_args(["build"]).full_kernels is False
    assert make_parser().parse_args(["build", "--kernels", "3d"]).kernels == "3d"
    setup = make_parser().parse_args(["setup", "pointcept", "--checkout", "x", "--kernels", "3d"])
    assert setup.kernels == "3d"


def test_the_manifest_says_which_kernel_set_a_wheel_holds(tmp_path: Path) -> None:
    house = Wheelhouse(tmp_path)
    house.publish(None, Entry("spconv", Status.COMPILED, kernels="lean: without gemm Volta"))
    old = json.loads(Entry("cumm", Status.COMPILED).line())
    old.pop("kernels")                                  # a line written before the field
    with open(tmp_path / "manifest.jsonl", "a") as f:
        f.write(json.dumps(old) + "\n")
    by_name = {e.package: e for e in house.entries()}
    assert by_name["spconv"].kernels == "lean: without gemm Volta"
    assert by_name["cumm"].kernels == ""
    assert replace(by_name["spconv"], kernels="full").kernels == "full"


def test_the_docstring_examples_hold() -> None:
    """The rule's arch test, and the bench row's reading of a .ninja_log (bench/kernel_sets.py:
    an output ninja logged twice counts once, its last time)."""
    import doctest
    import importlib.util

    import cuforge.config.kernels
    spec = importlib.util.spec_from_file_location("kernel_sets", ROOT / "bench" / "kernel_sets.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for module in (cuforge.config.kernels, bench):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__


class _Builds:
    """Stands in for bench/build_speed.py's Bench: each "build" leaves the .ninja_log a real
    spconv build leaves (two steps fewer in the lean one) and prints cuforge's compiled line."""

    def __init__(self, state: Path) -> None:
        self.state, self.calls = state, []

    def wipe(self, packages: list[str]) -> None:
        shutil.rmtree(self.state / "cuforge" / "work", ignore_errors=True)

    def cuforge(self, packages: list[str], *extra: str) -> tuple[float, str]:
        self.calls.append((*packages, *extra))
        if packages == ["cumm"]:   # the dependencies, built before the rows
            return 30.0, "compiled cumm_cu130-0.8.2-cp311.whl in 30.0 s\n"
        log = self.state / "cuforge" / "work" / "3.11-cu130-torch2.14.1" / "spconv" / "b" / ".ninja_log"
        log.parent.mkdir(parents=True)
        steps = ["src/cumm/conv/main/cpVolta_x/ConvParams/ConvParams_ConvParams.cu.o",
                 "src/cumm/conv/main/Volta_x/ConvKernel/ConvKernel_conv_kernel.cu.o",
                 "src/csrc/sparse/all/SpconvOps/SpconvOps_sort.cc.o", "core_cc.so"]
        full = extra[-2:] == ("--kernels", "full")
        kept = steps if full else steps[2:]
        log.write_text("# ninja log v6\n" + "".join(f"0\t4000\t0\t{o}\th\n" for o in kept))
        secs = 100.0 if full else 60.0
        return secs, f"compiled spconv_cu130-2.3.8-cp311.whl in {secs} s\n"


def test_the_bench_row_builds_full_then_lean_and_reads_their_logs(tmp_path: Path) -> None:
    import sys
    from types import SimpleNamespace

    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import build_speed
        from kernel_sets import kernel_rows
    finally:
        sys.path.remove(str(ROOT / "bench"))
    builds = _Builds(tmp_path)
    rows = kernel_rows(builds, SimpleNamespace(cuda_arch="9.0", kernel_sets="full,lean"),
                       build_speed._compiled_seconds)
    assert builds.calls == [("cumm",), ("spconv", "--rebuild", "--kernels", "full"),
                            ("spconv", "--rebuild", "--kernels", "lean")]
    assert [r[0].split(",")[0] for r in rows] == [
        "spconv Σ compile s (.ninja_log)", "spconv build CPU s (user+sys)",
        "spconv wall (compiled in)", "spconv ninja steps"]
    assert [(r[3], r[4]) for i, r in enumerate(rows) if i != 1] == [(8.0, 16.0), (60.0, 100.0),
                                                                  (2, 4)]
    assert (tmp_path / "spconv-full.ninja_log").exists() and (tmp_path / "spconv-lean.ninja_log").exists()
    assert "kernels" in build_speed.OPTIONAL and "kernels" not in build_speed.ALL
