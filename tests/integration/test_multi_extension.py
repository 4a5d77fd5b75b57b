"""A torch-scatter-shaped package (tests/fixtures/recipes/multi_ext: three CUDAExtensions in
one setup.py, torch's BuildExtension, kernels without torch headers) through the real pipeline:

- its extensions compile side by side, each with its own build.ninja (the shim cuforge puts on
  the setuptools build's PYTHONPATH), although its setup.py turns torch's ninja path off as
  torch-scatter's does, and the wheel carries all three with the requested SASS;
- a build killed midway resumes: objects finished before the kill are not compiled again.

Slow: needs the 3.11-cu130 combo env; a few nvcc runs of tiny kernels."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "recipes" / "multi_ext"
pytestmark = pytest.mark.slow

RECIPE = """\
name = "multi-ext"
kind = "setuptools"
modules = ["multi_ext._alpha", "multi_ext._beta", "multi_ext._gamma"]

[source]
path = "{path}"
"""


@pytest.fixture
def project(tmp_path):
    if not any((ROOT / ".cuforge" / "envs").glob("3.11-cu130-*/bin/python")):
        pytest.skip("the 3.11-cu130 combo env is not created yet (run the demo build first)")
    proj = tmp_path / "proj"
    (proj / "recipes").mkdir(parents=True)
    (proj / "envs").symlink_to(ROOT / "envs")
    (proj / "recipes" / "multi-ext.toml").write_text(RECIPE.format(path=FIXTURE))
    envs = proj / ".state" / "envs"   # reuse the real combo env: no second torch install
    envs.mkdir(parents=True)
    for env_dir in (ROOT / ".cuforge" / "envs").glob("3.11-cu130-*"):
        if env_dir.is_dir():
            (envs / env_dir.name).symlink_to(env_dir)
    return proj


def _start(proj: Path) -> subprocess.Popen:
    env = {**os.environ, "CUFORGE_ROOT": str(proj), "CUFORGE_STATE": str(proj / ".state"),
           "CUFORGE_WHEELHOUSE": str(proj / "wh"), "COLUMNS": "200"}
    return subprocess.Popen([sys.executable, "-m", "cuforge", "build", "--combo", "3.11-cu130",
                             "--only", "multi-ext", "--cuda-arch", "12.0", "--jobs", "2"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _objects(proj: Path) -> dict[Path, int]:
    build = next((proj / ".state" / "work").glob("*/multi-ext/src/build"), None)
    return {o: o.stat().st_mtime_ns for o in build.rglob("*.o")} if build else {}


def _finished(proj: Path) -> dict[Path, int]:
    """Objects ninja recorded as built (its .ninja_log): an object that a compiler cache's
    server writes after the kill is not among them, and ninja rightly builds it again."""
    done = {}
    for log in (proj / ".state" / "work").glob("*/multi-ext/src/build/**/.ninja_log"):
        for line in log.read_text().splitlines()[1:]:
            output = log.parent / line.split("\t")[3]
            if output.suffix == ".o" and output.exists():
                done[output] = output.stat().st_mtime_ns
    return done


def _log(proj: Path) -> str:
    return next((proj / ".state" / "logs").glob("*/multi-ext.log")).read_text()


def test_extensions_build_side_by_side_in_their_own_build_dirs(project):
    proc = _start(project)
    out, err = proc.communicate(timeout=1800)
    assert proc.returncode == 0, out[-2000:] + err[-3000:]
    log = _log(project)
    assert "cuforge: setup.py turned ninja off (use_ninja=False); building with ninja" in log
    assert "cuforge: 3 extensions, 2 at once, 1 ninja jobs each" in log
    # each check's verdict and detail stay in the package's log, not only on the console
    assert "\n# verification of multi_ext-0.1-" in log
    assert "\nimport: pass: " in log and "\nfatbin: pass: " in log
    build = next((project / ".state" / "work").glob("*/multi-ext/src/build"))
    ninja_dirs = sorted(p.parent.name for p in build.rglob("build.ninja"))
    assert ninja_dirs == ["multi_ext._alpha", "multi_ext._beta", "multi_ext._gamma"]
    house = next((project / "wh").rglob("manifest.jsonl")).parent
    wheel = next(house.glob("multi_ext-*.whl"))
    sos = sorted(n.split("/")[-1].split(".")[0] for n in zipfile.ZipFile(wheel).namelist()
                 if n.endswith(".so"))
    assert sos == ["_alpha", "_beta", "_gamma"]
    entry = json.loads((house / "manifest.jsonl").read_text().splitlines()[-1])
    assert entry["status"] == "compiled" and entry["arches_embedded"]["sass"] == ["120"]


def test_packages_built_together_run_their_compilers_in_compile_slots(project, tmp_path):
    """With a second package in the build the plan is pooled: every nvcc and c++ that ninja
    starts goes through the slot script, and the build still produces all three modules."""
    plain = tmp_path / "plain"
    (plain / "plain_pkg").mkdir(parents=True)
    (plain / "plain_pkg" / "__init__.py").write_text("")
    (plain / "setup.py").write_text('from setuptools import setup\n'
                                    'setup(name="plain-pkg", version="1.0", packages=["plain_pkg"])\n')
    (project / "recipes" / "plain-pkg.toml").write_text(
        f'kind = "setuptools"\nmodules = ["plain_pkg"]\n[source]\npath = "{plain}"\n'
        '[arches]\ndevice_code = false\n')
    env = {**os.environ, "CUFORGE_ROOT": str(project), "CUFORGE_STATE": str(project / ".state"),
           "CUFORGE_WHEELHOUSE": str(project / "wh"), "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-m", "cuforge", "build", "--combo", "3.11-cu130",
                           "--only", "multi-ext,plain-pkg", "--cuda-arch", "12.0", "--jobs", "2"],
                          env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    slot = str(project / ".state" / "slots" / "take-slot")
    compiles = [line for line in _log(project).splitlines()
                if " -c " in line and ("nvcc" in line or "c++" in line or "g++" in line)]
    assert len(compiles) == 6, compiles                   # 3 extensions x (.cu + .cpp)
    nvcc = [line for line in compiles if "nvcc" in line]
    assert len(nvcc) == 3 and all(slot in line for line in nvcc)
    assert "compile slots" in subprocess.run(
        [sys.executable, "-m", "cuforge", "build", "--combo", "3.11-cu130", "--only",
         "multi-ext,plain-pkg", "--cuda-arch", "12.0", "--jobs", "2", "--dry-run"],
        env=env, capture_output=True, text=True, timeout=300).stdout


def test_a_killed_build_resumes_without_recompiling_finished_objects(project):
    proc = _start(project)
    deadline = time.monotonic() + 1200
    while not _finished(project) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)        # cuforge stops the whole compiler tree
    proc.communicate(timeout=120)
    assert proc.returncode == 130, "the build finished before it could be interrupted"
    done = _finished(project)
    assert done, "no object was finished before the kill"
    assert not list((project / "wh").rglob("*.whl"))        # nothing half-built published

    again = _start(project)
    out, err = again.communicate(timeout=1800)
    assert again.returncode == 0, out[-2000:] + err[-3000:]
    after = _objects(project)
    assert len(after) == 6                                   # 3 extensions x (.cu + .cpp)
    assert {o: after[o] for o in done} == done               # finished ones: not recompiled
