"""A throw-away cuforge project for the reliability tests: one tiny C++ extension from a pinned
sdist (no CUDA, no torch headers: it compiles in seconds), with a two-file patch set, built for
the real 3.11-cu130 combo env (linked in, not reinstalled)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMBO_DIR = Path("linux-x86_64") / "cu130" / "torch2.14.1-cp311"

# TINYEXT_SLEEP: stay in the compile step that long after compiling (a fault test kills it there)
SETUP = """import os, time
from pathlib import Path
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

class slow_build_ext(build_ext):
    def run(self):
        super().run()
        if os.environ.get("TINYEXT_SLEEP"):
            if os.environ.get("TINYEXT_ESCAPE"):   # a "compiler" that left the tree's session
                import subprocess
                escaped = subprocess.Popen(["sleep", os.environ["TINYEXT_SLEEP"]],
                                           start_new_session=True)
                Path(os.environ["TINYEXT_PIDFILE"] + ".escaped").write_text(str(escaped.pid))
            Path(os.environ["TINYEXT_PIDFILE"]).write_text(str(os.getpid()))
            time.sleep(float(os.environ["TINYEXT_SLEEP"]))

setup(name="tinyext", version="1.0", packages=["tinyext"], cmdclass={"build_ext": slow_build_ext},
      ext_modules=[Extension("tinyext._c", ["tinyext/_c.cpp"])], install_requires=REQUIRES)
"""
EXT = """#include <Python.h>
static struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "_c", 0, -1, 0};
PyMODINIT_FUNC PyInit__c(void) { return PyModule_Create(&m); }
"""
PATCHES = '''[set]
name = "tinyext"
[[patch]]
id = "init"
kind = "replace_text"
file = "tinyext/__init__.py"
find = "PATCHED = False"
replace = "PATCHED = True  # cuforge: fixture patch"
why = "two files, so a kill can land between them"
[[patch]]
id = "ext"
kind = "replace_text"
file = "tinyext/_c.cpp"
find = "#include <Python.h>"
replace = "#include <Python.h>  // cuforge: fixture patch"
why = "the second file"
'''


def make_sdist(where: Path, requires: tuple[str, ...] = ()) -> tuple[Path, str]:
    tree = where / "tinyext-1.0"
    (tree / "tinyext").mkdir(parents=True)
    (tree / "setup.py").write_text(f"REQUIRES = {list(requires)!r}\n" + SETUP)
    (tree / "tinyext" / "__init__.py").write_text("from . import _c\nPATCHED = False\n")
    (tree / "tinyext" / "_c.cpp").write_text(EXT)
    archive = where / "tinyext-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tree, arcname=tree.name)
    shutil.rmtree(tree)
    return archive, hashlib.sha256(archive.read_bytes()).hexdigest()


def make_project(tmp_path: Path, requires: tuple[str, ...] = ()) -> Path:
    """``tmp_path/proj``: envs/ from the repo, recipes/tinyext.toml, patches/tinyext/; the
    package's Requires-Dist is ``requires``."""
    archive, digest = make_sdist(tmp_path, requires)
    proj = tmp_path / "proj"
    shutil.copytree(ROOT / "envs", proj / "envs")
    (proj / "recipes").mkdir()
    (proj / "recipes" / "tinyext.toml").write_text(
        f'kind = "setuptools"\nmodules = ["tinyext"]\npatches = ["tinyext"]\n[source]\n'
        f'sdist = "{archive}"\nsha256 = "{digest}"\n[arches]\ndevice_code = false\n')
    (proj / "patches" / "tinyext").mkdir(parents=True)
    (proj / "patches" / "tinyext" / "patch.toml").write_text(PATCHES)
    return proj


def link_combo_env(proj: Path) -> None:
    """Reuse the real combo env (no second torch install) through a symlink in the state dir."""
    envs = proj / ".state" / "envs"
    envs.mkdir(parents=True, exist_ok=True)
    for env_dir in (ROOT / ".cuforge" / "envs").glob("3.11-cu130-*"):
        if env_dir.is_dir() and not (envs / env_dir.name).exists():
            (envs / env_dir.name).symlink_to(env_dir.resolve())
    # and its CCCL overlay (env/cccl.py), installed once with the env by the suite's start
    overlays = ROOT / ".cuforge" / "cccl"
    if overlays.is_dir() and not (proj / ".state" / "cccl").exists():
        (proj / ".state" / "cccl").symlink_to(overlays.resolve())


def cuforge(proj: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 600,
            preexec_fn=None) -> subprocess.CompletedProcess:
    """``python -m cuforge ARGS`` in ``proj`` (state in proj/.state, wheelhouse proj/wh)."""
    full = {**os.environ, "CUFORGE_ROOT": str(proj), "CUFORGE_STATE": str(proj / ".state"),
            "CUFORGE_WHEELHOUSE": str(proj / "wh"), "COLUMNS": "200", **(env or {})}
    for name in ("CUFORGE_FAULT", "CUFORGE_DEBUG"):
        if env is None or name not in env:
            full.pop(name, None)
    return subprocess.run([sys.executable, "-m", "cuforge", *args], env=full,
                          capture_output=True, text=True, timeout=timeout,
                          preexec_fn=preexec_fn, cwd=proj)


def build(proj: Path, *extra: str, **kw) -> subprocess.CompletedProcess:
    return cuforge(proj, "build", "--combo", "3.11-cu130", "--only", "tinyext", *extra, **kw)


def manifest_lines(proj: Path) -> list[dict]:
    """Every line of manifest.jsonl parsed on its own (raises on a torn or corrupt line)."""
    path = proj / "wh" / COMBO_DIR / "manifest.jsonl"
    if not path.exists():
        return []
    text = path.read_text()
    assert not text or text.endswith("\n"), "torn last line"
    return [json.loads(line) for line in text.splitlines()]


def wheelhouse_snapshot(proj: Path) -> dict[str, bytes]:
    """Every visible file under the wheelhouse with its bytes (lock files aside)."""
    wh = proj / "wh"
    if not wh.exists():
        return {}
    return {str(p.relative_to(wh)): p.read_bytes() for p in sorted(wh.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def assert_only_verified_wheels(proj: Path) -> None:
    """Each ``*.whl`` in the wheelhouse is named by a manifest line with its exact sha256 and
    all its checks recorded: nothing partial, nothing unverified."""
    lines = manifest_lines(proj)
    wh = proj / "wh"
    for wheel in (wh.rglob("*.whl") if wh.exists() else []):
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        match = [l for l in lines if l["wheel"] == wheel.name and l["wheel_sha256"] == digest]
        assert match, f"{wheel} is not in the manifest with its sha256"
        assert match[-1]["status"] in ("compiled", "prebuilt") and match[-1]["checks"]


def alive(pid: int) -> bool:
    """``pid`` runs (a zombie or a gone process does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")
