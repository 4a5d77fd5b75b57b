"""tasks.py's tasks take exactly the options of the cuforge commands they run, read from the
CLI's own parser (issue 42: five build flags once existed in the CLI and not in invoke)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from cuforge.cli.parser import command_options, command_positionals

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def tasks():
    spec = importlib.util.spec_from_file_location("cuforge_tasks", ROOT / "tasks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _flags(task) -> set[str]:
    return {a.name.replace("_", "-").rstrip("-") for a in task.get_arguments()}


@pytest.mark.parametrize("name,command,fixed", [
    ("build", "build", ()), ("setup", "setup", ()), ("verify", "verify", ()),
    ("doctor", "doctor", ()), ("shell", "shell", ()), ("resolve", "resolve", ()),
    ("build-env", "shell", ("print-env",)), ("mesh-convert", "mesh-convert", ()),
    ("index", "index", ())])
def test_each_task_takes_its_commands_options(tasks, name, command, fixed):
    cli = {o.flag.lstrip("-") for o in command_options(command)} - set(fixed)
    cli |= {o.param.replace("_", "-") for o in command_positionals(command).values()}
    assert _flags(tasks.ns.tasks[name]) == cli


def test_invoke_build_offers_the_flags_it_once_lacked():
    out = subprocess.run([str(BIN / "invoke"), "--help", "build"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    for flag in ("--skip-smoke", "--cache", "--emulate", "--one-at-a-time", "--upstream-tests"):
        assert flag in out, flag


@pytest.mark.parametrize("name,command", [("setup", "setup"), ("build", "build"),
                                          ("verify", "verify")])
def test_invoke_help_shows_the_value_each_option_takes(name, command):
    """Issue 50 point 8: `invoke --help setup` showed --src and --find-links as bare flags
    (invoke's list options), as if they took no value. Each option that takes one shows a
    value name, the CLI's own where it has one."""
    out = subprocess.run([str(BIN / "invoke"), "--help", name], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    shown = {line.split()[0] for line in out.splitlines() if line.startswith("  --")}
    for option in command_options(command):
        flag = next(s for s in shown if s.split("=")[0] == option.flag)
        assert ("=" in flag) == (not option.switch), flag
        if option.metavar and len(option.metavar) <= 24:
            assert flag == f"{option.flag}={option.metavar}", flag
    if command == "setup":
        assert {"--src=NAME=PATH", "--find-links=DIR", "--wheelhouse=DIR"} <= shown, shown


def test_a_task_passes_what_it_was_given_to_the_cli(tasks, monkeypatch):
    ran = []
    monkeypatch.setattr(tasks, "_cuforge", lambda *argv: ran.append(list(argv)))
    tasks.ns.tasks["build"].body(None, only="simple-knn", skip_smoke=True, src=["a=/x", "b=/y"],
                                 jobs="4")
    tasks.ns.tasks["verify"].body(None, paths="wh/a,wh/b", json=True)
    tasks.ns.tasks["patch-milo"].body(None, milo="/m", check=True)
    build, verify, patch = ran
    assert build[0] == "build" and build[build.index("--only") + 1] == "simple-knn"
    assert "--skip-smoke" in build and build.count("--src") == 2 and "--jobs" in build
    assert "--dry-run" not in build   # not given: not passed
    assert verify[:3] == ["verify", "wh/a", "wh/b"] and "--json" in verify
    assert patch[:3] == ["patch", "milo", "/m"] and "--check" in patch


def test_an_empty_value_reaches_the_cli_to_be_refused():
    """`invoke build --only ''` was taken as "not given" and built the demo; it now reaches
    the CLI, which refuses it (issue 50 point 5)."""
    run = subprocess.run([str(BIN / "invoke"), "build", "--only", "", "--dry-run"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and "--only '' names no package" in run.stderr, run.stderr
