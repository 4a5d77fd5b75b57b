"""core/runner.py's docstring names every module that starts a process without it ("The
house, third step": it said it was the one place, while 15 other modules made 25 direct
calls). The list is read from the docstring and compared with the calls the source makes, so a
new direct call, or one moved to the runner, changes the docstring too."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import cuforge
from cuforge.core import runner

PACKAGE = Path(cuforge.__file__).parent
SUBPROCESS_CALLS = {"run", "Popen", "call", "check_call", "check_output", "getoutput"}


def direct_calls(tree: ast.AST) -> list[str]:
    """``subprocess.<call>`` and ``os.exec*``/``os.spawn*``/``os.system`` calls in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)):
            continue
        owner, name = node.func.value.id, node.func.attr
        if (owner == "subprocess" and name in SUBPROCESS_CALLS) or (
                owner == "os" and (name.startswith(("exec", "spawn")) or name == "system")):
            found.append(f"{owner}.{name}")
    return found


def modules_that_start_processes() -> set[str]:
    return {str(path.relative_to(PACKAGE)) for path in sorted(PACKAGE.rglob("*.py"))
            if path.name != "runner.py" or path.parent.name != "core"
            if direct_calls(ast.parse(path.read_text(), str(path)))}


def named_in_runner_docstring() -> set[str]:
    listed = runner.__doc__.split("Not every process starts here.", 1)[1]
    return {path for path in re.findall(r"``([a-z_]+/[a-z0-9_/]+\.py)``", listed)
            if (PACKAGE / path).is_file()}   # a module's path, not this test's


def test_the_scan_sees_each_way_to_start_a_process():
    code = ("import os, subprocess\nsubprocess.run(['x'])\nsubprocess.Popen(['x'])\n"
            "os.execvpe('x', ['x'], {})\nos.system('x')\nsubprocess.TimeoutExpired\n")
    assert direct_calls(ast.parse(code)) == ["subprocess.run", "subprocess.Popen",
                                             "os.execvpe", "os.system"]


def test_runner_names_every_module_that_starts_a_process_itself():
    assert named_in_runner_docstring() == modules_that_start_processes()
