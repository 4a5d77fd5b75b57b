"""The demo really built for linux-aarch64 on this x86_64 machine, under QEMU (slow: ~3 min on
2 cores; the first run also creates the aarch64 env, ~5 GB of PyPI wheels). Everything is
read from the files: the wheel's tag, every .so's ELF machine, the SASS and PTX it carries
(cuobjdump), and what the manifest says each check found in the emulated interpreter.

Needs `cuforge emulation setup` (root, once per boot for binfmt_misc; .ci/run does it). On a
machine without it the test skips, saying why; with CUFORGE_REQUIRE_EMULATION=1 (CI) it fails.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from packaging.utils import parse_wheel_filename

from cuforge.env import emulation, emulation_setup
from cuforge.config import platforms
from cuforge.core.project import find_project

ROOT = Path(__file__).resolve().parents[2]
COMBO = "spark-emulated"
COMBO_DIR = Path("linux-aarch64") / "cu130" / "torch2.14.1-cp311"
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(platforms.build_platform().machine == "aarch64",
                                 reason="an aarch64 machine builds these natively")]


def _emulation_or_skip() -> None:
    project = find_project(ROOT)
    emu = emulation.for_platform(project, "linux-aarch64")
    bad = [f for f in emulation_setup.check(project.state_dir, emu) if not f.ok]
    if bad:
        why = f"aarch64 emulation unusable: {bad[0].what} (fix: {bad[0].fix})"
        if os.environ.get("CUFORGE_REQUIRE_EMULATION"):
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    _emulation_or_skip()
    wh = tmp_path_factory.mktemp("wheelhouse")
    env = {**os.environ, "CUFORGE_WHEELHOUSE": str(wh), "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-m", "cuforge", "build", "--combo", COMBO],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    wheels = list((wh / COMBO_DIR).glob("cuforge_demo-*.whl"))
    assert len(wheels) == 1, list(wh.rglob("*"))
    return wh, wheels[0]


def test_wheel_is_tagged_manylinux_aarch64_and_every_so_is_aarch64(built, tmp_path):
    _, wheel = built
    tags = parse_wheel_filename(wheel.name)[3]   # the level its ELF files' needs earn (issue 63)
    assert all(re.fullmatch(r"manylinux_2_\d+_aarch64|manylinux2014_aarch64", t.platform)
               for t in tags), wheel.name
    with zipfile.ZipFile(wheel) as zf:
        sos = [n for n in zf.namelist() if n.endswith(".so")]
        assert sos
        for name in sos:
            with open(zf.extract(name, tmp_path), "rb") as fh:
                assert ELFFile(fh).header["e_machine"] == "EM_AARCH64", name


def test_so_holds_sm121_and_sm120_sass_and_compute121_ptx(built, tmp_path):
    _, wheel = built
    with zipfile.ZipFile(wheel) as zf:
        so = zf.extract(next(n for n in zf.namelist() if n.endswith(".so")), tmp_path)
    envs = find_project(ROOT).state_dir / "envs"   # CUFORGE_STATE, if set
    cuobjdump = next(envs.glob(f"{COMBO}-*/cuda/bin/cuobjdump"))
    out = subprocess.run([str(cuobjdump), "--list-elf", "--list-ptx", so],
                         capture_output=True, text=True, check=True).stdout
    sass = sorted(l.rsplit(".", 2)[-2] for l in out.splitlines() if l.startswith("ELF"))
    ptx = sorted(l.rsplit(".", 2)[-2] for l in out.splitlines() if l.startswith("PTX"))
    assert sass == ["sm_120", "sm_121"] and ptx == ["sm_121"]


def test_checks_ran_in_the_emulated_interpreter(built):
    wh, _ = built
    entry = json.loads((wh / COMBO_DIR / "manifest.jsonl").read_text().splitlines()[-1])
    assert entry["status"] == "compiled" and entry["arches_requested"] == "12.1+PTX;12.0"
    checks = entry["checks"]
    for name in ("abi", "symbols", "cudart", "fatbin", "import"):
        assert checks[name]["status"] == "pass", (name, checks[name])
    assert checks["smoke"]["status"] == "skipped"   # never "pass" without a GPU
    assert checks["smoke"]["detail"].startswith("skipped: no GPU")
    assert "aarch64-linux-gnu.so" in checks["symbols"]["detail"]   # the aarch64 extension itself
