"""Show patch results as a table, for people."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text

from cuforge.core.console import table as make_table

from cuforge.patching.model import PatchResult, PatchStatus

_STYLE = {
    PatchStatus.APPLIED: "green",
    PatchStatus.NOT_APPLIED: "yellow",
    PatchStatus.DRIFTED: "bold red",
    PatchStatus.MISSING: "bold red",
    PatchStatus.NOT_NEEDED: "dim",
}


def render(results: Sequence[PatchResult], title: str | None = None) -> Table:
    """A rich table: one row per patch with its file, status (before the operation) and action.
    Cells are plain Text (file names and details keep their brackets); folds to 80 columns."""
    name = results[0].set_name if results else ""
    table = make_table("patch", "file", "status", "action / detail",
                       title=title or f"patch set {name}", wide=["file", "action / detail"])
    table.title_justify = "left"
    for r in results:
        note = "; ".join(part for part in (r.action, r.detail) if part)
        table.add_row(Text(r.patch_id), Text(r.file),
                      Text(r.status.value, style=_STYLE[r.status]), Text(note))
    return table


def summary(results: Sequence[PatchResult], verb: str) -> str:
    """One line for people: what changed, or that nothing did (``verb``: applied/reverted/check)."""
    if not results:
        return "no patches"
    if verb == "check":
        counts: dict[str, int] = {}
        for r in results:
            counts[r.status.value] = counts.get(r.status.value, 0) + 1
        return ", ".join(f"{n} {status}" for status, n in counts.items())
    changed = [r for r in results if r.changed]
    name = results[0].set_name
    if not changed:
        if verb == "reverted":
            return f"nothing changed: no patch of {name!r} is applied here"
        return f"nothing changed: every patch of {name!r} is already applied (or not needed)"
    files = len({r.file for r in changed})
    return f"{len(changed)} patch(es) {changed[0].action} in {files} file(s)"
