"""On a machine without uv (the GPU box), setup makes the venv with the stdlib and installs
with the base interpreter's pip pointed at it: a real venv, a real install of a real wheel."""

from __future__ import annotations

import subprocess
import sys
import zipfile

from cuforge.env import programs
from cuforge.workstation import installs
from cuforge.core.errors import ToolchainError


def no_uv():
    raise ToolchainError("uv is not installed")


def test_install_command_falls_back_to_pip(monkeypatch, tmp_path):
    monkeypatch.setattr(programs, "find_uv", no_uv)
    cmd = installs.pip_install(tmp_path / "bin" / "python", sys.executable, "--no-deps",
                                   "--reinstall", "x.whl")
    assert cmd[:5] == (sys.executable, "-m", "pip", "--python", str(tmp_path / "bin" / "python"))
    assert "--force-reinstall" in cmd and "--reinstall" not in cmd


def test_pip_fallback_installs_into_a_stdlib_venv(monkeypatch, tmp_path):
    monkeypatch.setattr(programs, "find_uv", no_uv)
    target = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True)
    wheel = tmp_path / "tinymod-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("tinymod.py", "VALUE = 42\n")
        zf.writestr("tinymod-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinymod\nVersion: 1.0\n")
        zf.writestr("tinymod-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr("tinymod-1.0.dist-info/RECORD", "")
    python = target / "bin" / "python"
    subprocess.run(installs.pip_install(python, sys.executable, "--no-deps", "--reinstall",
                                            str(wheel)), check=True, capture_output=True)
    out = subprocess.run([str(python), "-c", "import tinymod; print(tinymod.VALUE)"],
                         capture_output=True, text=True)
    assert out.stdout.strip() == "42", out.stderr
