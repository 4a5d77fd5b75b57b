"""``cuforge setup --checkout PATH`` without a stack name, on checkouts in the field's shapes
(issue 61): tests/fixtures/checkouts/gaussian_splatting (3DGS: vendored submodules/*, entry
scripts), a 2DGS shape (its rasterizer a git submodule that is not checked out, with a nested
submodule of its own), and two forks sharing one project name.

The dry runs read and fetch only; the builds compile the fixtures' tiny kernels (CUDA headers
only, Python's C API modules) for one arch, into a venv whose torch comes from the combo
interpreter's .pth. Slow: a few nvcc runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from gitrepo import git
from test_setup_checkout_sources import tree_hash

from conftest import torch_python

REPO = Path(__file__).resolve().parents[2]
GS = REPO / "tests" / "fixtures" / "checkouts" / "gaussian_splatting"
RASTERIZER = "submodules/diff-gaussian-rasterization"

pytestmark = [pytest.mark.skipif(torch_python() is None, reason="needs CUFORGE_TEST_TORCH_PYTHON"),
              pytest.mark.skipif(shutil.which("git") is None, reason="no git on PATH")]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A cuforge project whose only combo runs the test torch as its interpreter; no stacks,
    no recipes: everything setup builds is discovered."""
    proj = tmp_path / "proj"
    (proj / "envs").mkdir(parents=True)
    shutil.copy(REPO / "envs" / "accels.toml", proj / "envs")
    (proj / "envs" / "combos.toml").write_text(
        '[[combo]]\npython = "3.11"\naccel = "cu130"\ntorch = "2.14.1"\nname = "field"\n'
        f'interpreter = "{torch_python()}"\narches = "12.0"\n')
    for folder in ("recipes", "patches"):   # a MILo checkout still gets its stack
        (proj / folder).symlink_to(REPO / folder)
    shutil.copytree(REPO / "stacks", proj / "stacks")   # stack new writes here
    return proj


def cuforge(proj: Path, *args: str, wheelhouse: Path | None = None,
            combo: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUFORGE_ROOT": str(proj), "CUFORGE_STATE": str(proj / ".state"),
           "CUFORGE_WHEELHOUSE": str(wheelhouse or proj / "wh"), "COLUMNS": "200",
           "CUFORGE_CACHE": "off"}
    env.pop("CUFORGE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "cuforge", *args,
                           *(("--combo", "field") if combo else ())],
                          capture_output=True,
                          text=True, env=env, cwd=proj, timeout=900)


def gaussian_splatting(where: Path, name: str = "gaussian-splatting") -> Path:
    checkout = where / name
    shutil.copytree(GS, checkout, ignore=shutil.ignore_patterns("__pycache__"))
    (checkout / ".venv").mkdir()
    (checkout / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (checkout / "build" / "lib").mkdir(parents=True)
    return checkout


def test_dry_run_lists_each_extension_why_and_each_folder_left_out(project, tmp_path):
    checkout = gaussian_splatting(tmp_path)
    before = tree_hash(checkout)
    run = cuforge(project, "setup", "--checkout", str(checkout), "--dry-run")
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert "discovered in" in out and "2 torch extensions" in out
    assert (f"diff-gaussian-rasterization@gaussian-splatting: {RASTERIZER} (setuptools)"
            in out), out
    assert f"why: {RASTERIZER}/setup.py:13 CUDAExtension(diff_gaussian_rasterization._C)" in out
    assert "why: submodules/simple-knn/setup.py:6 CUDAExtension(simple_knn._C)" in out
    assert "left out: .venv (a virtual environment (pyvenv.cfg))" in out
    assert "left out: build (a build output folder)" in out
    assert (f"left out: {RASTERIZER}/third_party/glm (its CMakeLists.txt does not find Torch)"
            in out)
    assert ("fix: field-cstdint (<cstdint> where fixed-width integers are used without it): "
            "cuda_rasterizer/rasterizer_impl.h") in out
    assert "1. build: diff-gaussian-rasterization@gaussian-splatting, " in out
    assert tree_hash(checkout) == before

    as_json = cuforge(project, "setup", "--checkout", str(checkout), "--dry-run", "--json")
    doc = json.loads(as_json.stdout)
    assert doc["stack_from"] == "discovered" and doc["stack"] == "gaussian-splatting"
    assert [d["folder"] for d in doc["discovered"]] == [RASTERIZER, "submodules/simple-knn"]
    assert doc["discovered"][0]["fixes"] == ["field-cstdint"]
    assert doc["discovered"][0]["why"] == [
        f"{RASTERIZER}/setup.py:13 CUDAExtension(diff_gaussian_rasterization._C)"]
    assert {"folder": ".venv", "reason": "a virtual environment (pyvenv.cfg)"} in doc["left_out"]


def test_a_fork_with_a_recipes_api_gets_that_recipes_smoke(project, tmp_path):
    checkout = gaussian_splatting(tmp_path)
    module = checkout / "submodules" / "simple-knn" / "simple_knn.cpp"
    module.write_text(module.read_text().replace('{"kernel", kernel', '{"distCUDA2", kernel'))
    run = cuforge(project, "setup", "--checkout", str(checkout), "--dry-run", "--json")
    smoke = {d["folder"]: d["smoke"] for d in json.loads(run.stdout)["discovered"]}
    assert smoke == {RASTERIZER: None, "submodules/simple-knn": "smoke/check_simple-knn.py"}
    assert ("smoke: smoke/check_simple-knn.py (the simple-knn recipe's: it builds simple_knn._C "
            "defining distCUDA2)") in run.stderr, run.stderr


def test_stack_new_writes_what_discovery_found_and_setup_plans_the_same_build(project, tmp_path):
    checkout = gaussian_splatting(tmp_path)
    discovered = json.loads(cuforge(project, "setup", "--checkout", str(checkout), "--dry-run",
                                    "--json").stdout)
    wrote = cuforge(project, "stack", "new", str(checkout), combo=False)
    assert wrote.returncode == 0, wrote.stderr
    text = (project / "stacks" / "gaussian-splatting.toml").read_text()
    assert 'folder = "submodules/diff-gaussian-rasterization"' in text
    assert 'fixes = ["field-cstdint"]' in text and 'entry_scripts = ["render.py", "train.py"]' in text
    assert 'spec = "plyfile"' in text and "submodules/simple-knn\"" not in text.split("[[requirement]]", 1)[1]
    again = cuforge(project, "stack", "new", str(checkout), combo=False)
    assert again.returncode == 2 and "exists" in again.stderr and "--force" in again.stderr
    named = json.loads(cuforge(project, "setup", "gaussian-splatting", "--checkout",
                               str(checkout), "--dry-run", "--json").stdout)
    for key in ("wheels", "required", "to_build"):
        assert named[key] == discovered[key], key
    assert named["stack_from"].startswith("the gaussian-splatting stack (gaussian-splatting.toml")


def test_a_known_stack_checkout_gets_its_stack_and_an_empty_one_is_refused(project, tmp_path):
    milo = tmp_path / "MILo"
    (milo / "milo").mkdir(parents=True)
    run = cuforge(project, "setup", "--checkout", str(milo), "--dry-run", "--json")
    assert json.loads(run.stdout)["stack"] == "milo", run.stderr
    assert "a MILo checkout (milo/ is in it): the milo stack" in run.stderr

    empty = tmp_path / "notes"
    (empty / "docs").mkdir(parents=True)
    refused = cuforge(project, "setup", "--checkout", str(empty), "--dry-run")
    assert refused.returncode == 8, refused.stderr
    assert "no torch extension build found in" in refused.stderr
    assert "Traceback" not in refused.stderr


GOF_TETRA = REPO / "tests" / "fixtures" / "checkouts" / "gof_tetra"


def test_a_gof_shape_commented_out_ext_modules_and_a_cmake_extension_are_found(project, tmp_path):
    checkout = gaussian_splatting(tmp_path, name="gaussian-opacity-fields")
    shutil.copytree(GOF_TETRA, checkout / "submodules" / "tetra-triangulation")
    run = cuforge(project, "setup", "--checkout", str(checkout), "--dry-run", "--json")
    assert run.returncode == 0, run.stderr
    found = {d["folder"]: d for d in json.loads(run.stdout)["discovered"]}
    assert found["submodules/tetra-triangulation"]["kind"] == "cmake"
    assert found["submodules/tetra-triangulation"]["why"] == [
        "submodules/tetra-triangulation/CMakeLists.txt:4 find_package(Torch)",
        "submodules/tetra-triangulation/setup.py:10 CMakeExtension(cmake_example) (commented out)"]
    assert found["submodules/tetra-triangulation"]["required"] is False
    assert found[RASTERIZER]["required"] is True
    assert ("tetra-nerf@gaussian-opacity-fields: submodules/tetra-triangulation (cmake) "
            "(optional: a CMake build the checkout's pip install does not run)") in run.stderr


def _repo(path: Path, files: dict[str, str]) -> str:
    """A git repository at ``path`` holding ``files``; its commit."""
    for rel, text in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    git(path, "init", "--quiet", "--initial-branch=main")
    git(path, "add", "-A")
    git(path, "commit", "--quiet", "-m", "fixture")
    return git(path, "rev-parse", "HEAD")


def _with_submodule(repo: Path, path: str, url: str, commit: str) -> None:
    """Record ``url`` @ ``commit`` as a submodule at ``path`` (a gitlink and .gitmodules), as
    ``git submodule add`` would, without fetching it."""
    gitmodules = repo / ".gitmodules"
    previous = gitmodules.read_text() if gitmodules.exists() else ""
    gitmodules.write_text(previous + f'[submodule "{path}"]\n\tpath = {path}\n\turl = {url}\n')
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{commit},{path}")
    git(repo, "add", ".gitmodules")
    git(repo, "commit", "--quiet", "-m", f"submodule {path}")


def two_dgs(tmp_path: Path, rasterizer_url: str | None = None) -> Path:
    """A 2DGS-shaped clone: submodules/diff-surfel-rasterization is a git submodule (with
    third_party/glm a submodule of its own), recorded and not checked out."""
    glm = tmp_path / "upstream" / "glm"
    glm.mkdir(parents=True)
    glm_commit = _repo(glm, {"glm/glm.hpp": "// glm stand-in\n"})
    surfel = tmp_path / "upstream" / "diff-surfel-rasterization"
    surfel.mkdir(parents=True)
    src = GS / RASTERIZER
    _repo(surfel, {"setup.py": (src / "setup.py").read_text()
                   .replace('"diff_gaussian_rasterization', '"diff_surfel_rasterization'),
                   "ext.cpp": (src / "ext.cpp").read_text(),
                   "cuda_rasterizer/rasterizer_impl.cu":
                       (src / "cuda_rasterizer" / "rasterizer_impl.cu").read_text(),
                   "diff_surfel_rasterization/__init__.py": "from . import _C\n",
                   # GCC 13: 'identifier "uint32_t" is undefined' (a field fix's case)
                   "cuda_rasterizer/rasterizer.h": "#pragma once\n#include <vector>\n"
                                                   "struct Tile { uint32_t start, end; };\n"})
    _with_submodule(surfel, "third_party/glm", f"file://{glm}", glm_commit)
    surfel_commit = git(surfel, "rev-parse", "HEAD")
    origin = tmp_path / "upstream" / "2d-gaussian-splatting"
    origin.mkdir()
    _repo(origin, {"train.py": "import argparse\n", "README.md": "2DGS-shaped\n"})
    _with_submodule(origin, "submodules/diff-surfel-rasterization",
                    rasterizer_url or f"file://{surfel}", surfel_commit)
    clone = tmp_path / "2d-gaussian-splatting"
    subprocess.run(["git", "clone", "--quiet", str(origin), str(clone)], check=True)
    return clone


def test_a_submodule_not_checked_out_is_fetched_into_the_cache_not_the_checkout(project, tmp_path):
    clone = two_dgs(tmp_path)
    folder = clone / "submodules" / "diff-surfel-rasterization"
    assert not any(folder.iterdir())          # git clone without --recursive leaves it empty
    before = tree_hash(clone)
    run = cuforge(project, "setup", "--checkout", str(clone), "--dry-run")
    assert run.returncode == 0, run.stderr
    assert ("diff-surfel-rasterization@2d-gaussian-splatting: submodules/diff-surfel-rasterization"
            " (setuptools, git submodule file://") in run.stdout, run.stdout
    assert "(fetched into cuforge's cache)" in run.stdout
    assert ("fix: field-cstdint (<cstdint> where fixed-width integers are used without it): "
            "cuda_rasterizer/rasterizer.h") in run.stdout, run.stdout
    assert "submodules/diff-surfel-rasterization: git submodule" in run.stdout
    assert "(not checked out)" in run.stdout
    assert tree_hash(clone) == before and not any(folder.iterdir())
    fetched = list((project / ".state" / "cache" / "submodules").glob("diff-surfel-*"))
    assert len(fetched) == 1 and (fetched[0] / "third_party" / "glm" / "glm" / "glm.hpp").is_file()


def test_a_checked_out_submodule_missing_its_own_submodule_is_built_with_it(project, tmp_path):
    clone = two_dgs(tmp_path)
    git(clone, "-c", "protocol.file.allow=always", "submodule", "update", "--init",
        "submodules/diff-surfel-rasterization")          # not --recursive: glm stays empty
    glm = clone / "submodules" / "diff-surfel-rasterization" / "third_party" / "glm"
    assert glm.is_dir() and not any(glm.iterdir())
    run = cuforge(project, "setup", "--checkout", str(clone), "--dry-run")
    assert run.returncode == 0, run.stderr
    assert ("submodule submodules/diff-surfel-rasterization/third_party/glm: git submodule "
            "file://") in run.stdout and "(not checked out)" in run.stdout, run.stdout
    assert "(fetched into cuforge's cache)" not in run.stdout.split("why:")[0]   # in place
    composed = (project / ".state" / "cache" / "composed" /
                "2d-gaussian-splatting-submodules-diff-surfel-rasterization")
    assert (composed / "third_party" / "glm" / "glm" / "glm.hpp").is_file()
    assert (composed / "setup.py").is_file() and not any(glm.iterdir())


def test_offline_the_one_error_names_git_submodule_update(project, tmp_path):
    clone = two_dgs(tmp_path, rasterizer_url=f"file://{tmp_path}/nowhere/diff-surfel.git")
    run = cuforge(project, "setup", "--checkout", str(clone), "--dry-run")
    assert run.returncode == 4, run.stderr     # SourceError
    assert "is a git submodule of" in run.stderr and "that is not checked out" in run.stderr
    assert f"git -C {clone} git submodule update --init --recursive" not in run.stderr
    assert f"fix: check it out and run setup again: git -C {clone} submodule update --init " \
           "--recursive" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
    assert not (project / ".state" / "cache" / "submodules").exists() or not any(
        p.is_dir() for p in (project / ".state" / "cache" / "submodules").iterdir())


def outside_venv(root: Path) -> str:
    """The checkout's files but the venv setup made in it (CHECKOUT/.venv, the default)."""
    moved = root.parent / f"{root.name}.venv-aside"
    (root / ".venv").rename(moved)
    try:
        return tree_hash(root)
    finally:
        moved.rename(root / ".venv")


def _installed(venv: Path, code: str) -> str:
    return subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True,
                          text=True, check=True).stdout.strip()


@pytest.mark.slow
def test_setup_builds_verifies_and_installs_each_found_extension_and_forks_keep_apart(
        project, tmp_path):
    first = gaussian_splatting(tmp_path / "a")
    (first / ".venv").rename(tmp_path / "a" / "old-venv")
    before = tree_hash(first)
    run = cuforge(project, "setup", "--checkout", str(first), "--no-requirements", "--jobs", "2")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "compiled diff_gaussian_rasterization-0.0.0+cu130.src" in run.stderr, run.stderr
    assert "import pass" in run.stderr and "fatbin pass" in run.stderr
    assert outside_venv(first) == before
    manifest = [json.loads(line) for line in next((project / "wh").glob("*/*/*/manifest.jsonl"))
                .read_text().splitlines()]
    fixed = {e["package"]: e["patches"] for e in manifest}
    assert fixed == {"diff-gaussian-rasterization@gaussian-splatting": ["field-cstdint"],
                     "simple-knn@gaussian-splatting": []}
    assert _installed(first / ".venv", "import diff_gaussian_rasterization as d, simple_knn._C as k;"
                      " print(d.FORK, d.kernel_name(), k.kernel())") == "graphdeco splat_tiles mean_dist"

    # a fork: the same project name, other code, another checkout; the same wheelhouse
    fork = gaussian_splatting(tmp_path / "b", name="mip-splatting")
    (fork / ".venv").rename(tmp_path / "b" / "old-venv")
    init = fork / RASTERIZER / "diff_gaussian_rasterization" / "__init__.py"
    init.write_text(init.read_text().replace('"graphdeco"', '"mip"'))
    again = cuforge(project, "setup", "--checkout", str(fork), "--no-requirements", "--jobs", "2")
    assert again.returncode == 0, again.stdout + again.stderr
    house = next((project / "wh").glob("*/*/*"))
    rasterizers = sorted(p.name for p in house.glob("diff_gaussian_rasterization-*.whl"))
    assert len(rasterizers) == 2 and all(".src" in name for name in rasterizers), rasterizers
    assert _installed(fork / ".venv", "import diff_gaussian_rasterization as d; print(d.FORK)") == "mip"
    assert _installed(first / ".venv", "import diff_gaussian_rasterization as d; print(d.FORK)") == "graphdeco"
    mine = [n for n in rasterizers if zipfile.ZipFile(house / n).read(
        "diff_gaussian_rasterization/__init__.py").decode().count('"mip"')]
    assert len(mine) == 1

    unchanged = cuforge(project, "setup", "--checkout", str(first), "--no-requirements")
    assert unchanged.returncode == 0 and "compiled " not in unchanged.stderr, unchanged.stderr
