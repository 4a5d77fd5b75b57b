"""The env probe of a cuforge venv (``import torch`` in it, 3 s of every build) is answered
from the venv's cache while its installed distributions are the ones it was asked with, and
asked again as soon as one is added, removed or reinstalled. Real venvs, real interpreters."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from cuforge.env.torchinfo import PROBE_CACHE, probe_venv


def _venv(tmp_path: Path) -> Path:
    root = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    return root


def _mark_cached_answer(root: Path) -> None:
    """Make the saved answer recognisable: only a cached answer says this machine."""
    cache = root / PROBE_CACHE
    saved = json.loads(cache.read_text())
    saved["answer"]["machine"] = "from-the-cache"
    cache.write_text(json.dumps(saved))


def _site(root: Path) -> Path:
    return next(root.glob("lib/python*/site-packages"))


def test_the_second_probe_is_answered_from_the_cache(tmp_path):
    root = _venv(tmp_path)
    first = probe_venv(root)
    assert first.machine != "from-the-cache" and not first.has_torch   # really asked
    assert Path(first.python).parent == root / "bin"
    _mark_cached_answer(root)
    assert probe_venv(root).machine == "from-the-cache"


def test_an_installed_or_reinstalled_distribution_asks_again(tmp_path):
    root = _venv(tmp_path)
    probe_venv(root)
    _mark_cached_answer(root)
    dist = _site(root) / "demo-1.0.dist-info"
    dist.mkdir()
    (dist / "RECORD").write_text("demo/__init__.py,,\n")
    assert probe_venv(root).machine != "from-the-cache"      # a new distribution
    _mark_cached_answer(root)
    (dist / "RECORD").write_text("demo/__init__.py,,\ndemo/more.py,,\n")   # reinstalled
    assert probe_venv(root).machine != "from-the-cache"
    _mark_cached_answer(root)
    dist.rename(_site(root) / "demo-1.1.dist-info")          # another version
    assert probe_venv(root).machine != "from-the-cache"


def test_an_unreadable_cache_is_asked_again_and_rewritten(tmp_path):
    root = _venv(tmp_path)
    (root / PROBE_CACHE).write_text('{"key": ')
    assert probe_venv(root).machine != "from-the-cache"
    assert json.loads((root / PROBE_CACHE).read_text())["key"]


def test_a_venv_reached_through_a_link_is_asked_through_that_path(tmp_path):
    """Two clones link their envs/ to one venv: each answer's paths are its own clone's (the
    CMake build of the second clone must see its own interpreter path)."""
    root = _venv(tmp_path)
    link = tmp_path / "clone-b-env"
    link.symlink_to(root)
    assert Path(probe_venv(root).python).parent == root / "bin"
    assert Path(probe_venv(link).python).parent == link / "bin"


def test_an_interpreter_is_asked_once_per_process_by_its_own_path(tmp_path):
    """setup decides with the combo interpreter and its build checks it again: one question.
    Two venvs whose bin/python lead to the same base interpreter are still asked each."""
    from cuforge.env.torchinfo import probe_interpreter as probe
    calls = tmp_path / "calls"
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\necho x >> "{calls}"\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    first, second = probe(python), probe(python)
    assert first == second and not first.has_torch
    assert calls.read_text().count("x") == 1
    one, other = _venv(tmp_path / "a"), _venv(tmp_path / "b")
    assert probe(one / "bin" / "python").python != probe(other / "bin" / "python").python


def _counting(tmp_path: Path, target: Path) -> tuple[Path, Path]:
    """A wrapper of ``target`` that counts the torch probes run through it (``x``) and every
    start (``started``, the cheap ``sys.path`` question too)."""
    calls, python = tmp_path / "probes-run", tmp_path / "interpreter"
    python.write_text(f'#!/bin/sh\necho started >> "{calls}"\n'
                      f'case "$*" in *CUFORGE-PROBE*) echo x >> "{calls}";; esac\n'
                      f'exec "{target}" "$@"\n')
    python.chmod(0o755)
    return python, calls


def test_a_combo_interpreter_is_answered_from_the_state_dir_until_its_packages_change(tmp_path):
    """A combo's own interpreter (the GPU machine's python3 with torch): a second command does
    not import its torch again; a distribution installed into it does."""
    from cuforge.env import torchinfo
    base = _venv(tmp_path)
    python, calls = _counting(tmp_path, base / "bin" / "python")
    cache = tmp_path / "state" / "probes"
    first = torchinfo.probe_interpreter(python, cache)
    torchinfo._ASKED.clear()   # the next command is another process
    assert torchinfo.probe_interpreter(python, cache) == first
    assert calls.read_text().count("x") == 1 and len(list(cache.iterdir())) == 1
    starts = calls.read_text().count("started")
    torchinfo.probe_interpreter(python, cache)   # the same process again: no start at all
    assert calls.read_text().count("started") == starts
    torchinfo._ASKED.clear()
    dist = _site(base) / "torch-9.9.dist-info"   # something installed into the interpreter
    dist.mkdir()
    (dist / "RECORD").write_text("torch/__init__.py,,\n")
    torchinfo.probe_interpreter(python, cache)
    assert calls.read_text().count("x") == 2


def test_a_dry_runs_interpreter_probe_writes_nothing(tmp_path):
    from cuforge.env import torchinfo
    python, _ = _counting(tmp_path, _venv(tmp_path) / "bin" / "python")
    torchinfo.probe_interpreter(python, tmp_path / "probes", remember=False)
    assert not (tmp_path / "probes").exists()
