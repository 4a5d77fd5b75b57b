"""Build dependencies are installed once (cuforge.env.builddeps): the shape of spconv on cumm - a
dependency wheel that installs headers, generated sources (rewritten only when their text
differs, as pccm does) compiled by ninja with gcc depfiles. A second build with nothing changed
skips the install and ninja has no work; a forced reinstall of the same wheel (what cuforge
did before) makes ninja rebuild."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cuforge.env.builddeps import install_step, installed_identically

pytestmark = pytest.mark.skipif(not shutil.which("ninja") or not shutil.which("g++"),
                                reason="needs ninja and g++")

FILES = {"fakecumm/__init__.py": "", "fakecumm/include/tensorview/tensor.h": "#define TV 1\n",
         "fakecumm-0.8.2.dist-info/METADATA": "Metadata-Version: 2.1\nName: fakecumm\n"
                                               "Version: 0.8.2\n",
         "fakecumm-0.8.2.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\n"
                                            "Root-Is-Purelib: true\nTag: py3-none-any\n"}
NINJA = """rule cc
  command = g++ -MMD -MF $out.d -I {include} -c $in -o $out
  depfile = $out.d
  deps = gcc
build gen.o: cc gen.cc
"""


def _wheel(path: Path) -> Path:
    """A real wheel (zip + RECORD with sha256 per file), written directly: no build backend."""
    import base64
    import hashlib
    import zipfile
    record = []
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in FILES.items():
            zf.writestr(name, text)
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest())
            record.append(f"{name},sha256={digest.rstrip(b'=').decode()},{len(text)}")
        zf.writestr("fakecumm-0.8.2.dist-info/RECORD",
                    "\n".join(record + ["fakecumm-0.8.2.dist-info/RECORD,,"]) + "\n")
    return path


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args],
                   check=True)


def _generate(path: Path, text: str) -> None:
    """pccm's rule: write only when the text differs (the file keeps its time otherwise)."""
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def _ninja_dry(build: Path) -> str:
    return subprocess.run(["ninja", "-n"], cwd=build, capture_output=True, text=True,
                          check=True).stdout


def test_a_second_build_with_nothing_changed_compiles_nothing(tmp_path):
    wheel = _wheel(tmp_path / "fakecumm-0.8.2-py3-none-any.whl")
    site = tmp_path / "site"
    build = tmp_path / "build"
    build.mkdir()
    (build / "build.ninja").write_text(NINJA.format(include=site / "fakecumm" / "include"))

    def one_build() -> str:
        step = install_step(Path(sys.executable), wheel, site)   # what a build runs
        if step is not None:
            subprocess.run(step.argv, check=True)
        _generate(build / "gen.cc", "#include <tensorview/tensor.h>\nint f() { return TV; }\n")
        return subprocess.run(["ninja"], cwd=build, capture_output=True, text=True,
                              check=True).stdout

    assert "[1/1]" in one_build()                       # cold: installed, compiled
    assert installed_identically(wheel, site)
    assert "no work to do" in one_build()               # nothing changed: nothing compiled
    # the old way, a forced reinstall of the same wheel: its header is newer, ninja rebuilds
    _pip("install", "--no-deps", "--force-reinstall", "--upgrade", "--target", str(site), str(wheel))
    assert "gen.o" in _ninja_dry(build)
    # a changed file in the installed dependency is noticed (the install is not skipped)
    (site / "fakecumm" / "include" / "tensorview" / "tensor.h").write_text("#define TV 2\n")
    assert not installed_identically(wheel, site)
