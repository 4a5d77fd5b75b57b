"""Text operations: exact-snippet replacement, include insertion and new files.

Every operation is anchored by content, never by line numbers, and leaves a recognisable result
(a ``cuforge:`` marker comment or the new text itself), so that one look at a file says whether
the patch is applied, not applied, or drifted (neither the original nor the patched text is
there). Snippets are written with ``\\n`` line ends in the manifest and matched in the file's own
line-end style, so a CRLF checkout patches like an LF one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cuforge.core.errors import PatchError
from cuforge.patching.model import PatchProbe, PatchStatus


def newline_of(text: str) -> str:
    """The line end a file uses: ``"\\r\\n"`` when it has any CRLF, else ``"\\n"``.

    >>> newline_of("a\\r\\nb\\r\\n")
    '\\r\\n'
    """
    return "\r\n" if "\r\n" in text else "\n"


def in_style(snippet: str, text: str) -> str:
    """Rewrite ``snippet``'s ``\\n`` line ends into the line-end style of ``text``."""
    newline = newline_of(text)
    return snippet if newline == "\n" else snippet.replace("\n", newline)


def _quote(snippet: str) -> str:
    """Indent a snippet for a multi-line message."""
    return "\n".join("      | " + line for line in snippet.splitlines())


@dataclass(frozen=True)
class Variant:
    """One accepted upstream spelling of a snippet and what it becomes."""

    find: str
    replace: str


@dataclass(frozen=True)
class ReplaceText:
    """Replace one exact snippet (which must occur exactly once, or ``occurrences`` times when
    upstream repeats it word for word: each is replaced) by another.

    Several variants cover upstream copies that differ in spacing; exactly one of them must match.
    ``fixed_if`` names a snippet whose presence means upstream already carries an equivalent fix.
    """

    variants: tuple[Variant, ...]
    fixed_if: str | None = None
    kind: str = "replace_text"
    occurrences: int = 1

    def probe(self, text: str | None) -> PatchProbe:
        if text is None:
            return PatchProbe(PatchStatus.MISSING, "the file does not exist")
        want = self.occurrences
        for variant in self.variants:
            count = text.count(in_style(variant.replace, text))
            if count == want:
                return PatchProbe(PatchStatus.APPLIED)
            if count:
                return PatchProbe(PatchStatus.DRIFTED, f"the patched text occurs {count} times; "
                                  f"expected {'once' if want == 1 else f'{want} times'}")
        found = [(v, text.count(in_style(v.find, text))) for v in self.variants]
        matching = [(v, n) for v, n in found if n]
        if len(matching) == 1 and matching[0][1] == want:
            return PatchProbe(PatchStatus.NOT_APPLIED)
        if matching:
            total = sum(n for _, n in matching)
            return PatchProbe(PatchStatus.DRIFTED, f"the snippet occurs {total} times; cuforge "
                              f"needs exactly {'one' if want == 1 else want}")
        if self.fixed_if is not None and in_style(self.fixed_if, text) in text:
            return PatchProbe(PatchStatus.NOT_NEEDED,
                              f"upstream already has {self.fixed_if.strip()!r}")
        return PatchProbe(PatchStatus.DRIFTED,
                          "neither the original nor the patched snippet is there")

    def _variant_found(self, text: str, attr: str) -> Variant:
        for variant in self.variants:
            if in_style(getattr(variant, attr), text) in text:
                return variant
        raise PatchError(f"internal: no variant of {self.expected()} found")

    def forward(self, text: str | None) -> str:
        assert text is not None
        variant = self._variant_found(text, "find")
        return text.replace(in_style(variant.find, text), in_style(variant.replace, text),
                            self.occurrences)

    def reverse(self, text: str) -> str | None:
        variant = self._variant_found(text, "replace")
        return text.replace(in_style(variant.replace, text), in_style(variant.find, text),
                            self.occurrences)

    def expected(self) -> str:
        if len(self.variants) == 1:
            return "the snippet:\n" + _quote(self.variants[0].find)
        return "one of the snippets:\n" + "\n      or\n".join(_quote(v.find) for v in self.variants)


def _bare(line: str) -> str:
    """A line without its line end and surrounding blanks, for content comparisons."""
    return line.strip()


@dataclass(frozen=True)
class InsertInclude:
    """Insert an ``#include`` line at the top of a file or after a line with given content.

    The inserted line carries a ``// cuforge:`` marker, so cuforge can tell its own line from one
    upstream already has (then the patch is *not needed* and a revert leaves it alone).
    """

    include: str
    note: str
    after: str | None = None  # None: at the very top of the file
    kind: str = "insert_include"

    @property
    def line(self) -> str:
        return f"{self.include}  // cuforge: {self.note}"

    def probe(self, text: str | None) -> PatchProbe:
        if text is None:
            return PatchProbe(PatchStatus.MISSING, "the file does not exist")
        lines = [_bare(line) for line in text.splitlines()]
        if lines.count(self.line) == 1:
            return PatchProbe(PatchStatus.APPLIED)
        if any(line.startswith(self.include) for line in lines):
            return PatchProbe(PatchStatus.NOT_NEEDED, f"upstream already has {self.include!r}")
        if self.after is None:
            return PatchProbe(PatchStatus.NOT_APPLIED)
        anchors = lines.count(_bare(self.after))
        if anchors == 1:
            return PatchProbe(PatchStatus.NOT_APPLIED)
        if anchors == 0:
            return PatchProbe(PatchStatus.DRIFTED, f"the anchor line {self.after!r} is not there")
        return PatchProbe(PatchStatus.DRIFTED,
                          f"the anchor line {self.after!r} occurs {anchors} times")

    def forward(self, text: str | None) -> str:
        assert text is not None
        newline = newline_of(text)
        lines = text.splitlines(keepends=True)
        index = 0
        if self.after is not None:
            index = next(i for i, line in enumerate(lines) if _bare(line) == _bare(self.after)) + 1
            if not lines[index - 1].endswith(("\n", "\r")):
                lines[index - 1] += newline  # the anchor was the last line, without a line end
        lines.insert(index, self.line + newline)
        return "".join(lines)

    def reverse(self, text: str) -> str | None:
        lines = text.splitlines(keepends=True)
        kept = [line for line in lines if _bare(line) != self.line]
        if len(kept) != len(lines) - 1:
            raise PatchError(f"internal: expected the line {self.line!r} exactly once")
        return "".join(kept)

    def expected(self) -> str:
        where = "at the top" if self.after is None else f"after the line {self.after!r}"
        return f"a place to insert {self.include!r} {where}"


@dataclass(frozen=True)
class InsertFile:
    """Add a new file with fixed content (e.g. ``force_abi.h``)."""

    content: str
    kind: str = "insert_file"

    def probe(self, text: str | None) -> PatchProbe:
        if text is None:
            return PatchProbe(PatchStatus.NOT_APPLIED)
        if text.replace("\r\n", "\n") == self.content:
            return PatchProbe(PatchStatus.APPLIED)
        return PatchProbe(PatchStatus.DRIFTED, "a file with different content is already there")

    def forward(self, text: str | None) -> str:
        return self.content

    def reverse(self, text: str) -> str | None:
        if text.replace("\r\n", "\n") != self.content:
            raise PatchError("internal: the added file was changed; refusing to delete it")
        return None

    def expected(self) -> str:
        return "no file there yet (cuforge adds it)"


@dataclass(frozen=True)
class IncludeWhereUsed(InsertInclude):
    """A field fix over a glob (``files``): ``include`` inserted at the top of every file that
    uses what it declares (``uses``, a regular expression) without including it, such as
    ``uint32_t`` without ``<cstdint>`` (GCC 13 stopped including it through other headers)."""

    uses: str = ""
    unless: str = ""      # a regular expression: an include that declares it too (<stdint.h>)
    kind: str = "include_where_used"

    def concerns(self, text: str | None) -> bool:
        if text is None:
            return False
        lines = [_bare(line) for line in text.splitlines()]
        if self.line in lines:
            return True
        already = any(line.startswith(self.include) for line in lines) or bool(
            self.unless and re.search(self.unless, text, re.MULTILINE))
        return not already and re.search(self.uses, text) is not None

    def expected(self) -> str:
        return f"a file that uses {self.uses!r} without {self.include!r}"


@dataclass(frozen=True)
class ReplacePattern:
    """A field fix over a glob (``files``): every match of ``pattern`` (a regular expression,
    multi-line) replaced by ``replace`` (``\\1`` for its groups); a second run finds it applied
    by the replacement's ``cuforge:`` note, or by its own text where it has none. Field
    fixes patch build copies only, so the edit is not reversible (a checkout is patched by its
    stack's own sets)."""

    pattern: str
    replace: str
    kind: str = "replace_pattern"

    @property
    def marker(self) -> str:
        """What shows the edit made: its ``cuforge:`` note, else the replacement's own text
        (groups left out: ``-std=c++17\\1`` -> ``-std=c++17``)."""
        at = self.replace.find("cuforge:")
        if at >= 0:
            return self.replace[at:].splitlines()[0]
        return re.sub(r"\\\d", "", self.replace).strip()

    def concerns(self, text: str | None) -> bool:
        return text is not None and (re.search(self.pattern, text, re.MULTILINE) is not None
                                     or bool(self.marker) and self.marker in text)

    def probe(self, text: str | None) -> PatchProbe:
        if text is None:
            return PatchProbe(PatchStatus.MISSING, "the file does not exist")
        found = re.findall(self.pattern, text, re.MULTILINE)
        if found:
            return PatchProbe(PatchStatus.NOT_APPLIED, f"{len(found)} match(es) of {self.pattern!r}")
        if self.marker and self.marker in text:
            return PatchProbe(PatchStatus.APPLIED)
        return PatchProbe(PatchStatus.NOT_NEEDED, f"nothing matches {self.pattern!r}")

    def forward(self, text: str | None) -> str:
        assert text is not None
        return re.sub(self.pattern, self.replace, text, flags=re.MULTILINE)

    def reverse(self, text: str) -> str | None:
        raise PatchError(f"{self.kind} edits build copies only and cannot be reverted",
                         hint="fetch the tree again (cuforge build --rebuild)")

    def expected(self) -> str:
        return f"a match of {self.pattern!r}"
