"""native/tetra_triangulation configures with plain cmake and, on a machine without CGAL,
stops with a FATAL_ERROR that names the Debian/Ubuntu package to install."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "native" / "tetra_triangulation"
UPSTREAM_FILES = ("src/triangulation.cpp", "src/py_binding.cpp", "src/triangulation.h")


def _configure(tmp_path: Path, *defines: str) -> subprocess.CompletedProcess:
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("no cmake on PATH")
    return subprocess.run([cmake, "-S", str(PROJECT), "-B", str(tmp_path / "build"), *defines],
                          capture_output=True, text=True, timeout=300)


def _fake_upstream(tmp_path: Path) -> Path:
    """Empty files with upstream's names: enough to get past the source check."""
    src = tmp_path / "tetra_triangulation"
    for name in UPSTREAM_FILES:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text("")
    return src


def test_missing_cgal_names_libcgal_dev(tmp_path):
    if any(Path(d, "CGAL").is_dir() for d in ("/usr/include", "/usr/local/include")):
        pytest.skip("CGAL is installed here: the missing-CGAL path cannot be checked")
    proc = _configure(tmp_path, f"-DTETRA_SOURCE_DIR={_fake_upstream(tmp_path)}")
    assert proc.returncode != 0
    text = " ".join((proc.stdout + proc.stderr).split())   # cmake wraps long messages
    assert "CMake Error" in text and "CGAL" in text and "libcgal-dev" in text
    assert "sudo apt-get install" in text


def test_missing_upstream_sources_name_the_variable(tmp_path):
    proc = _configure(tmp_path, f"-DTETRA_SOURCE_DIR={tmp_path / 'nowhere'}")
    assert proc.returncode != 0
    text = " ".join((proc.stdout + proc.stderr).split())
    assert "TETRA_SOURCE_DIR" in text and "submodules/tetra_triangulation" in text
