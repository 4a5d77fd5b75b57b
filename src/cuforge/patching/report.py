"""Show patch results as a table, for people."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from cuforge.patching.model import PatchResult, Status

_STYLE = {
    Status.APPLIED: "green",
    Status.NOT_APPLIED: "yellow",
    Status.DRIFTED: "bold red",
    Status.NOT_NEEDED: "dim",
}


def render(results: Sequence[PatchResult], title: str | None = None) -> Table:
    """A rich table: one row per patch with its file, status (before the operation) and action."""
    name = results[0].set_name if results else ""
    table = Table(title=title or f"patch set {name}", title_justify="left")
    table.add_column("patch", no_wrap=True)
    table.add_column("file", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("action / detail", overflow="fold")
    for r in results:
        status = f"[{_STYLE[r.status]}]{r.status.value}[/]"
        note = "; ".join(part for part in (r.action, r.detail) if part)
        table.add_row(r.patch_id, r.file, status, note)
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
