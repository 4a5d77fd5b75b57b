"""The plan is what runs, and its keys decide what is rebuilt. Two tiny C extensions from local
paths (no CUDA: seconds each) built through the real pipeline in a throw-away project that
reuses the 3.11-cu130 combo env (slow marker: needs that env).

- the dry run lists exactly the commands (argv + environment) the build then runs;
- a rerun with nothing changed runs no command at all (local paths included);
- one changed source file, one changed patch, or another arch list rebuilds exactly the
  packages they touch.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cuforge.core.errors import ToolchainError

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

SETUP = """from setuptools import Extension, setup
setup(name="{name}", version="1.0", packages=["{name}"],
      ext_modules=[Extension("{name}._c", ["{name}/_c.cpp"])])
"""
EXT = """#include <Python.h>
static struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "_c", 0, -1, 0};
PyMODINIT_FUNC PyInit__c(void) { return PyModule_Create(&m); }
"""
PATCH = """[set]
name = "tinyb-greeting"
description = "a build-time patch of tinyb"

[[patch]]
id = "greeting"
kind = "replace_text"
file = "tinyb/__init__.py"
find = "GREETING = 'hi'"
replace = "GREETING = '{word}'"
why = "a test patch"
"""


def _package(root: Path, name: str) -> Path:
    tree = root / name
    (tree / name).mkdir(parents=True)
    (tree / "setup.py").write_text(SETUP.format(name=name))
    (tree / name / "__init__.py").write_text("from . import _c\nGREETING = 'hi'\n")
    (tree / name / "_c.cpp").write_text(EXT)
    return tree


@pytest.fixture
def project(tmp_path):
    if not any((ROOT / ".cuforge" / "envs").glob("3.11-cu130-*/bin/python")):
        pytest.skip("the 3.11-cu130 combo env is not created yet (run the demo build first)")
    proj = tmp_path / "proj"
    shutil.copytree(ROOT / "envs", proj / "envs")
    (proj / "recipes").mkdir()
    a, b = _package(tmp_path, "tinya"), _package(tmp_path, "tinyb")
    # tinya knows one arch (9.0) and skips the others; tinyb takes the combo's list as it is
    (proj / "recipes" / "tinya.toml").write_text(
        f'kind = "setuptools"\n[source]\npath = "{a}"\n'
        '[arches]\ndevice_code = false\npolicy = "skip"\nsupported = ["9.0"]\n')
    (proj / "recipes" / "tinyb.toml").write_text(
        f'kind = "setuptools"\npatches = ["tinyb-greeting"]\n[source]\npath = "{b}"\n'
        '[arches]\ndevice_code = false\n')
    (proj / "patches" / "tinyb-greeting").mkdir(parents=True)
    (proj / "patches" / "tinyb-greeting" / "patch.toml").write_text(PATCH.format(word="hello"))
    envs = proj / ".state" / "envs"   # reuse the real combo env: no second torch install
    envs.mkdir(parents=True)
    for env_dir in (ROOT / ".cuforge" / "envs").glob("3.11-cu130-*"):
        if env_dir.is_dir():
            (envs / env_dir.name).symlink_to(env_dir)
    return proj


def _cuforge(proj: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    trace = proj / "trace.jsonl"
    trace.unlink(missing_ok=True)
    env = {**os.environ, "CUFORGE_ROOT": str(proj), "CUFORGE_STATE": str(proj / ".state"),
           "CUFORGE_WHEELHOUSE": str(proj / "wh"), "CUFORGE_TRACE": str(trace),
           "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-m", "cuforge", "build", "--combo", "3.11-cu130",
                           "--only", "tinya,tinyb", "--cuda-arch", "9.0", "--jobs", "2", *args],
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ran = [json.loads(line) for line in trace.read_text().splitlines()] if trace.exists() else []
    return proc, ran


def _dry_run_commands(text: str) -> list[dict]:
    """The commands of a dry run: every line that is not a comment, with its exports."""
    commands, env = [], {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").partition("=")
            env[name] = shlex.split(value)[0] if value else ""
        else:
            commands.append({"argv": shlex.split(line), "env": env})
            env = {}
    return commands


def _built(ran: list[dict]) -> list[str]:
    """Packages whose wheel was built: the source dir at the end of each build command."""
    return sorted(Path(c["argv"][-1]).parent.name for c in ran
                  if "cuforge.pipeline.builders.pep517" in c["argv"])


def _key(cmd: dict) -> str:
    return json.dumps(cmd, sort_keys=True)


def test_dry_run_lists_exactly_what_the_build_runs(project):
    dry, ran = _cuforge(project, "--dry-run")
    assert ran == []                                   # a dry run runs nothing
    planned = _dry_run_commands(dry.stdout)
    assert len(planned) == 2, dry.stdout
    _, ran = _cuforge(project)
    # tinya and tinyb are independent: they build side by side, so order across them varies
    assert sorted(map(_key, ran)) == sorted(map(_key, planned))


def test_keys_decide_what_is_rebuilt(project, tmp_path):
    _, ran = _cuforge(project)
    assert _built(ran) == ["tinya", "tinyb"]

    again, ran = _cuforge(project)
    up_to_date = [ln for ln in again.stderr.splitlines() if ln.startswith("up to date")]
    assert ran == [] and len(up_to_date) == 2, again.stderr   # local paths included

    (tmp_path / "tinya" / "tinya" / "_c.cpp").write_text(EXT + "// an edit\n")
    _, ran = _cuforge(project)
    assert _built(ran) == ["tinya"]                     # one source file: its package only

    patch = project / "patches" / "tinyb-greeting" / "patch.toml"
    patch.write_text(PATCH.format(word="hey"))
    _, ran = _cuforge(project)
    assert _built(ran) == ["tinyb"]                     # one patch: its package only

    # 9.0 -> 9.0;12.0: tinya knows only 9.0 (same mapped list), tinyb takes the new list
    _, ran = _cuforge(project, "--cuda-arch", "9.0;12.0")
    assert _built(ran) == ["tinyb"]


# -- the dry run is the plan: its wheel dir and keys are the build's, and it writes nothing ----

def _dry_plan(text: str) -> tuple[str, dict[str, str]]:
    """(wheel dir, {package: key}) as a dry run prints them."""
    wheel_dir = next(ln.removeprefix("# wheel dir: ") for ln in text.splitlines()
                     if ln.startswith("# wheel dir: "))
    keys, name = {}, None
    for line in text.splitlines():
        if line.startswith("# ---- "):
            name = line.split()[2]
        elif line.startswith("# key ") and name:
            keys[name] = line.removeprefix("# key ")
    return wheel_dir, keys


def _snapshot(proj: Path) -> dict[str, int]:
    """Every file under the project's state (and the top of each linked combo env, where the
    probe cache and the toolkit marker live) with its mtime: what a dry run must not touch."""
    seen = {}
    for where, dirs, files in os.walk(proj / ".state"):
        for name in files + [d for d in dirs if (Path(where) / d).is_symlink()]:
            path = Path(where) / name
            seen[str(path)] = path.lstat().st_mtime_ns
            if path.is_symlink() and path.is_dir():   # a linked env: its top level
                for child in path.iterdir():
                    seen[str(child)] = child.lstat().st_mtime_ns
    return seen


def _manifest_keys(wheel_dir: str) -> dict[str, str]:
    lines = (Path(wheel_dir) / "manifest.jsonl").read_text().splitlines()
    return {e["package"]: e["plan_key"] for e in map(json.loads, lines)}


def test_the_dry_run_prints_the_wheel_dir_and_keys_the_build_uses(project):
    before = _snapshot(project)
    dry, _ = _cuforge(project, "--dry-run")
    assert _snapshot(project) == before                 # wrote nothing, not even a cache
    wheel_dir, keys = _dry_plan(dry.stdout)
    assert wheel_dir.endswith("cu130/torch2.14.1-cp311") and set(keys) == {"tinya", "tinyb"}
    _cuforge(project)
    assert _manifest_keys(wheel_dir) == keys


def test_an_interpreter_combo_plans_for_its_own_torch(project, tmp_path):
    """A stub interpreter (a script that runs the combo env's Python) whose torch, 2.14.1, is
    not the one asked for: the dry run names the wheel dir and keys of that torch's build."""
    real = next((ROOT / ".cuforge" / "envs").glob("3.11-cu130-*/bin/python"))
    stub = tmp_path / "stub-python"
    stub.write_text(f'#!/bin/sh\nexec {shlex.quote(str(real))} "$@"\n')
    stub.chmod(0o755)
    own = ("--interpreter", str(stub), "--torch", "2.13.0")
    before = _snapshot(project)
    dry, _ = _cuforge(project, *own, "--dry-run")
    assert _snapshot(project) == before                 # no toolkit assembled, nothing cached
    wheel_dir, keys = _dry_plan(dry.stdout)
    assert wheel_dir.endswith("torch2.14.1-cp311"), dry.stdout   # its own torch, not 2.13.0
    _cuforge(project, *own)
    assert _manifest_keys(wheel_dir) == keys


def test_an_emulated_plan_carries_the_emulation_in_every_step(project):
    """spark-emulated, plan only (its env needs `cuforge emulation setup` and ~90 s of QEMU):
    the emulation's variables are in each build command's environment, so in its key."""
    if shutil.which("aarch64-linux-gnu-g++") is None:
        pytest.skip("no aarch64 cross compiler here (g++-aarch64-linux-gnu)")
    before = _snapshot(project)
    env = {**os.environ, "CUFORGE_ROOT": str(project), "CUFORGE_STATE": str(project / ".state"),
           "CUFORGE_WHEELHOUSE": str(project / "wh"), "COLUMNS": "200"}
    dry = subprocess.run([sys.executable, "-m", "cuforge", "build", "--combo", "spark-emulated",
                          "--only", "tinya,tinyb", "--dry-run"], env=env, capture_output=True,
                         text=True, timeout=300)
    if dry.returncode == ToolchainError.exit_code and "emulation is not usable here" in dry.stderr:
        # the dry run refuses what the build would (issue 43): one line, nothing written
        assert dry.stderr.count("cuforge: toolchain error") == 1 and not dry.stdout
        assert _snapshot(project) == before
        pytest.skip("this state has no usable linux-aarch64 emulation (`cuforge emulation "
                    "setup`): the dry run refused, as the build would")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert _snapshot(project) == before
    wheel_dir, keys = _dry_plan(dry.stdout)
    assert wheel_dir.endswith("linux-aarch64/cu130/torch2.14.1-cp311")
    builds = [c for c in _dry_run_commands(dry.stdout) if "cuforge.pipeline.builders.pep517" in c["argv"]]
    assert len(builds) == 1 and set(keys) == {"tinya", "tinyb"}   # tinya knows only 9.0: skipped
    root = project / ".state" / "emulation" / "linux-aarch64" / "root"
    for build in builds:
        assert build["env"]["QEMU_LD_PREFIX"] == str(root)
        assert build["env"]["NVCC_PREPEND_FLAGS"] == "-target-dir sbsa-linux"
        # the sysroot compiler wrappers right after the env's own bin/
        assert build["env"]["PATH"].split(os.pathsep)[1] == str(root.parent / "bin")
