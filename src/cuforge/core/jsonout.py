"""``--json``: one JSON document on stdout, everything for people on stderr (uv's way).

While a ``--json`` command runs, file descriptor 1 points at stderr: rich's consoles, plain
``print`` and any child process (uv, pip, a compiler) that writes to stdout land on stderr, so
nothing can break the document. The command adds its fields with :func:`update` (a no-op
without ``--json``); the CLI writes the document once, at the end, with ``ok``, ``exit_code``
and ``error`` (the error object, or null). docs/json.md has each command's keys.

>>> document("matrix", {"combos": []}, exit_code=0)["schema_version"]
1
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

__all__ = ["SCHEMA_VERSION", "capture", "document", "error_object", "fields", "update",
           "write"]

# raised when a key changes meaning or goes away; a key added leaves it as it is
SCHEMA_VERSION = 1

_fields: dict[str, Any] | None = None   # the running command's document; None: no --json


def update(**fields: Any) -> None:
    """Add ``fields`` to the command's JSON document (nothing without ``--json``)."""
    if _fields is not None:
        _fields.update(fields)


def error_object(err: BaseException, exit_code: int) -> dict[str, Any]:
    """The ``error`` of a document: the kind, the message, the fix (as stderr says them).

    >>> from cuforge.core.errors import ConfigError
    >>> error_object(ConfigError("no combo x", hint="pick one"), 2)["hint"]
    'pick one'
    """
    hint = getattr(err, "hint", None)
    message = str(err)
    if hint:
        message = message.removesuffix(f"\n  fix: {hint}")
    return {"kind": getattr(err, "label", type(err).__name__), "message": message,
            "hint": hint, "exit_code": exit_code}


def document(command: str, fields: dict[str, Any], *, exit_code: int,
             error: dict[str, Any] | None = None) -> dict[str, Any]:
    """The whole document: the common keys first, then the command's own."""
    return {"schema_version": SCHEMA_VERSION, "command": command,
            "ok": exit_code == 0, "exit_code": exit_code, "error": error, **fields}


@contextmanager
def capture() -> Iterator[TextIO]:
    """Send what would go to stdout (this process's and its children's) to stderr while the
    block runs; yield the real stdout, where the document goes, and start a new document."""
    global _fields
    sys.stdout.flush()
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):   # a stand-in stdout (a test's capture)
        fd = None
    saved, real, old_stdout = None, sys.stdout, sys.stdout
    if fd is not None:
        saved = os.dup(fd)
        os.dup2(sys.stderr.fileno(), fd)
        real = os.fdopen(os.dup(saved), "w", encoding="utf-8")
    else:
        sys.stdout = sys.stderr
    _fields = {}
    try:
        yield real
    finally:
        _fields = None
        sys.stdout.flush()
        if saved is not None:
            real.close()
            os.dup2(saved, fd)
            os.close(saved)
        sys.stdout = old_stdout


def write(out: TextIO, doc: dict[str, Any]) -> None:
    out.write(json.dumps(doc, indent=2, default=str) + "\n")
    out.flush()


def fields() -> dict[str, Any]:
    """The fields the command added so far (a copy)."""
    return dict(_fields or {})
