"""The CLI finds its project from any directory: the checkout it was imported from, an explicit
--root / CUFORGE_ROOT, or the copy bundled in an installed wheel; otherwise a message with a fix."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# the pointcept set: its patches match our fixture as it is (milo's replace_function records
# upstream's code hash, which our own fixture text cannot have: see fixture_sets.py)
FIXTURE = REPO / "tests" / "fixtures" / "upstream" / "pointcept"
ADDED = Path("pointcept") / "utils" / "spconv_algo.py"


def cuforge(*args: str, cwd: Path, python: str = sys.executable, **env: str
            ) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("CUFORGE_ROOT", "PYTHONPATH")}
    return subprocess.run([python, "-m", "cuforge", *args], cwd=cwd, capture_output=True,
                          text=True, env={**base, **env})


def checkout(tmp_path: Path) -> Path:
    dest = tmp_path / "Pointcept"
    shutil.copytree(FIXTURE, dest)
    return dest


def test_patch_from_a_foreign_directory(tmp_path: Path) -> None:
    tree, elsewhere = checkout(tmp_path), tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = cuforge("patch", "pointcept", str(tree), cwd=elsewhere, PYTHONPATH=str(REPO / "src"))
    assert out.returncode == 0, out.stderr
    assert (tree / ADDED).is_file()


def test_explicit_root_wins_and_bad_root_names_the_fix(tmp_path: Path) -> None:
    tree = checkout(tmp_path)
    good = cuforge("--root", str(REPO), "patch", "pointcept", str(tree), "--check", cwd=tmp_path,
                   PYTHONPATH=str(REPO / "src"))
    assert good.returncode == 0, good.stderr
    after = cuforge("patch", "pointcept", str(tree), "--root", str(tmp_path), cwd=tmp_path,
                    PYTHONPATH=str(REPO / "src"))
    assert after.returncode == 2
    assert "is not a cuforge project" in after.stderr and "fix:" in after.stderr
    env_bad = cuforge("matrix", cwd=tmp_path, PYTHONPATH=str(REPO / "src"),
                      CUFORGE_ROOT=str(tmp_path))
    assert env_bad.returncode == 2 and "CUFORGE_ROOT" in env_bad.stderr


@pytest.mark.skipif(not shutil.which("uv") and not Path(sys.executable).with_name("uv").exists(),
                    reason="needs uv")
def test_installed_wheel_carries_its_project(tmp_path: Path) -> None:
    """A non-editable install has no checkout: the wheel's bundled envs/, patches/ are used."""
    from cuforge.env.programs import find_uv
    uv = find_uv()
    subprocess.run([uv, "build", "--wheel", "-q", "-o", str(tmp_path / "dist"), str(REPO)],
                   check=True)
    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    wheel = next((tmp_path / "dist").glob("cuforge-*.whl"))
    subprocess.run([uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"),
                    str(wheel)], check=True)
    tree = checkout(tmp_path)
    out = cuforge("patch", "pointcept", str(tree), cwd=tmp_path,
                  python=str(venv / "bin" / "python"), XDG_DATA_HOME=str(tmp_path / "data"))
    assert out.returncode == 0, out.stderr
    assert (tree / ADDED).is_file()
