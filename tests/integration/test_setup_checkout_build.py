"""A real ``cuforge setup`` that builds the checkout's own copy of a package (issue 50, point 1):
a tiny C++ extension (reliability_project's tinyext, no CUDA, no torch headers) whose recipe
says it lives in ``ext/`` of the stack's repository at a pin that cannot be fetched
(example.invalid): the wheel is compiled from a patched copy of the checkout's ``ext/``, the
checkout stays byte for byte as it was, an edit there rebuilds, and nothing new is left as it
is. Marked slow: two compiles and a venv (torch through the combo interpreter's .pth)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gitrepo import git
from reliability_project import EXT, PATCHES, SETUP
from test_setup_checkout_sources import tree_hash

from conftest import torch_python

REPO = Path(__file__).resolve().parents[2]
COMMIT = "0123456789abcdef0123456789abcdef01234567"

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(torch_python() is None, reason="needs CUFORGE_TEST_TORCH_PYTHON"),
              pytest.mark.skipif(shutil.which("git") is None, reason="no git on PATH")]

STACK = """
[stack]
name = "tiny"
description = "one C++ extension that lives in its code base's repository"
repo = "https://example.invalid/lab/Tiny"
checkout_marker = "tiny/"
packages = ["tinyext"]
"""
RECIPE = f"""
kind = "setuptools"
modules = ["tinyext"]
patches = ["tinyext"]
[source]
git = "https://example.invalid/lab/Tiny.git"
commit = "{COMMIT}"
subdir = "ext"
[arches]
device_code = false
"""


def make(tmp: Path) -> tuple[Path, Path]:
    """A project with the tiny stack and recipe, and a git checkout of "Tiny" holding ext/."""
    proj = tmp / "proj"
    (proj / "envs").mkdir(parents=True)
    shutil.copy(REPO / "envs" / "accels.toml", proj / "envs")
    (proj / "envs" / "combos.toml").write_text(
        f'[[combo]]\npython = "3.11"\naccel = "cu130"\ntorch = "2.14.1"\nname = "tiny-combo"\n'
        f'interpreter = "{torch_python()}"\n')
    for folder, name, text in (("stacks", "tiny.toml", STACK), ("recipes", "tinyext.toml", RECIPE),
                               ("patches/tinyext", "patch.toml", PATCHES)):
        (proj / folder).mkdir(parents=True)
        (proj / folder / name).write_text(text)
    checkout = tmp / "Tiny"
    (checkout / "tiny").mkdir(parents=True)
    (checkout / "tiny" / "train.py").write_text("import tinyext\n")
    ext = checkout / "ext"
    (ext / "tinyext").mkdir(parents=True)
    (ext / "setup.py").write_text("REQUIRES = []\n" + SETUP)
    (ext / "tinyext" / "__init__.py").write_text("from . import _c\nPATCHED = False\n")
    (ext / "tinyext" / "_c.cpp").write_text(EXT)
    git(checkout, "init", "--quiet", "--initial-branch=main")
    git(checkout, "add", "-A")
    git(checkout, "commit", "--quiet", "-m", "the lab's code")
    git(checkout, "tag", "v2.1")
    return proj, checkout


def setup(proj: Path, checkout: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUFORGE_ROOT": str(proj), "CUFORGE_STATE": str(proj / ".state"),
           "CUFORGE_WHEELHOUSE": str(proj / "wh"), "COLUMNS": "200"}
    env.pop("CUFORGE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "cuforge", "setup", "tiny", "--checkout",
                           str(checkout), "--venv", str(proj / "venv"), "--combo", "tiny-combo",
                           "--no-requirements", "--jobs", "2", *extra],
                          capture_output=True, text=True, env=env, cwd=proj, timeout=900)


def installed(proj: Path) -> str:
    return subprocess.run([str(proj / "venv" / "bin" / "python"), "-c",
                           "import tinyext; print(tinyext.PATCHED, getattr(tinyext, 'MINE', 0))"],
                          capture_output=True, text=True, check=True).stdout.split()


def test_setup_compiles_a_patched_copy_of_the_checkout_and_rebuilds_on_an_edit(tmp_path):
    proj, checkout = make(tmp_path)
    before = tree_hash(checkout)

    first = setup(proj, checkout)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "tinyext: from your checkout: ext @ v2.1" in first.stderr, first.stderr
    assert "example.invalid" not in first.stderr.split("tinyext: from your checkout")[1]
    assert installed(proj) == ["True", "0"]          # built from the copy, patched
    assert tree_hash(checkout) == before             # the user's tree: not one byte

    again = setup(proj, checkout)                    # nothing edited: up to date
    assert again.returncode == 0, again.stderr
    assert "up to date" in again.stderr and "compiled " not in again.stderr, again.stderr

    init = checkout / "ext" / "tinyext" / "__init__.py"
    init.write_text(init.read_text() + "MINE = 1\n")
    edited = tree_hash(checkout)
    third = setup(proj, checkout)
    assert third.returncode == 0, third.stderr
    assert "tinyext: from your checkout: ext @ v2.1 + your edits (content " in third.stderr
    assert "compiled" in third.stderr.split("wheels: building")[1], third.stderr
    assert installed(proj) == ["True", "1"]          # the edit is in the wheel
    assert tree_hash(checkout) == edited

    pinned = setup(proj, checkout, "--pinned")      # upstream's pin: a fetch, which fails here
    assert pinned.returncode != 0
    assert "example.invalid" in pinned.stderr, pinned.stderr
    assert tree_hash(checkout) == edited
