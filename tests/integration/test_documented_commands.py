"""Every command README.md and docs/*.md show exists: each ``invoke X`` is a task of
``invoke --list`` and answers ``invoke --help X``, each ``nox -s X`` a session of ``nox -l``, each
``cuforge X`` a command of the CLI's parser that answers ``cuforge X --help``.

Commands are read from code only (fenced or indented blocks, and `inline code`), so prose such as
"cuforge then creates" is not taken for a command. Four tasks were once lost in a rewrite of
tasks.py while the README kept showing them; this test is what notices that now.
"""

from __future__ import annotations

import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent
# `nox -s build-<python>-<accel>` is a template: <...> stands for one dash-free word
# a command starts a code line or span, or follows `&&`, `;`, `|`, `(` or `python -m`
# (so quoted output such as "..., cuforge does not cross-compile" is not one)
_COMMAND = re.compile(r"(?:^|&&|;|\||\(|-m)\s*(?:\$\s+)?(invoke|nox -s|cuforge)\s+"
                      r"([a-z<][\w.<>-]*)", re.M)
_INLINE = re.compile(r"`([^`\n]+)`")


def code_text(markdown: str) -> list[str]:
    """The code in a Markdown text: lines of fenced and indented blocks, and inline spans."""
    out: list[str] = []
    fenced = indented = False
    prev_blank = True
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        # an indented block starts after a blank line and runs until a non-indented line
        indented = line.startswith("    ") and (indented or prev_blank) or (
            indented and not line.strip())
        if fenced or indented:
            out.append(line)
        else:
            out += _INLINE.findall(line)
        prev_blank = not line.strip()
    return out


def documented() -> set[tuple[str, str, str]]:
    """(tool, name, where) for every command the docs show."""
    found = set()
    for doc in DOCS:
        for text in code_text(doc.read_text()):
            for tool, name in _COMMAND.findall(text):
                found.add((tool, name.rstrip(".-"), doc.name))
    return found


@cache
def invoke_tasks() -> set[str]:
    out = subprocess.run([str(BIN / "invoke"), "--list"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.startswith("  ")}


@cache
def nox_sessions() -> set[str]:
    out = subprocess.run([str(BIN / "nox"), "-l"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    return {line.split()[1] for line in out.splitlines() if line.startswith(("* ", "- "))}


@cache
def cli_commands() -> set[str]:
    from cuforge.cli.parser import make_parser
    parser = make_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return set(sub.choices)


def _matches(name: str, known: set[str]) -> bool:
    if "<" not in name:
        return name in known
    pattern = "[^-]+".join(re.escape(part) for part in re.split(r"<[^>]*>", name))
    return any(re.fullmatch(pattern, k) for k in known)


def test_the_docs_show_commands_of_every_tool():
    tools = {tool for tool, _, _ in documented()}
    assert tools == {"invoke", "nox -s", "cuforge"}, tools
    # the four tasks that were once lost are among what the README shows
    shown = {name for tool, name, _ in documented() if tool == "invoke"}
    assert {"ci-matrix", "ci-workflow", "index", "resolve"} <= shown


def test_every_documented_command_exists():
    known = {"invoke": invoke_tasks(), "nox -s": nox_sessions(), "cuforge": cli_commands()}
    missing = sorted(f"{doc}: `{tool} {name}`" for tool, name, doc in documented()
                     if not _matches(name, known[tool]))
    assert not missing, "documented but not there:\n" + "\n".join(missing)


@pytest.mark.parametrize("command", sorted({name for tool, name, _ in documented()
                                            if tool == "cuforge"}))
def test_each_documented_cli_command_answers_help(command):
    proc = subprocess.run([sys.executable, "-m", "cuforge", command, "--help"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert f"cuforge {command}" in proc.stdout


@pytest.mark.parametrize("task", sorted({name for tool, name, _ in documented()
                                         if tool == "invoke"}))
def test_each_documented_task_answers_help(task):
    # `invoke --help TASK`: with `TASK --help`, invoke hands "--help" to a required argument
    proc = subprocess.run([str(BIN / "invoke"), "--help", task], cwd=ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"[--core-opts] {task} " in proc.stdout


def test_a_missing_task_is_noticed():
    """The collector and the check see a command that does not exist (the test can fail)."""
    text = code_text("Run\n\n    invoke no-such-task --flag\n\nand `cuforge nope` then.\n")
    assert [t for t in text if t.strip()] == ["    invoke no-such-task --flag", "cuforge nope"]
    assert not _matches("no-such-task", invoke_tasks())
    assert not _matches("nope", cli_commands())
    assert _matches("build-<python>-<accel>", nox_sessions())
