"""The CI matrix from envs/ and the GitHub Actions workflow generated from it: current,
consistent with the matrix, and valid for a workflow linter (check-jsonschema with its
vendored GitHub workflow schema, installed from PyPI with the test extra)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from cuforge.config import ci
from cuforge.config.combos import load_combos
from cuforge.core.errors import ConfigError
from cuforge.core.project import Project, find_project

PROJECT = find_project()


def _cuforge(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cuforge", *args], capture_output=True,
                          text=True, cwd=PROJECT.root)


def _lint(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema",
                           "vendor.github-workflows", str(path)], capture_output=True, text=True)


def test_matrix_has_one_entry_per_ci_combo():
    proc = _cuforge("ci", "matrix")
    assert proc.returncode == 0, proc.stderr
    entries = {e["combo"]: e for e in json.loads(proc.stdout)}
    combos = load_combos(PROJECT)
    assert set(entries) == {c.id for c in combos if c.ci}
    assert "h200" not in entries                       # ci = false: tied to one machine
    demo = entries["3.11-cu130"]
    assert demo["arches"] == "12.0;12.1+PTX"
    assert demo["gpu"] is True                         # its smoke tests need a GPU
    assert demo["runner"] == "ubuntu-24.04" and "gpu" in demo["gpu_runner"]
    assert demo["wheel_dir"] == "wheelhouse/linux-x86_64/cu130/torch2.14.1-cp311"
    for e in entries.values():   # CUDA 12 has no PyPI nvcc: built where that CUDA is installed
        if e["toolkit"] == "system":
            assert isinstance(e["runner"], list) and f"cuda-{e['cuda']}" in e["runner"], e
    spark = entries["spark"]
    assert spark["platform"] == "linux-aarch64" and spark["runner"].endswith("-arm")
    assert spark["wheel_dir"].startswith("wheelhouse/linux-aarch64/")


def test_the_matrix_says_which_combos_it_leaves_out_and_why():
    """Issue 50 point 8: "one entry per combo" returned 6 of 10 without a word. stdout stays
    the JSON; stderr counts and names each combo left out with its ci_why."""
    proc = _cuforge("ci", "matrix")
    combos = load_combos(PROJECT)
    out = [c for c in combos if not c.ci]
    assert out and all(c.ci_why for c in out), [c.id for c in out if not c.ci_why]
    note = " ".join(proc.stderr.split())
    assert note.startswith(f"{len(combos) - len(out)} of {len(combos)} combos; left out "
                           "(ci = false in envs/combos.toml): "), proc.stderr
    for c in out:
        assert f"{c.id} ({c.ci_why})" in note, c.id
    json.loads(proc.stdout)
    tasks_doc = (PROJECT.root / "tasks.py").read_text()
    assert "one entry per combo, " not in tasks_doc and "one entry per combo that takes part" \
        in " ".join(tasks_doc.replace('"', "").split())


def test_every_ci_combo_builds_the_stacks_not_the_demo_alone():
    """What people install: every package of the milo and pointcept stacks (optional ones
    too), dependencies first, the system headers they need, and both stacks' model stages."""
    from cuforge.config.stacks import load_stack
    wanted = {p for name in ("milo", "pointcept") for stack in [load_stack(PROJECT, name)]
              for p in (*stack.packages, *stack.optional)}
    for e in ci.matrix(PROJECT):
        assert wanted <= set(e["packages"]) and e["packages"] != ["cuforge-demo"], e["combo"]
        assert e["stacks"] == ["milo", "pointcept"]
        assert set(e["only"].split(",")) == wanted | {"cuforge-demo"}
        order = e["packages"]
        assert order.index("pccm") < order.index("cumm") < order.index("spconv")
        assert "libcgal-dev" in e["apt"] and "libsparsehash-dev" in e["apt"]   # tetra, pointgroup


def test_a_combo_table_in_ci_toml_names_another_set(tmp_path):
    root = _copy_project(tmp_path)
    with (root / "envs" / "ci.toml").open("a") as f:
        f.write('\n[combo."3.12-cu129"]\npackages = ["torch-scatter"]\n')
    entries = {e["combo"]: e for e in ci.matrix(Project(root))}
    assert entries["3.12-cu129"]["packages"] == ["torch-scatter"]
    assert entries["3.12-cu129"]["stacks"] == [] and entries["3.12-cu129"]["apt"] == ""
    assert "spconv" in entries["3.11-cu130"]["packages"]        # the others keep the stacks


def test_matrix_orders_packages_and_knows_cpu_only_smoke(tmp_path):
    """Dependencies come first; a plan whose smoke tests all run without a GPU needs none."""
    root = _copy_project(tmp_path)
    ci_toml = (root / "envs" / "ci.toml").read_text()
    one = '\n[combo."3.11-cu130"]\npackages = ["{}"]\n'
    (root / "envs" / "ci.toml").write_text(ci_toml + one.format("spconv"))
    first = ci.matrix(Project(root))[0]
    assert first["packages"][-1] == "spconv"
    assert first["packages"].index("cumm") < first["packages"].index("spconv")
    (root / "envs" / "ci.toml").write_text(ci_toml + one.format("pccm"))
    plan = ci.matrix(Project(root))[0]["packages"]
    for name in plan:                                     # pure Python: no smoke scripts
        (root / "smoke" / f"check_{name}.py").unlink(missing_ok=True)
    assert ci.matrix(Project(root))[0]["gpu"] is False    # nothing to smoke-test on a GPU
    (root / "smoke" / f"check_{plan[-1]}.py").write_text("import pccm\n")
    assert ci.matrix(Project(root))[0]["gpu"] is True     # a smoke script needs a GPU by default


def test_committed_workflow_is_current_and_lints_clean():
    proc = _cuforge("ci", "workflow", "--check")
    assert proc.returncode == 0, proc.stderr
    path = PROJECT.root / ci.WORKFLOW
    lint = _lint(path)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    doc = YAML(typ="safe").load(path.read_text())
    build = doc["jobs"]["build"]
    assert build["strategy"]["matrix"]["include"] == ci.matrix(PROJECT)
    smoke = doc["jobs"]["smoke"]
    assert smoke["runs-on"] == "${{ matrix.gpu_runner }}" and smoke["needs"] == "build"
    assert [e["combo"] for e in smoke["strategy"]["matrix"]["include"]] == [
        e["combo"] for e in ci.matrix(PROJECT) if e["gpu"]]
    runs = [s.get("run", "") for s in smoke["steps"]]
    assert any(r.startswith("cuforge verify ${{ matrix.wheel_dir }}") for r in runs)
    # then setup's model stage for each stack, on its upstream tree at the recipes' commit
    stages = [r for r in runs if "cuforge setup" in r]
    assert len(stages) == 2
    milo = next(r for r in stages if "setup milo" in r)
    assert "checkout --quiet 0c38aa65f8b768513964f13246ef1ae54f001c70" in milo
    assert runs.index(milo) > next(i for i, r in enumerate(runs) if r.startswith("cuforge verify"))
    from cuforge.cli.parser import make_parser
    setup_line = milo.splitlines()[-1].replace("${{ matrix.combo }}", "3.11-cu130").split()
    args = make_parser().parse_args(setup_line[1:])       # a command the CLI really takes
    assert args.no_build and args.stack == "milo"
    assert any("--only ${{ matrix.only }}" in s.get("run", "") for s in build["steps"])
    uploads = [s for s in build["steps"] if s.get("uses", "").startswith("actions/upload-artifact")]
    assert uploads[0]["with"]["path"] == "${{ matrix.wheel_dir }}"


def test_the_linter_rejects_a_broken_workflow(tmp_path):
    broken = tmp_path / "wheels.yml"
    broken.write_text(ci.render_workflow(PROJECT).replace("runs-on:", "runs_on:"))
    assert _lint(broken).returncode != 0


def test_a_stale_workflow_is_reported_with_the_fix(tmp_path):
    root = _copy_project(tmp_path)
    with (root / "envs" / "combos.toml").open("a") as f:
        f.write('\n[[combo]]\npython = "3.13"\naccel = "cu130"\ntorch = "2.14.1"\n')
    with pytest.raises(ConfigError, match="out of date") as err:
        ci.check_workflow(Project(root))
    assert "invoke ci-workflow" in str(err.value)
    ci.write_workflow(Project(root))
    ci.check_workflow(Project(root))
    assert '"combo": "3.13-cu130"' in (root / ci.WORKFLOW).read_text()


def test_a_platform_without_runners_is_a_config_error(tmp_path):
    root = _copy_project(tmp_path)
    text = (root / "envs" / "ci.toml").read_text()
    (root / "envs" / "ci.toml").write_text(text.split("[platform.linux-aarch64]")[0])
    with pytest.raises(ConfigError, match="combo spark builds on linux-aarch64, which has no"):
        ci.matrix(Project(root))


def _copy_project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    for part in ("envs", "recipes", "patches", "smoke", "stacks", ".github"):
        shutil.copytree(PROJECT.root / part, root / part)
    return root
