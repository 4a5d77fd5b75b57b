"""Structural rename of a module attribute in Python sources (``np.in1d`` -> ``np.isin``).

The uses are found by walking the AST, whatever the module's import alias (``import numpy``,
``import numpy as np``, ``import numpy as _np``) and through ``from numpy import in1d``, never
from a list of files or snippets: a patch of this kind targets a glob (``files = "**/*.py"``)
and the engine asks :meth:`RenameAttribute.concerns` which files it touches.

Only the attribute name changes (the arguments stay as they are); each statement that changed
gets a ``# cuforge: ...`` marker at the end of its last line, so that a look at a file says
applied / not applied, and a revert without the backup store can find what to undo.

>>> op = RenameAttribute("numpy", "in1d", "isin", "cuforge: np.in1d is gone in NumPy 2")
>>> op.forward("import numpy as xp\\nm = xp.in1d(a, b)\\n")
'import numpy as xp\\nm = xp.isin(a, b)  # cuforge: np.in1d is gone in NumPy 2\\n'
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass

from cuforge.core.errors import PatchError
from cuforge.patching.model import PatchProbe, PatchStatus


@dataclass(frozen=True)
class _Edit:
    """Replace ``old`` (the text at 1-based ``line``, character column ``col``) by ``new``."""

    line: int
    col: int
    old: str
    new: str


def _char_col(line: str, byte_col: int) -> int:
    """AST columns count UTF-8 bytes; string slicing counts characters."""
    return len(line.encode("utf-8", "surrogateescape")[:byte_col].decode("utf-8", "surrogateescape"))


def _parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None   # not Python we can read: nothing to rewrite here


def _aliases(tree: ast.Module, module: str) -> set[str]:
    """Names bound to ``module`` anywhere in the file (``import numpy as np`` -> ``np``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == module:
                    names.add(alias.asname or module)
                elif alias.name.startswith(module + ".") and alias.asname is None:
                    names.add(module)          # `import numpy.linalg` binds `numpy` too
    return names



def _renames(text: str, module: str, old: str, new: str) -> list[_Edit]:
    """Every ``<alias of module>.<old>`` and ``from module import <old>`` in ``text``."""
    tree = _parse(text)
    if tree is None:
        return []
    lines = text.splitlines(keepends=True)
    aliases = _aliases(tree, module)
    edits = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr == old
                and isinstance(node.value, ast.Name) and node.value.id in aliases):
            end = _char_col(lines[node.end_lineno - 1], node.end_col_offset)
            edits.append(_Edit(node.end_lineno, end - len(old), old, new))
        elif isinstance(node, ast.ImportFrom) and node.module == module and not node.level:
            for alias in node.names:
                if alias.name != old:
                    continue
                text_line = lines[alias.lineno - 1]
                col = _char_col(text_line, alias.col_offset)
                if alias.asname is None:      # keep the local name: `import isin as in1d`
                    edits.append(_Edit(alias.lineno, col, old, f"{new} as {old}"))
                elif alias.asname == new:     # `import in1d as isin` -> `import isin`
                    end = _char_col(text_line, alias.end_col_offset)
                    edits.append(_Edit(alias.lineno, col, text_line[col:end], new))
                else:                         # `import in1d as f` -> `import isin as f`
                    edits.append(_Edit(alias.lineno, col, old, new))
    return sorted(edits, key=lambda e: (e.line, e.col))


def _rewrite(text: str, edits: list[_Edit]) -> list[str]:
    """``text``'s lines (with their ends) with ``edits`` made, right to left per line."""
    lines = text.splitlines(keepends=True)
    for e in reversed(edits):
        line = lines[e.line - 1]
        if line[e.col:e.col + len(e.old)] != e.old:
            raise PatchError(f"internal: expected {e.old!r} at line {e.line}, column {e.col}")
        lines[e.line - 1] = line[:e.col] + e.new + line[e.col + len(e.old):]
    return lines


def _statement_ends(text: str) -> dict[int, int]:
    """Physical line -> the last physical line of its logical line (where a comment can go)."""
    ends: dict[int, int] = {}
    start = None
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT,
                            tokenize.ENCODING, tokenize.ENDMARKER):
                continue
            if start is None:
                start = tok.start[0]
            if tok.type == tokenize.NEWLINE:
                for line in range(start, tok.start[0] + 1):
                    ends[line] = tok.start[0]
                start = None
    except (tokenize.TokenError, SyntaxError):
        pass
    return ends


def _body_and_eol(line: str) -> tuple[str, str]:
    body = line.rstrip("\r\n")
    return body, line[len(body):]


@dataclass(frozen=True)
class RenameAttribute:
    """Rename ``module.old`` to ``module.new`` everywhere in a file, marking each statement."""

    module: str
    old: str
    new: str
    note: str           # the marker text, "cuforge: ..."
    kind: str = "rename_attribute"

    @property
    def marker(self) -> str:
        return f"  # {self.note}"

    def _marked(self, text: str) -> list[int]:
        return [i for i, line in enumerate(text.splitlines(), 1) if line.endswith(self.marker)]

    def concerns(self, text: str | None) -> bool:
        """Whether this file has something to rewrite or something this op wrote (cheap first)."""
        if text is None or (self.old not in text and self.note not in text):
            return False
        return bool(self._marked(text) or _renames(text, self.module, self.old, self.new))

    def probe(self, text: str | None) -> PatchProbe:
        if text is None:
            return PatchProbe(PatchStatus.MISSING, "the file does not exist")
        uses = _renames(text, self.module, self.old, self.new)
        if uses:
            where = ", ".join(str(e.line) for e in uses)
            return PatchProbe(PatchStatus.NOT_APPLIED,
                              f"{len(uses)} use(s) of {self.module}.{self.old} "
                                             f"(line {where})")
        if self._marked(text):
            return PatchProbe(PatchStatus.APPLIED, f"{self.module}.{self.new} on line(s) "
                                         f"{', '.join(map(str, self._marked(text)))}")
        return PatchProbe(PatchStatus.NOT_NEEDED, f"no use of {self.module}.{self.old}")

    def forward(self, text: str | None) -> str:
        assert text is not None
        edits = _renames(text, self.module, self.old, self.new)
        ends = _statement_ends(text)
        lines = _rewrite(text, edits)
        for last in sorted({ends.get(e.line, e.line) for e in edits}):
            body, eol = _body_and_eol(lines[last - 1])
            if not body.endswith(self.marker):
                lines[last - 1] = body + self.marker + eol
        return "".join(lines)

    def reverse(self, text: str) -> str:
        """Undo by the markers: in each marked statement, ``module.new`` becomes ``old`` again."""
        ends = _statement_ends(text)
        marked = set(self._marked(text))
        statements = {line for line, end in ends.items() if end in marked} | marked
        back = [e for e in _renames(text, self.module, self.new, self.old)
                if e.line in statements]
        lines = _rewrite(text, back)
        for number in marked:
            body, eol = _body_and_eol(lines[number - 1])
            lines[number - 1] = body.removesuffix(self.marker) + eol
        if not marked:
            raise PatchError(f"no '{self.note}' marker to revert")
        return "".join(lines)

    def expected(self) -> str:
        return f"a use of {self.module}.{self.old}, or the marker '# {self.note}'"
