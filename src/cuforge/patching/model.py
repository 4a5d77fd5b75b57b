"""The data a patch set is made of, and what an operation reports back.

A patch set is a directory ``patches/<name>/`` holding ``patch.toml`` and payload files. Each
``[[patch]]`` entry becomes one :class:`Patch`: an id, the file it targets (relative to the tree
being patched), a ``why`` note for people, and an *operation* that knows how to recognise the
original text, recognise its own result, and turn one into the other.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


class PatchStatus(enum.Enum):
    """Where one patch stands in one tree."""

    APPLIED = "applied"
    NOT_APPLIED = "not applied"
    DRIFTED = "drifted"
    MISSING = "missing"   # the file it edits is not in the tree (another tree, or a version
                          # without it): nothing there to drift from
    # The upstream file already carries an equivalent fix (or an optional target is absent):
    # nothing to do, and nothing to revert.
    NOT_NEEDED = "not needed"


@dataclass(frozen=True)
class PatchProbe:
    """What an operation found when it looked at a file's current text."""

    status: PatchStatus
    detail: str = ""


class Operation(Protocol):
    """One edit on one file. ``text`` is ``None`` when the file does not exist."""

    kind: str

    def probe(self, text: str | None) -> PatchProbe:
        """Say whether the edit is applied, not applied, drifted, missing (``text`` is None)
        or not needed in ``text``."""
        ...

    def forward(self, text: str | None) -> str:
        """Return ``text`` with the edit made (only called when :meth:`probe` said not applied)."""
        ...

    def reverse(self, text: str) -> str | None:
        """Undo the edit without a backup (``None`` deletes the file); PatchError if impossible."""
        ...

    def expected(self) -> str:
        """Describe, for a drift message, what the operation expects to find."""
        ...


@dataclass(frozen=True)
class Patch:
    """One entry of a patch set."""

    id: str
    file: str
    why: str
    op: Operation
    optional: bool = False
    # A glob over the tree (``**/*.py``) instead of one file: the engine turns the patch into one
    # per file that its operation ``concerns`` (see ``engine.expand``); ``file`` is the glob.
    glob: bool = False

    @property
    def kind(self) -> str:
        return self.op.kind


@dataclass(frozen=True)
class PatchSet:
    """A named, ordered list of patches loaded from ``patches/<name>/patch.toml``."""

    name: str
    description: str
    directory: Path
    patches: tuple[Patch, ...] = field(default_factory=tuple)

    def files(self) -> list[str]:
        """The target files, in first-use order, each once."""
        return list(dict.fromkeys(p.file for p in self.patches))


@dataclass(frozen=True)
class PatchResult:
    """The outcome of apply / check / revert for one patch.

    ``status`` is the state found *before* the operation; ``action`` says what was done (or, in a
    dry run, what would be done).
    """

    set_name: str
    patch_id: str
    file: str
    kind: str
    status: PatchStatus
    action: str
    detail: str = ""
    why: str = ""

    @property
    def changed(self) -> bool:
        """True when this operation wrote (or, in a dry run, would write) the file."""
        return self.action.startswith(("applied", "reverted", "would "))
