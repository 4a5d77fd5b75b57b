"""What a venv's Python sees of a requirement: the copy that is imported, not one behind it.

A setup venv sees the combo interpreter's packages through a .pth. When a package is in both
(the checkout's transformers==4.50.3 in the venv, another transformers in the interpreter's
site-packages), the venv's copy comes first on sys.path and is the one imported; the check
after the wheels once took the copy behind it and installed every requirement a second time
(the GPU runs of session 21: "the stack's wheels moved transformers==4.50.3")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cuforge.workstation.installs import missing_requirements


def _dist(site: Path, name: str, version: str) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_a_requirement_shadowing_the_interpreters_copy_counts_as_installed(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; "
                                "print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    behind = tmp_path / "interpreter-site"   # what the combo interpreter's .pth adds
    _dist(site, "tiny_dist", "2.0")
    _dist(behind, "tiny-dist", "1.0")
    (site / "_base.pth").write_text(f"{behind}\n")

    assert missing_requirements(python, {"tiny-dist==2.0"}) == []
    assert missing_requirements(python, {"tiny-dist==1.0"}) == ["tiny-dist==1.0"]
    assert missing_requirements(python, {"other-dist"}) == ["other-dist"]
