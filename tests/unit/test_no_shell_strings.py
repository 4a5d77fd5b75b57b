"""No user input reaches a shell: cuforge runs every command as an argument list. This scans
the source (the package, noxfile.py, tasks.py) for the ways a string becomes a shell command:
``shell=True``, ``os.system``/``os.popen``, ``subprocess.getoutput``, ``create_subprocess_shell``
and a subprocess call whose whole command line is one formatted string (nox's
``session.run("cuforge", ...)`` passes arguments; invoke's ``c.run(shlex.join([...]))`` quotes
each). (The same as ruff's S602/S604/S605, without
needing ruff installed.)"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [*sorted((ROOT / "src" / "cuforge").rglob("*.py")), ROOT / "noxfile.py",
           ROOT / "tasks.py"]
SHELL_FUNCS = {"system", "popen", "getoutput", "getstatusoutput", "create_subprocess_shell"}
RUNNERS = {"run", "Popen", "call", "check_call", "check_output"}


def _name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _command_string(arg: ast.expr) -> bool:
    """A whole command line in one string: built by formatting or concatenation, or a literal
    with spaces. (``shlex.join([...])``, invoke's way, quotes every argument: allowed.)"""
    if isinstance(arg, (ast.JoinedStr, ast.BinOp)):
        return True
    return isinstance(arg, ast.Constant) and isinstance(arg.value, str) and " " in arg.value


def shell_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for every call in ``tree`` that would hand a string to a shell."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _name(node.func)
        for kw in node.keywords:
            if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant)
                                          and kw.value.value is False):
                found.append((node.lineno, f"{name}(shell=...)"))
        if name in SHELL_FUNCS:
            found.append((node.lineno, name))
        if name in RUNNERS and len(node.args) == 1 and _command_string(node.args[0]):
            found.append((node.lineno, f"{name}(<string command>)"))
    return found


def test_the_scan_finds_each_form():
    code = ("import os, subprocess\nos.system('x')\nsubprocess.run('ls ' + d)\n"
            "subprocess.run(f'ls {d}')\nsubprocess.Popen(['ls'], shell=True)\n"
            "subprocess.run(['ls', d])\n")
    assert [line for line, _ in shell_uses(ast.parse(code))] == [2, 3, 4, 5]


def test_no_source_file_builds_a_shell_command():
    bad = [f"{path.relative_to(ROOT)}:{line}: {what}" for path in SOURCES
           for line, what in shell_uses(ast.parse(path.read_text(), str(path)))]
    assert not bad, "\n".join(bad)
