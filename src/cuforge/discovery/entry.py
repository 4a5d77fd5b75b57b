"""A checkout's entry scripts (train.py, render.py, ...): the top-level ``*.py`` files that run
as programs (``if __name__ == "__main__"``) and parse arguments (argparse), so that
``python SCRIPT --help`` imports everything the script needs and exits 0. Setup runs each so
in the venv: the proof that the checkout's own code loads, not only the wheels."""

from __future__ import annotations

import re
from pathlib import Path

_MAIN = re.compile(r"""^if\s+__name__\s*==\s*["']__main__["']\s*:""", re.MULTILINE)
_ARGPARSE = re.compile(r"\bargparse\b|\bArgumentParser\b")
_MISSING = re.compile(r"""(?:ModuleNotFoundError|ImportError): No module named ['"]([\w.]+)['"]""")


def entry_scripts(root: Path) -> tuple[str, ...]:
    """The checkout's top-level scripts that run as programs with argparse, by name."""
    found = []
    for path in sorted(root.glob("*.py")):
        text = path.read_text(errors="replace")
        if _MAIN.search(text) and _ARGPARSE.search(text):
            found.append(path.name)
    return tuple(found)


def missing_module(stderr: str) -> str:
    """The top-level module a failed import names (``No module named 'plyfile'``), or "".

    >>> missing_module("Traceback ...\\nModuleNotFoundError: No module named 'simple_knn._C'\\n")
    'simple_knn'
    """
    found = _MISSING.findall(stderr)
    return found[-1].split(".")[0] if found else ""
