"""cuforge's shim does pccm's code generation once per build dir while its inputs stay the
same (src/cuforge/pipeline/builders/shim/cuforge_pccm.py): spconv's rerun after a kill spent ~12 s
generating the same code again before ninja resumed. A real interpreter with the shim on
PYTHONPATH runs a setup.py against a pccm-shaped builder (tests/fixtures/pccm_shape) that
generates real sources, and ninja compiles them with g++."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import cuforge.pipeline.builders.setuptools as setuptools_kind

pytestmark = pytest.mark.skipif(not shutil.which("ninja") or not shutil.which("g++"),
                                reason="needs ninja and g++")

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "pccm_shape"
SETUP = """\
import pccm
lib = pccm.builder.build_pybind(["alpha", "beta"], "build/temp/core_cc", std="c++17")
print("library", lib)
"""


class Tree:
    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "pkg"
        self.root.mkdir()
        (self.root / "setup.py").write_text(SETUP)
        self.gen_log = tmp_path / "generations.log"
        self.stop = tmp_path / "stop"

    def build(self, **env: str) -> subprocess.CompletedProcess:
        run = subprocess.run(
            [sys.executable, "setup.py"], cwd=self.root, capture_output=True, text=True,
            env={**os.environ, "GEN_LOG": str(self.gen_log), "STOP_BEFORE_NINJA": str(self.stop),
                 "PYTHONPATH": f"{setuptools_kind.SHIM}{os.pathsep}{FIXTURE}", **env})
        return run

    def generations(self) -> int:
        return len(self.gen_log.read_text().splitlines()) if self.gen_log.exists() else 0


def test_a_second_build_with_the_same_inputs_does_not_generate_again(tmp_path):
    tree = Tree(tmp_path)
    first = tree.build()
    assert first.returncode == 0, first.stderr
    assert tree.generations() == 1 and "library" in first.stdout
    second = tree.build()
    assert second.returncode == 0, second.stderr
    assert tree.generations() == 1
    assert "not generating it again" in second.stdout
    assert "ninja: no work to do" in second.stdout


def test_a_build_killed_while_compiling_resumes_without_generating_again(tmp_path):
    tree = Tree(tmp_path)
    tree.stop.touch()
    assert tree.build().returncode != 0          # generated, then stopped before ninja ran
    assert tree.generations() == 1
    tree.stop.unlink()
    rerun = tree.build()
    assert rerun.returncode == 0, rerun.stderr
    assert tree.generations() == 1 and "not generating it again" in rerun.stdout
    assert "[3/3]" in rerun.stdout               # ninja compiled both sources and linked


def test_a_changed_input_or_a_lost_source_generates_again(tmp_path):
    tree = Tree(tmp_path)
    assert tree.build().returncode == 0
    assert tree.build(CUMM_CUDA_ARCH_LIST="8.6").returncode == 0    # the environment
    assert tree.generations() == 2
    (tree.root / "setup.py").write_text(SETUP + "# another setup.py\n")   # setup.py's text
    assert tree.build(CUMM_CUDA_ARCH_LIST="8.6").returncode == 0
    assert tree.generations() == 3
    (tree.root / "version.txt").write_text("2.3.9\n")               # a data file of the tree
    assert tree.build(CUMM_CUDA_ARCH_LIST="8.6").returncode == 0
    assert tree.generations() == 4
    next((tree.root / "build").rglob("alpha.cc")).unlink()           # a generated source
    assert tree.build(CUMM_CUDA_ARCH_LIST="8.6").returncode == 0
    assert tree.generations() == 5
    assert tree.build(CUMM_CUDA_ARCH_LIST="8.6", CUFORGE_PCCM_REGENERATE="1").returncode == 0
    assert tree.generations() == 6


def test_a_rewritten_module_with_the_same_text_is_the_same_input(tmp_path):
    """spconv's setup.py rewrites spconv/__version__.py on every run, with the same text."""
    tree = Tree(tmp_path)
    (tree.root / "version_of_pkg.py").write_text("VERSION = '2.3.8'\n")
    (tree.root / "setup.py").write_text("import version_of_pkg\n" + SETUP)
    assert tree.build().returncode == 0
    os.utime(tree.root / "version_of_pkg.py", ns=(1, 1))               # new time, same text
    again = tree.build()
    assert again.returncode == 0, again.stderr
    assert tree.generations() == 1
