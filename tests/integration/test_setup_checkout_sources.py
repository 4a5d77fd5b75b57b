"""``cuforge setup STACK --checkout PATH`` builds the checkout's own packages (issue 50, point 1):
the dry run says per package "from your checkout: FOLDER @ REVISION" and plans no fetch of
the pinned repository; a folder the checkout lacks falls back to the pin; ``--pinned`` plans
upstream's pinned copies as before; a recipe patch that does not apply to the user's copy is
named (file and patch) with ``--pinned`` as the way out, before anything is built or written;
the user's tree is never written. The CLI runs as a subprocess on copies of the MILo- and
Pointcept-shaped fixture trees; no torch is needed (the dry run and the refusal come first)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gitrepo import git
from patch_hashes import function_hash_in

from cuforge.core.errors import PatchError

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = ROOT / "tests" / "fixtures" / "upstream"
MILO_PACKAGES = {"simple-knn": "submodules/simple-knn",
                 "diff-gaussian-rasterization": "submodules/diff-gaussian-rasterization",
                 "diff-gaussian-rasterization_ms": "submodules/diff-gaussian-rasterization_ms",
                 "diff-gaussian-rasterization_gof": "submodules/diff-gaussian-rasterization_gof",
                 "fused-ssim": "submodules/fused-ssim",
                 "tetra-triangulation (TETRA_SOURCE_DIR)": "submodules/tetra_triangulation"}

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="no git on PATH")


def project(tmp_path: Path) -> Path:
    """This project, its milo set expecting the fixture's nvdiff_rasterization (whose body is
    ours, so upstream's recorded code hash cannot match it: see fixture_sets.py)."""
    proj = tmp_path / "proj"
    if proj.exists():
        return proj
    for name in ("envs", "recipes", "stacks", "patches"):
        shutil.copytree(ROOT / name, proj / name)
    for name in ("smoke", "native"):
        (proj / name).symlink_to(ROOT / name)
    mesh = (UPSTREAM / "milo" / "milo" / "scene" / "mesh.py").read_text()
    milo_set = proj / "patches" / "milo" / "patch.toml"
    upstream = re.search(r'original_sha256 = "([0-9a-f]{64})"', milo_set.read_text())[1]
    milo_set.write_text(milo_set.read_text().replace(
        upstream, function_hash_in(mesh, "nvdiff_rasterization")))
    return proj


def setup(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUFORGE_ROOT": str(project(tmp_path)),
           "CUFORGE_STATE": str(tmp_path / "state"),
           "CUFORGE_WHEELHOUSE": str(tmp_path / "wh"), "COLUMNS": "400"}
    env.pop("CUFORGE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "cuforge", "setup", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def tree_hash(root: Path) -> str:
    """Every file's path, mode and bytes (git's own files included)."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(f"{path.relative_to(root)}\0{path.stat().st_mode}\0".encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def milo(tmp_path: Path, *, commit: bool = True) -> Path:
    checkout = tmp_path / "MILo"
    shutil.copytree(UPSTREAM / "milo", checkout, ignore=shutil.ignore_patterns("__pycache__"))
    if commit:
        git(checkout, "init", "--quiet", "--initial-branch=main")
        git(checkout, "add", "-A")
        git(checkout, "commit", "--quiet", "-m", "fixture: MILo-shaped tree")
        git(checkout, "tag", "v1.0")
    return checkout


def sources(out: str) -> dict[str, str]:
    """The dry run's source lines: {package: where from}."""
    block = out.split("   sources", 1)[1].split("\n2. ", 1)[0]
    return dict(re.findall(r"^     ([^:\n]+): (.*)$", block, re.M))


def test_the_dry_run_builds_each_package_from_the_checkout(tmp_path):
    checkout = milo(tmp_path)
    before = tree_hash(checkout)
    run = setup(tmp_path, "milo", "--checkout", str(checkout), "--dry-run")
    assert run.returncode == 0, run.stderr
    said = sources(run.stdout)
    for package, folder in MILO_PACKAGES.items():
        assert said[package] == f"from your checkout: {folder} @ v1.0", said
    assert "Anttwo/MILo" not in run.stdout            # no fetch of MILo at the recipe's pin
    assert said["nvdiffrast"].startswith("pinned https://github.com/NVlabs/nvdiffrast.git@")
    assert tree_hash(checkout) == before              # not one byte of the user's tree


def test_an_edit_in_the_checkout_shows_in_the_revision(tmp_path):
    """An edited folder is named by the content the build key holds: another edit, another
    content hash (and so another key: a rebuild)."""
    checkout = milo(tmp_path)
    spatial = checkout / "submodules" / "simple-knn" / "spatial.cu"
    spatial.write_text(spatial.read_text() + "// my change\n")
    one = sources(setup(tmp_path, "milo", "--checkout", str(checkout), "--dry-run").stdout)
    assert re.fullmatch(r"from your checkout: submodules/simple-knn @ v1\.0 \+ your edits "
                        r"\(content [0-9a-f]{12}\)", one["simple-knn"]), one
    assert one["fused-ssim"] == "from your checkout: submodules/fused-ssim @ v1.0"
    spatial.write_text(spatial.read_text() + "// and another\n")
    two = sources(setup(tmp_path, "milo", "--checkout", str(checkout), "--dry-run").stdout)
    assert two["simple-knn"] != one["simple-knn"]


def test_a_plain_tree_is_named_by_its_content_and_a_missing_folder_is_fetched(tmp_path):
    checkout = milo(tmp_path, commit=False)
    shutil.rmtree(checkout / "submodules" / "diff-gaussian-rasterization_ms")
    said = sources(setup(tmp_path, "milo", "--checkout", str(checkout), "--dry-run").stdout)
    assert re.fullmatch(r"from your checkout: submodules/simple-knn @ content [0-9a-f]{12}",
                        said["simple-knn"]), said
    assert re.fullmatch(r"pinned https://github\.com/Anttwo/MILo\.git@[0-9a-f]{40}:submodules/"
                        r"diff-gaussian-rasterization_ms \(your checkout has no submodules/"
                        r"diff-gaussian-rasterization_ms\)",
                        said["diff-gaussian-rasterization_ms"]), said


def test_pinned_plans_upstreams_pinned_copies(tmp_path):
    checkout = milo(tmp_path)
    run = setup(tmp_path, "milo", "--checkout", str(checkout), "--dry-run", "--pinned")
    assert run.returncode == 0, run.stderr
    said = sources(run.stdout)
    assert "from your checkout" not in run.stdout
    for package, folder in MILO_PACKAGES.items():
        assert re.fullmatch(rf"pinned https://github\.com/Anttwo/MILo\.git@[0-9a-f]{{40}}:"
                            rf"{folder} \(--pinned\)", said[package]), said


def test_pointcept_libs_come_from_the_checkout(tmp_path):
    checkout = tmp_path / "Pointcept"
    shutil.copytree(UPSTREAM / "pointcept", checkout)
    shutil.copytree(UPSTREAM / "pointcept_libs" / "libs", checkout / "libs")
    before = tree_hash(checkout)
    run = setup(tmp_path, "pointcept", "--checkout", str(checkout), "--dry-run")
    assert run.returncode == 0, run.stderr
    said = sources(run.stdout)
    assert said["pointops"].startswith("from your checkout: libs/pointops @ content ")
    assert said["pointgroup_ops"].startswith("from your checkout: libs/pointgroup_ops @ content ")
    assert "Pointcept/Pointcept" not in run.stdout
    assert tree_hash(checkout) == before


def test_a_patch_that_does_not_apply_names_file_patch_and_pinned(tmp_path):
    """simple-knn's patch set inserts <cfloat> after <cooperative_groups/reduce.h>; a checkout
    whose copy no longer has that line: setup refuses before any build, venv or patch (exit
    5), naming the file, the patch and --pinned, and its dry run says the same; the user's
    tree stays as it was. With --pinned the plan goes on."""
    checkout = milo(tmp_path)
    knn = checkout / "submodules" / "simple-knn" / "simple_knn.cu"
    knn.write_text(knn.read_text().replace("#include <cooperative_groups/reduce.h>\n", ""))
    before = tree_hash(checkout)

    runs = [setup(tmp_path, "milo", "--checkout", str(checkout), "--venv",
                  str(tmp_path / "venv"), *dry) for dry in (["--dry-run"], [])]
    for run in runs:
        assert run.returncode == PatchError.exit_code, run.stderr
        assert not run.stdout and "Traceback" not in run.stderr
        first, *rest = run.stderr.splitlines()
        assert first.startswith("cuforge: patch error: simple-knn: patches/simple-knn does not "
                                "apply to your checkout's copy: simple_knn.cu [cfloat-include]")
        assert any(x.startswith("  fix: ") and "cuforge setup milo --pinned" in x for x in rest)
    assert runs[0].stderr == runs[1].stderr
    assert not (tmp_path / "venv").exists() and not (tmp_path / "wh").exists()
    assert not (tmp_path / "state").exists()
    assert tree_hash(checkout) == before

    pinned = setup(tmp_path, "milo", "--checkout", str(checkout), "--dry-run", "--pinned")
    assert pinned.returncode == 0 and "does not apply" not in pinned.stdout


def test_an_optional_package_whose_patch_does_not_apply_is_said_not_refused(tmp_path):
    """tetra-triangulation and the _gof rasterizer are optional: a drift there is one line in
    the plan (the build reports that package failed, not fatal), and the rest goes on."""
    checkout = milo(tmp_path)
    gof = checkout / "submodules" / "diff-gaussian-rasterization_gof"
    patch_set = (ROOT / "patches" / "diff-gaussian-rasterization_gof" / "patch.toml").read_text()
    target = re.search(r'^file = "([^"]+)"', patch_set, re.M)[1]
    assert (gof / target).is_file()
    (gof / target).write_text("// the user's own rewrite\n")
    run = setup(tmp_path, "milo", "--checkout", str(checkout), "--dry-run")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    at = next(i for i, x in enumerate(lines) if "does not apply" in x)
    assert lines[at].strip().startswith("diff-gaussian-rasterization_gof: patches/"
                                        "diff-gaussian-rasterization_gof does not apply")
    assert f"{target} [" in lines[at]
    assert "fix:" in lines[at + 1] and "cuforge setup milo --pinned" in lines[at + 1]
