"""Python function replacement, located with :mod:`ast` by qualified name.

The patch replaces the source of one function (``nvdiff_rasterization`` or
``MeshRasterizer.__init__``) with ours. Before touching it, cuforge checks that the function is
still the one the patch was written against: the manifest records a hash of its *syntax tree*
(comments and formatting do not count, code does). A payload may define helper functions before
the target function; they are inserted with it, at the same level.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass

from cuforge.core.errors import PatchError
from cuforge.patching.model import PatchProbe, PatchStatus
from cuforge.patching.textops import newline_of

MARKER = "cuforge:"

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def canonical_dump(node: object) -> str:
    """A stable text form of a syntax tree, the same on Python 3.11, 3.12 and 3.13.

    ``ast.dump`` changed its output in 3.13 (empty fields are left out) and 3.12 added fields
    (``type_params``); leaving out every ``None`` / empty field makes the form independent of both.
    Positions are not fields, so formatting and comments never change the result.
    """
    if isinstance(node, ast.AST):
        parts = [
            f"{name}={canonical_dump(value)}"
            for name, value in ast.iter_fields(node)
            if value is not None and value != []
        ]
        return f"{type(node).__name__}({', '.join(parts)})"
    if isinstance(node, list):
        return "[" + ", ".join(canonical_dump(item) for item in node) + "]"
    return repr(node)


def code_hash(node: ast.AST) -> str:
    """sha256 of :func:`canonical_dump` of a definition."""
    return hashlib.sha256(canonical_dump(node).encode()).hexdigest()


def find_definition(tree: ast.Module, qualname: str) -> tuple[ast.AST | None, list[ast.stmt]]:
    """Find ``a.b.c`` (classes, then a function) in a module.

    Returns the definition (or ``None``) and the statement list it lives in (its scope).
    """
    scope: list[ast.stmt] = tree.body
    node: ast.AST | None = None
    for part in qualname.split("."):
        node = next((s for s in scope if isinstance(s, _DEFS) and s.name == part), None)
        if node is None:
            return None, scope
        if part != qualname.split(".")[-1]:
            if not isinstance(node, ast.ClassDef):
                return None, scope
            scope = node.body
    return node, scope


def _first_line(node: ast.AST) -> int:
    """The first line of a definition, decorators included (1-based)."""
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)])


@dataclass(frozen=True)
class ReplaceFunction:
    """Replace the definition ``qualname`` in a Python file with the payload's definitions."""

    qualname: str
    payload: str
    original_sha256: str
    kind: str = "replace_function"

    def __post_init__(self) -> None:
        tree = ast.parse(self.payload)
        names = [s.name for s in tree.body if isinstance(s, _DEFS)]
        if not names or names[-1] != self.name:
            raise PatchError(
                f"the payload for {self.qualname} must end with the definition of {self.name!r}"
            )

    @property
    def name(self) -> str:
        return self.qualname.split(".")[-1]

    def _payload_defs(self) -> dict[str, str]:
        """Name -> code hash of every definition in the payload (helpers and the target)."""
        tree = ast.parse(self.payload)
        return {s.name: code_hash(s) for s in tree.body if isinstance(s, _DEFS)}

    def probe(self, text: str | None) -> PatchProbe:
        if text is None:
            return PatchProbe(PatchStatus.MISSING, "the file does not exist")
        try:
            tree = ast.parse(text)
        except SyntaxError as err:
            return PatchProbe(PatchStatus.DRIFTED,
                              f"the file does not parse as Python (line {err.lineno})")
        node, scope = find_definition(tree, self.qualname)
        if node is None:
            return PatchProbe(PatchStatus.DRIFTED, f"{self.qualname} is not defined in the file")
        ours = self._payload_defs()
        present = {s.name: code_hash(s) for s in scope if isinstance(s, _DEFS)}
        current = code_hash(node)
        if current == ours[self.name]:
            wrong = [n for n, h in ours.items() if present.get(n) != h]
            if wrong:
                return PatchProbe(PatchStatus.DRIFTED,
                                  f"cuforge's helper(s) {', '.join(wrong)} were changed")
            return PatchProbe(PatchStatus.APPLIED)
        if current == self.original_sha256:
            clashes = [n for n in ours if n != self.name and n in present]
            if clashes:
                return PatchProbe(PatchStatus.DRIFTED,
                                  f"names cuforge would add already exist: {clashes}")
            return PatchProbe(PatchStatus.NOT_APPLIED)
        source = ast.get_source_segment(text, node) or ""
        if MARKER in source:
            return PatchProbe(
                PatchStatus.DRIFTED,
                f"{self.qualname} is an edited or older cuforge version; revert it first",
            )
        return PatchProbe(
            PatchStatus.DRIFTED,
            f"{self.qualname} changed upstream (code hash {current[:12]}…, "
            f"expected {self.original_sha256[:12]}…)",
        )

    def forward(self, text: str | None) -> str:
        assert text is not None
        node, _ = find_definition(ast.parse(text), self.qualname)
        assert node is not None
        lines = text.splitlines(keepends=True)
        start, end = _first_line(node) - 1, node.end_lineno
        indent = " " * node.col_offset
        newline = newline_of(text)
        body = [
            (indent + line if line.strip() else "") + newline
            for line in self.payload.rstrip("\n").split("\n")
        ]
        return "".join(lines[:start] + body + lines[end:])

    def reverse(self, text: str) -> str | None:
        raise PatchError(
            f"cuforge cannot undo the replacement of {self.qualname} without its backup",
            hint="restore the file from version control (git checkout -- FILE)",
        )

    def expected(self) -> str:
        return (
            f"the upstream definition of {self.qualname} "
            f"(code hash {self.original_sha256}) or cuforge's replacement"
        )
