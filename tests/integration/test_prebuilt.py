"""Prebuilt reuse: a recipe's prebuilt wheel is used only when it passes the checks; otherwise
cuforge compiles. Real wheels, a real find-links directory, the real combo env (slow)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMBO_DIR = Path("linux-x86_64") / "cu130" / "torch2.14.1-cp311"
pytestmark = pytest.mark.slow

RECIPE = """name = "cuforge-demo"
kind = "cmake"
modules = ["cuforge_demo"]
smoke = "smoke/check_cuforge-demo.py"
[source]
path = "native/demo"
[prebuilt]
requirements = ["cuforge-demo=={version}"]
sha256 = ["{sha256}"]
find_links = "{links}"
"""


def _project(tmp_path: Path, links: Path) -> Path:
    """A project whose recipe pins the one wheel in ``links`` (version and sha256)."""
    proj = tmp_path / "proj"
    if not proj.exists():
        proj.mkdir()
        for name in ("envs", "native", "smoke"):
            shutil.copytree(ROOT / name, proj / name)
        (proj / "recipes").mkdir()
    wheels = sorted(links.glob("*.whl"))
    version = wheels[0].name.split("-")[1] if wheels else "0"
    digest = hashlib.sha256(wheels[0].read_bytes()).hexdigest() if wheels else "0" * 64
    (proj / "recipes" / "cuforge-demo.toml").write_text(
        RECIPE.format(links=links, version=version, sha256=digest))
    return proj


def _build(proj: Path, wh: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUFORGE_ROOT": str(proj), "CUFORGE_STATE": str(ROOT / ".cuforge"),
           "CUFORGE_WHEELHOUSE": str(wh), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "cuforge", "build", "--combo", "3.11-cu130",
                           *extra], env=env, capture_output=True, text=True)


def _last_entry(wh: Path) -> dict:
    return json.loads((wh / COMBO_DIR / "manifest.jsonl").read_text().splitlines()[-1])


def _broken_wheel(links: Path) -> None:
    """A 'prebuilt' cuforge-demo that cannot import (what a wheel for another torch gives)."""
    with zipfile.ZipFile(links / "cuforge_demo-9.9-py3-none-any.whl", "w") as zf:
        zf.writestr("cuforge_demo/__init__.py", "raise ImportError('undefined symbol: _ZN3c10x')\n")
        zf.writestr("cuforge_demo-9.9.dist-info/METADATA",
                    "Metadata-Version: 2.1\nName: cuforge-demo\nVersion: 9.9\n")
        zf.writestr("cuforge_demo-9.9.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\n"
                    "Tag: py3-none-any\n")
        zf.writestr("cuforge_demo-9.9.dist-info/RECORD", "")


def test_rejected_prebuilt_falls_back_to_compiling(tmp_path):
    links = tmp_path / "links"
    links.mkdir()
    _broken_wheel(links)
    wh = tmp_path / "wh"
    out = _build(_project(tmp_path, links), wh)
    assert out.returncode == 0, out.stderr[-3000:]
    entry = _last_entry(wh)
    assert entry["status"] == "compiled"
    assert "rejected" in entry["reason"] and "import" in entry["reason"]


def test_good_prebuilt_is_used_and_force_source_compiles(tmp_path):
    # first compile a good wheel, then offer exactly that wheel as the prebuilt one
    links = tmp_path / "links"
    links.mkdir()
    wh0 = tmp_path / "wh0"
    first = _build(_project(tmp_path, links), wh0, "--force-source")
    assert first.returncode == 0, first.stderr[-3000:]
    assert _last_entry(wh0)["status"] == "compiled"
    shutil.copy(next((wh0 / COMBO_DIR).glob("*.whl")), links)
    wh = tmp_path / "wh"
    out = _build(_project(tmp_path, links), wh)
    assert out.returncode == 0, out.stderr[-3000:]
    entry = _last_entry(wh)
    assert entry["status"] == "prebuilt"
    assert entry["checks"]["fatbin"]["status"] == "pass"
    assert entry["arches_embedded"] == {"sass": ["120", "121"], "ptx": ["121"]}
