"""The real patch sets under patches/ on upstream-shaped fixture trees (copied to tmp_path)."""

from __future__ import annotations

import ast
import os
import re
import shutil
from pathlib import Path

import pytest
from fixture_sets import fixture_set

from cuforge.core.errors import PatchError
from cuforge.patching import PatchStatus, apply, available_sets, check, load_patch_set, revert

REPO = Path(__file__).resolve().parents[2]
PATCHES = REPO / "patches"
UPSTREAM = REPO / "tests" / "fixtures" / "upstream"

# patch set -> fixture tree it applies to (build-time sets apply to a package directory)
TREES = {
    "milo": "milo",
    "pointcept": "pointcept",
    "diff-gaussian-rasterization": "milo/submodules/diff-gaussian-rasterization",
    "diff-gaussian-rasterization_ms": "milo/submodules/diff-gaussian-rasterization_ms",
    "diff-gaussian-rasterization_gof": "milo/submodules/diff-gaussian-rasterization_gof",
    "simple-knn": "milo/submodules/simple-knn",
    "swin3d": "swin3d",
    "flash-attn": "flash_attn",
    "cumm": "cumm",
}


def copy_tree(tmp_path: Path, name: str) -> Path:
    root = tmp_path / name.replace("/", "_")
    shutil.copytree(UPSTREAM / TREES[name], root)
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_every_set_has_a_fixture_tree() -> None:
    # the Pointcept build sets are exercised in test_patch_pointcept_builds.py
    from test_patch_pointcept_builds import TREES as POINTCEPT_SETS  # noqa: PLC0415
    # the field fixes (field-*) each have their case in tests/unit/test_field_fixes.py
    field = {n for n in available_sets(PATCHES) if n.startswith("field-")}
    assert sorted(available_sets(PATCHES)) == sorted({*TREES, *POINTCEPT_SETS, *field})


@pytest.mark.parametrize("name", sorted(TREES))
def test_apply_check_idempotent_revert(tmp_path: Path, name: str) -> None:
    root = copy_tree(tmp_path, name)
    ps = fixture_set(name, root)
    pristine = snapshot(root)

    assert all(r.status is PatchStatus.NOT_APPLIED for r in check(ps, root))
    assert {r.action for r in apply(ps, root, dry_run=True)} == {"would apply"}
    assert snapshot(root) == pristine

    apply(ps, root)
    assert all(r.status is PatchStatus.APPLIED for r in check(ps, root))
    patched = snapshot(root)
    assert {r.action for r in apply(ps, root)} == {"already applied"}
    assert snapshot(root) == patched

    revert(ps, root)
    assert snapshot(root) == pristine


@pytest.mark.parametrize(
    ("name", "file", "old", "new", "expected"),
    [
        ("milo", "milo/scene/mesh.py", "[image_height, image_width]", "[image_width, image_height]",
         "nvdiff_rasterization"),
        (
            "diff-gaussian-rasterization_ms",
            "cuda_rasterizer/forward.cu",
            "Reduce(last_contributor, cub::Max());",
            "Reduce(last_contributor, MyMax());",
            "Reduce(last_contributor, cub::Max());",
        ),
        ("pointcept", "pointcept/models/builder.py", "MODELS.build(", "MODELS.make(", "MODELS.build("),
    ],
)
def test_drifted_upstream_writes_nothing(tmp_path, name, file, old, new, expected) -> None:
    root = copy_tree(tmp_path, name)
    ps = fixture_set(name, root)
    target = root / file
    target.write_text(target.read_text().replace(old, new))
    before = snapshot(root)
    with pytest.raises(PatchError) as err:
        apply(ps, root)
    assert file in str(err.value) and expected in str(err.value)
    assert snapshot(root) == before


def test_recorded_function_hash_refuses_a_function_that_is_not_upstreams(tmp_path: Path) -> None:
    """patch.toml records upstream's code hash; the fixture's own nvdiff_rasterization is drift to it."""
    root = copy_tree(tmp_path, "milo")
    before = snapshot(root)
    with pytest.raises(PatchError) as err:
        apply(load_patch_set("milo", PATCHES), root)
    assert "nvdiff_rasterization changed upstream" in str(err.value)
    assert snapshot(root) == before


def test_patched_mesh_parses_with_the_same_signature(tmp_path: Path) -> None:
    root = copy_tree(tmp_path, "milo")
    mesh = root / "milo/scene/mesh.py"

    def signature(source: str) -> str:
        fn = next(n for n in ast.parse(source).body if getattr(n, "name", "") == "nvdiff_rasterization")
        args = fn.args
        defaults = [ast.unparse(d) for d in args.defaults]
        return f"{[a.arg for a in args.args]} {defaults}"

    before = signature(mesh.read_text())
    apply(fixture_set("milo", root), root)
    source = mesh.read_text()
    assert signature(source) == before
    assert before == (
        "['camera', 'image_height', 'image_width', 'verts', 'faces', 'return_indices_only', "
        "'glctx', 'return_rast_out', 'return_positions'] ['False', 'None', 'False', 'False']"
    )
    names = [getattr(n, "name", "") for n in ast.parse(source).body]
    assert names.index("_cuforge_merge_nearest") < names.index("nvdiff_rasterization")
    assert "ranges=ranges" in source and 'os.environ.get("NVDIFRAST_BACKEND"' in source


# Every spelling of numpy's in1d the fixture holds, and what must stay (a method of another
# class, text in a string); counted with plain regexes, independently of the patch's AST walk.
IN1D_USES = re.compile(r"(?<![\"\w])(?:np|numpy|_np)\.in1d\(|from numpy import in1d\b")


def _in1d_uses(root: Path) -> dict[str, int]:
    found = {str(p.relative_to(root)): len(IN1D_USES.findall(p.read_text()))
             for p in root.rglob("*.py") if ".cuforge-patches" not in p.parts}
    return {f: n for f, n in found.items() if n}


def test_pointcept_numpy2_leaves_no_in1d_anywhere(tmp_path: Path) -> None:
    root = copy_tree(tmp_path, "pointcept")
    before = _in1d_uses(root)
    assert set(before) == {"pointcept/engines/hooks/evaluator.py", "pointcept/engines/test.py",
                           "pointcept/datasets/transform.py", "pointcept/models/sgiFormer/hooks.py",
                           "pointcept/utils/numpy_spellings.py"}
    results = apply(load_patch_set("pointcept", PATCHES), root)
    touched = {r.file for r in results if r.patch_id == "numpy2-isin" and r.changed}
    assert touched == set(before)
    assert _in1d_uses(root) == {}
    spellings = (root / "pointcept/utils/numpy_spellings.py").read_text()
    for kept in ("def in1d(self, values, table)", "Labels().in1d(segment, ignore)",
                 '"np.in1d(segment, ignore) is only text here"', "numpy.isin(segment, ignore)",
                 "from numpy import isin as in1d", "from numpy import isin as member_of",
                 "return _np.isin(\n"):
        assert kept in spellings, kept
    transform = (root / "pointcept/datasets/transform.py").read_text()
    assert "mask = ~np.isin(segment, self.segment_ignore_index)  # cuforge:" in transform
    for file in before:
        compile((root / file).read_text(), file, "exec")


def test_pointcept_patches(tmp_path: Path) -> None:
    root = copy_tree(tmp_path, "pointcept")
    apply(load_patch_set("pointcept", PATCHES), root)
    builder = (root / "pointcept/models/builder.py").read_text()
    assert "return force_native_algo(MODELS.build(copy.deepcopy(cfg)))" in builder
    ast.parse(builder)
    ast.parse((root / "pointcept/utils/spconv_algo.py").read_text())


def test_a_checkout_without_in1d_gets_one_not_needed_row(tmp_path: Path) -> None:
    root = copy_tree(tmp_path, "pointcept")
    apply(load_patch_set("pointcept", PATCHES), root)
    for path in root.rglob("*.py"):       # a newer checkout: np.isin already, no cuforge marker
        path.write_text(path.read_text().replace("  # cuforge: np.in1d is gone in NumPy 2", ""))
    rows = [r for r in check(load_patch_set("pointcept", PATCHES), root) if r.patch_id == "numpy2-isin"]
    assert [(r.status, r.file) for r in rows] == [(PatchStatus.NOT_NEEDED, "**/*.py")]


def test_edited_after_patching_reverts_by_the_markers(tmp_path: Path) -> None:
    """Without the backup (the user changed the file since), revert undoes the rename only."""
    root = copy_tree(tmp_path, "pointcept")
    target = root / "pointcept/datasets/transform.py"
    original = target.read_text()
    ps = load_patch_set("pointcept", PATCHES)
    apply(ps, root)
    target.write_text(target.read_text() + "\n# a local change\n")
    revert(ps, root)
    assert target.read_text() == original + "\n# a local change\n"


def test_glm_moves_out_of_nvcc_flags(tmp_path: Path) -> None:
    """After the patch no nvcc flag mentions a path, so torch keeps adding -gencode flags."""
    for name in ("diff-gaussian-rasterization", "diff-gaussian-rasterization_ms", "diff-gaussian-rasterization_gof"):
        root = copy_tree(tmp_path, name)
        apply(load_patch_set(name, PATCHES), root)
        tree = ast.parse((root / "setup.py").read_text())
        call = next(
            n for n in ast.walk(tree)
            if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "CUDAExtension"
        )
        keywords = {k.arg: k.value for k in call.keywords}
        assert "third_party/glm/" in ast.unparse(keywords["include_dirs"])
        assert "glm" not in ast.unparse(keywords["extra_compile_args"])


def _list_assignments(source: str) -> dict[str, list]:
    """Every ``name = [literal, ...]`` in a setup.py, by name."""
    return {node.targets[0].id: ast.literal_eval(node.value)
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.List)
            and isinstance(node.targets[0], ast.Name)
            and all(isinstance(e, ast.Constant) for e in node.value.elts)}


def test_flash_attn_cuda_flags_become_cxx20_and_rocm_is_left(tmp_path: Path) -> None:
    root = copy_tree(tmp_path, "flash-attn")
    apply(load_patch_set("flash-attn", PATCHES), root)
    lists = _list_assignments((root / "setup.py").read_text())
    assert "-std=c++20" in lists["nvcc_flags"] and "-std=c++17" not in lists["nvcc_flags"]
    assert lists["compiler_c17_flag"] == ["-O3", "-std=c++20"]
    assert "-std=c++17" in lists["rocm_flags"]       # the ROCm branch is not ours to change


def fixture_nvcc_flags(root: Path, tmp_path: Path, archs: str, cuda: str = "13.0") -> list[str]:
    """The arch flags the fixture setup.py passes to nvcc, run against an nvcc that reports
    ``cuda`` (setup.py only asks it for its version)."""
    import json
    import subprocess
    import sys
    home = tmp_path / f"cuda-{cuda}"
    (home / "bin").mkdir(parents=True, exist_ok=True)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {cuda}, V{cuda}.1'\n")
    nvcc.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "CUDA_HOME": str(home), "FLASH_ATTN_CUDA_ARCHS": archs}
    done = subprocess.run([sys.executable, "setup.py"], cwd=root, env=env, capture_output=True,
                          text=True, check=False)
    if done.returncode:
        raise RuntimeError(done.stderr.strip().splitlines()[-1])
    nvcc_flags = json.loads(done.stdout)["nvcc"]
    return nvcc_flags[nvcc_flags.index("-gencode"):] if "-gencode" in nvcc_flags else []


SPARK = ["-gencode", "arch=compute_121,code=[sm_121,compute_121]",
         "-gencode", "arch=compute_120,code=sm_120"]


@pytest.mark.parametrize(("archs", "cuda", "flags"), [
    ("121+PTX;120", "13.0", SPARK),
    ("80-virtual", "13.0", ["-gencode", "arch=compute_80,code=compute_80"]),
    ("90+PTX", "13.0", ["-gencode", "arch=compute_90,code=[sm_90,compute_90]"]),
    ("120a", "12.9", ["-gencode", "arch=compute_120a,code=sm_120a"]),
    ("121+PTX;120", "12.8", ["-gencode", "arch=compute_120,code=sm_120"]),   # 121 needs 12.9
    ("", "13.0", []),
])
def test_flash_attn_patched_arch_block_gives_one_gencode_per_entry(
        tmp_path: Path, archs: str, cuda: str, flags: list[str]) -> None:
    root = copy_tree(tmp_path, "flash-attn")
    apply(load_patch_set("flash-attn", PATCHES), root)
    assert fixture_nvcc_flags(root, tmp_path, archs, cuda) == flags


def test_flash_attn_upstream_default_list_keeps_its_flags(tmp_path: Path) -> None:
    upstream = fixture_nvcc_flags(UPSTREAM / TREES["flash-attn"], tmp_path, "80;90;100;120")
    root = copy_tree(tmp_path, "flash-attn")
    apply(load_patch_set("flash-attn", PATCHES), root)
    assert fixture_nvcc_flags(root, tmp_path, "80;90;100;120") == upstream
    assert upstream[1::2] == [f"arch=compute_{a},code=sm_{a}" for a in (80, 90, 100, 120)]


def test_flash_attn_unpatched_drops_121_and_ptx_silently(tmp_path: Path) -> None:
    """Control: what the patch fixes - no flag for 121, no PTX, no error."""
    tree = UPSTREAM / TREES["flash-attn"]
    assert fixture_nvcc_flags(tree, tmp_path, "121+PTX;120") == SPARK[2:]
    assert fixture_nvcc_flags(tree, tmp_path, "121") == []


def test_flash_attn_patched_refuses_an_arch_it_cannot_build(tmp_path: Path) -> None:
    root = copy_tree(tmp_path, "flash-attn")
    apply(load_patch_set("flash-attn", PATCHES), root)
    with pytest.raises(RuntimeError, match="FLASH_ATTN_CUDA_ARCHS: '75' is not an arch"):
        fixture_nvcc_flags(root, tmp_path, "75")


def _load_common(root: Path):
    import importlib.util
    spec = importlib.util.spec_from_file_location("fixture_cumm_common", root / "cumm/common.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _toolkit(tmp_path: Path, target_dir: str) -> Path:
    """A toolkit laid out as the PyPI wheels lay it out for one machine: nvcc, libcudart,
    cuda.h under targets/<target_dir>/include."""
    kit = tmp_path / f"cuda-{target_dir}"
    (kit / "bin").mkdir(parents=True)
    (kit / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (kit / "bin" / "nvcc").chmod(0o755)
    (kit / "lib").mkdir()
    (kit / "lib" / "libcudart.so").write_bytes(b"")
    (kit / "targets" / target_dir / "include").mkdir(parents=True)
    (kit / "targets" / target_dir / "include" / "cuda.h").write_text("")
    return kit


@pytest.mark.parametrize(("machine", "target_dir"), [("aarch64", "sbsa-linux"),
                                                      ("x86_64", "x86_64-linux")])
def test_cumm_finds_the_toolkit_beside_nvcc_on_its_machine(tmp_path, monkeypatch, machine,
                                                          target_dir) -> None:
    """Unpatched, cumm links an aarch64 build against /usr/local/cuda (this machine's x86_64
    CUDA under emulation: `cannot find -lcudart`); patched, against the combo's toolkit."""
    import platform
    kit = _toolkit(tmp_path, target_dir)
    monkeypatch.setenv("PATH", f"{kit / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setattr(platform, "machine", lambda: machine)
    root = copy_tree(tmp_path, "cumm")
    if machine == "aarch64":
        assert _load_common(root)._get_cuda_include_lib()[1] == Path("/usr/local/cuda/lib64")
    apply(fixture_set("cumm", root), root)
    includes, lib = _load_common(root)._get_cuda_include_lib()
    assert (includes, lib) == ([kit / "targets" / target_dir / "include"], kit / "lib")
