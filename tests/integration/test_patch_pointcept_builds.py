"""Build-time patch sets for the Pointcept stack (libs/*, spconv, cumm) on upstream-shaped fixtures.

Each set is applied for real to a copy of its fixture tree: apply, idempotence, check, byte-exact
revert, drift. The patched setup.py / common.py logic is then run with stand-ins for torch,
setuptools and distutils (no compiler, no GPU), so the tests take well under a second.
"""

from __future__ import annotations

import ast
import os
import shutil
import sys
import types
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from cuforge.core.errors import PatchError
from cuforge.patching import PatchStatus, apply, check, load_patch_set, revert

REPO = Path(__file__).resolve().parents[2]
PATCHES = REPO / "patches"
UPSTREAM = REPO / "tests" / "fixtures" / "upstream"
LIBS = "pointcept_libs/libs"

# patch set -> the fixture tree it applies to (a package directory, as the build pipeline sees it)
TREES = {
    "pointrope": f"{LIBS}/pointrope",
    "pointops2": f"{LIBS}/pointops2",
    "pointseg": f"{LIBS}/pointseg",
    "pointops": f"{LIBS}/pointops",
    "pointgroup_ops": f"{LIBS}/pointgroup_ops",
    "spconv": "spconv",
    "cumm-native-arches": "cumm",
}
OPT_SETS = ("pointops2", "pointseg", "pointops", "pointgroup_ops")


def copy_tree(tmp_path: Path, fixture: str) -> Path:
    root = tmp_path / fixture.replace("/", "_")
    while root.exists():  # a second copy in the same test
        root = root.with_name(root.name + "_")
    shutil.copytree(UPSTREAM / fixture, root)
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def patched(tmp_path: Path, name: str, fixture: str | None = None) -> Path:
    root = copy_tree(tmp_path, fixture or TREES[name])
    apply(load_patch_set(name, PATCHES), root)
    return root


# --- the engine's contract, per set -------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(TREES))
def test_apply_check_idempotent_revert(tmp_path: Path, name: str) -> None:
    ps = load_patch_set(name, PATCHES)
    assert all(p.why for p in ps.patches)
    root = copy_tree(tmp_path, TREES[name])
    pristine = snapshot(root)

    assert {r.status for r in check(ps, root)} == {PatchStatus.NOT_APPLIED}
    assert {r.action for r in apply(ps, root, dry_run=True)} == {"would apply"}
    assert snapshot(root) == pristine

    apply(ps, root)
    assert {r.status for r in check(ps, root)} == {PatchStatus.APPLIED}
    once = snapshot(root)
    assert once != pristine
    assert {r.action for r in apply(ps, root)} == {"already applied"}
    assert snapshot(root) == once

    revert(ps, root)
    assert snapshot(root) == pristine
    assert {r.status for r in check(ps, root)} == {PatchStatus.NOT_APPLIED}


@pytest.mark.parametrize(
    ("name", "file", "old", "new"),
    [
        ("pointrope", "setup.py", 'replace("compute=", "arch=")', 'replace("compute=", "arch=", 1)'),
        ("pointops2", "setup.py", "in opt.split()", "in str(opt).split()"),
        ("pointseg", "setup.py", "in opt.split()", "in str(opt).split()"),
        ("pointops", "setup.py", "in opt.split()", "in str(opt).split()"),
        ("pointgroup_ops", "setup.py", "    include_dirs += INCLUDE_DIRS", "    include_dirs.extend(INCLUDE_DIRS)"),
        ("spconv", "setup.py", '"cumm>=0.7.11, <0.8.0"', '"cumm>=0.7.12, <0.8.0"'),
        ("cumm-native-arches", "cumm/common.py", "['5.3', '6.2', '7.2', '8.7']", "['5.3', '6.2', '8.7']"),
    ],
)
def test_drifted_upstream_raises_and_writes_nothing(tmp_path: Path, name, file, old, new) -> None:
    root = copy_tree(tmp_path, TREES[name])
    target = root / file
    assert old in target.read_text()
    target.write_text(target.read_text().replace(old, new))
    before = snapshot(root)
    with pytest.raises(PatchError) as err:
        apply(load_patch_set(name, PATCHES), root)
    assert file in str(err.value) and "nothing was written" in str(err.value)
    assert snapshot(root) == before


def test_revert_after_a_later_edit_undoes_only_ours(tmp_path: Path) -> None:
    ps = load_patch_set("pointgroup_ops", PATCHES)
    root = copy_tree(tmp_path, TREES["pointgroup_ops"])
    setup_py = root / "setup.py"
    original = setup_py.read_text()
    apply(ps, root)
    setup_py.write_text(setup_py.read_text() + "# a local note\n")
    revert(ps, root)
    assert setup_py.read_text() == original + "# a local note\n"


# --- OPT guard (pointops2, pointseg, pointops, pointgroup_ops) ------------------------------------


class Recorder:
    """Stand-ins for setuptools.setup and the torch extension classes: they record their args."""

    def __init__(self) -> None:
        self.setup_kwargs: dict = {}
        self.extensions: list[dict] = []

    def setup(self, **kwargs) -> None:
        self.setup_kwargs = kwargs

    def extension(self, name, sources=(), **kwargs) -> dict:
        ext = {"name": name, "sources": list(sources), **kwargs}
        self.extensions.append(ext)
        return ext


def run_setup_py(path: Path, monkeypatch, *, opt, gencode: str = "", argv=None) -> Recorder:
    """Execute a setup.py with fake setuptools / torch / distutils modules; return what it passed."""
    rec = Recorder()

    def module(name: str, **attrs) -> types.ModuleType:
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, mod)
        return mod

    module("setuptools", setup=rec.setup, find_packages=lambda **_: [])
    module("distutils")
    module("distutils.sysconfig", get_config_vars=lambda *names: [opt for _ in names])
    cuda = module("torch.cuda", get_gencode_flags=lambda: gencode)
    ext = module("torch.utils.cpp_extension", BuildExtension=object,
                 CUDAExtension=rec.extension, CppExtension=rec.extension)
    module("torch.utils", cpp_extension=ext)
    module("torch", cuda=cuda)
    monkeypatch.setattr(sys, "argv", argv or ["setup.py", "bdist_wheel"])
    monkeypatch.delenv("OPT", raising=False)
    monkeypatch.chdir(path.parent)
    exec(compile(path.read_text(), str(path), "exec"), {"__name__": "__main__", "__file__": str(path)})
    return rec


@pytest.mark.parametrize("name", OPT_SETS)
def test_unpatched_setup_py_crashes_on_a_none_opt(tmp_path: Path, name: str, monkeypatch) -> None:
    root = copy_tree(tmp_path, TREES[name])
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'split'"):
        run_setup_py(root / "setup.py", monkeypatch, opt=None)


@pytest.mark.parametrize("name", OPT_SETS)
def test_opt_guard_builds_with_a_none_opt_and_still_strips(tmp_path: Path, name: str, monkeypatch) -> None:
    setup_py = patched(tmp_path, name) / "setup.py"
    tree = ast.parse(setup_py.read_text())
    splits = [ast.unparse(n) for n in ast.walk(tree)
              if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "split"]
    assert "(opt or '').split()" in splits and "opt.split()" not in splits

    rec = run_setup_py(setup_py, monkeypatch, opt=None)
    assert rec.setup_kwargs["name"] == name and rec.extensions
    assert os.environ["OPT"] == ""
    run_setup_py(setup_py, monkeypatch, opt="-DNDEBUG -g -O3 -Wall -Wstrict-prototypes")
    assert os.environ["OPT"] == "-DNDEBUG -g -O3 -Wall"


def test_opt_guard_matches_the_older_single_quoted_pointops(tmp_path: Path, monkeypatch) -> None:
    fixture = "pointcept_libs/single_quoted/libs/pointops"
    setup_py = patched(tmp_path, "pointops", fixture) / "setup.py"
    assert "for flag in (opt or \"\").split() if flag != '-Wstrict-prototypes'" in setup_py.read_text()
    assert run_setup_py(setup_py, monkeypatch, opt=None).extensions


@pytest.mark.parametrize("name", ["pointops", "pointgroup_ops"])
def test_upstream_if_opt_guard_makes_the_opt_patch_not_needed(tmp_path: Path, name: str) -> None:
    ps = load_patch_set(name, PATCHES)
    root = copy_tree(tmp_path, f"pointcept_libs/opt_guarded/libs/{name}")
    pristine = snapshot(root)
    results = {r.patch_id: r for r in apply(ps, root)}
    assert results["opt-none-guard"].status is PatchStatus.NOT_NEEDED
    assert "if opt" in results["opt-none-guard"].detail
    if name == "pointops":
        assert snapshot(root) == pristine
    else:  # the include-dirs patch still applies next to upstream's own guard
        assert results["include-dirs-env"].action == "applied"
        revert(ps, root)
        assert snapshot(root) == pristine


# --- pointrope: the arch trap -------------------------------------------------------------------

TORCH_GENCODE = "-gencode compute=compute_90,code=sm_90 -gencode compute=compute_120,code=sm_120"


def nvcc_flags(rec: Recorder) -> list[str]:
    (ext,) = rec.extensions
    return ext["extra_compile_args"]["nvcc"]


def test_pointrope_unpatched_passes_torchs_own_arches(tmp_path: Path, monkeypatch) -> None:
    root = copy_tree(tmp_path, TREES["pointrope"])
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "12.1+PTX")
    flags = nvcc_flags(run_setup_py(root / "setup.py", monkeypatch, opt="", gencode=TORCH_GENCODE))
    assert any("arch" in f for f in flags)  # torch would then add no -gencode of its own


def test_pointrope_drops_its_arch_flags_under_torch_cuda_arch_list(tmp_path: Path, monkeypatch) -> None:
    setup_py = patched(tmp_path, "pointrope") / "setup.py"
    ast.parse(setup_py.read_text())

    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "12.1+PTX")
    flags = nvcc_flags(run_setup_py(setup_py, monkeypatch, opt="", gencode=TORCH_GENCODE))
    assert flags == ["-O3", "--ptxas-options=-v", "--use_fast_math"]
    assert not any("arch" in f for f in flags)

    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST")
    flags = nvcc_flags(run_setup_py(setup_py, monkeypatch, opt="", gencode=TORCH_GENCODE))
    assert flags[3:] == ["-gencode", "arch=compute_90,code=sm_90", "-gencode", "arch=compute_120,code=sm_120"]


# --- pointgroup_ops: include dirs from the environment --------------------------------------------


def include_dirs_of(setup_py: Path, monkeypatch, argv=None) -> list[str]:
    return run_setup_py(setup_py, monkeypatch, opt="-O2", argv=argv).setup_kwargs["include_dirs"]


def test_pointgroup_ops_include_dirs_from_the_environment(tmp_path: Path, monkeypatch) -> None:
    setup_py = patched(tmp_path, "pointgroup_ops") / "setup.py"
    assert 'os.environ.get("POINTGROUP_OPS_INCLUDE_DIRS", "")' in setup_py.read_text()

    monkeypatch.delenv("POINTGROUP_OPS_INCLUDE_DIRS", raising=False)
    assert include_dirs_of(setup_py, monkeypatch) == []

    monkeypatch.setenv("POINTGROUP_OPS_INCLUDE_DIRS", os.pathsep.join(["/opt/sh/include", "", "/x"]))
    assert include_dirs_of(setup_py, monkeypatch) == ["/opt/sh/include", "/x"]

    argv = ["setup.py", "--include_dirs=/a,/b", "bdist_wheel"]
    assert include_dirs_of(setup_py, monkeypatch, argv) == ["/a", "/b", "/opt/sh/include", "/x"]
    assert sys.argv == ["setup.py", "bdist_wheel"]  # the custom argument is still consumed


# --- spconv: the cumm pin -----------------------------------------------------------------------


@pytest.mark.parametrize(("cuda", "dist"), [("13.0", "cumm-cu130"), ("", "cumm")])
def test_spconv_accepts_cumm_0_8(tmp_path: Path, monkeypatch, cuda: str, dist: str) -> None:
    def requirement(root: Path) -> Requirement:
        monkeypatch.setenv("CUMM_CUDA_VERSION", cuda)
        rec = run_setup_py(root / "setup.py", monkeypatch, opt="")
        (req,) = [Requirement(r) for r in rec.setup_kwargs["install_requires"] if r.startswith("cumm")]
        return req

    before = requirement(copy_tree(tmp_path, "spconv"))
    after = requirement(patched(tmp_path, "spconv"))
    assert before.name == after.name == dist
    assert not before.specifier.contains("0.8.2")
    assert after.specifier.contains("0.8.2") and after.specifier.contains("0.7.11")
    assert not after.specifier.contains("0.9.1")


# --- cumm: the supported-arch table -------------------------------------------------------------


def arch_flags(common_py: Path, monkeypatch, arch_list: str):
    monkeypatch.setenv("CUMM_CUDA_ARCH_LIST", arch_list)
    namespace: dict = {"__name__": "cumm.common"}
    exec(compile(common_py.read_text(), str(common_py), "exec"), namespace)
    return namespace["_get_cuda_arch_flags"]()


def test_cumm_unpatched_rejects_12_1(tmp_path: Path, monkeypatch) -> None:
    root = copy_tree(tmp_path, "cumm")
    with pytest.raises(ValueError, match=r"Unknown CUDA arch \(12.1\)"):
        arch_flags(root / "cumm/common.py", monkeypatch, "9.0;12.1")


def test_cumm_native_arches_give_12_1_its_own_sass(tmp_path: Path, monkeypatch) -> None:
    common_py = patched(tmp_path, "cumm-native-arches") / "cumm/common.py"
    flags, nums, has_ptx = arch_flags(common_py, monkeypatch, "9.0;10.3;11.0;12.1+PTX")
    assert "-gencode=arch=compute_121,code=[sm_121,compute_121]" in flags
    assert "-gencode=arch=compute_103,code=sm_103" in flags
    assert "-gencode=arch=compute_110,code=sm_110" in flags
    assert nums == [(9, 0), (10, 3), (11, 0), (12, 1)] and has_ptx
    with pytest.raises(ValueError, match=r"Unknown CUDA arch \(12.2\)"):
        arch_flags(common_py, monkeypatch, "12.2")


def test_cumm_native_arches_not_needed_when_upstream_has_12_1(tmp_path: Path) -> None:
    root = copy_tree(tmp_path, "cumm")
    common_py = root / "cumm/common.py"
    common_py.write_text(
        common_py.read_text()
        .replace('"10.0", "12.0",', '"10.0", "10.3", "11.0", "12.0", "12.1",')
        .replace("    supported_arches += ['5.3', '6.2', '7.2', '8.7']\n", "    supported_arches += ['5.3', '8.7']\n")
    )
    (result,) = apply(load_patch_set("cumm-native-arches", PATCHES), root)
    assert result.status is PatchStatus.NOT_NEEDED


def test_recipes_name_the_sets() -> None:
    import tomllib

    for name in ("pointrope", "pointops2", "pointseg", "pointops", "pointgroup_ops", "spconv"):
        recipe = tomllib.loads((REPO / "recipes" / f"{name}.toml").read_text())
        assert recipe["patches"] == [name]
    cumm = tomllib.loads((REPO / "recipes" / "cumm.toml").read_text())
    # always: the toolkit's target dir (aarch64); the arch table only under the native policy
    assert cumm["patches"] == ["cumm"]
    assert cumm["arches"]["native_patches"] == ["cumm-native-arches"]
    spconv = tomllib.loads((REPO / "recipes" / "spconv.toml").read_text())
    assert "native_patches" not in spconv["arches"]  # spconv reads the installed cumm's table
