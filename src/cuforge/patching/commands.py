"""The CLI hook: ``cuforge patch milo PATH`` and ``invoke patch-milo`` call this."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from cuforge.core.console import make_console
from cuforge.core.errors import ConfigError, PatchError
from cuforge.patching.engine import apply as run_apply
from cuforge.patching.engine import check as run_check
from cuforge.patching.engine import revert as run_revert
from cuforge.patching.manifest import load_patch_set
from cuforge.patching.model import PatchSet, PatchStatus
from cuforge.patching.report import render, summary


def run_patch_command(
    set_name: str,
    root: Path,
    *,
    check: bool,
    revert: bool,
    dry_run: bool,
    patches_dir: Path | None = None,
    console: Console | None = None,
) -> int:
    """Apply (default), check or revert patch set ``set_name`` on the tree at ``root``.

    Prints the table and a one-line summary and returns 0. Drift raises PatchError (after the
    table, for ``--check``), so the CLI boundary prints it with the patch-error exit code.
    """
    if check and revert:
        raise ConfigError("--check and --revert exclude each other")
    out = console or make_console()
    ps = load_patch_set(set_name, patches_dir)
    if check:
        return _check(ps, root, out)
    results = (run_revert if revert else run_apply)(ps, root, dry_run=dry_run)
    out.print(render(results, title=f"{ps.name}: {root}" + (" (dry run)" if dry_run else "")))
    out.print(summary(results, "reverted" if revert else "applied"))
    return 0


def _check(ps: PatchSet, root: Path, out: Console) -> int:
    """Print the per-patch state; raise PatchError if a patch's file is missing or drifted."""
    results = run_check(ps, root)
    out.print(render(results, title=f"{ps.name}: {root} (check)"))
    out.print(summary(results, "check"))
    missing = [r for r in results if r.status is PatchStatus.MISSING]
    drifted = [r for r in results if r.status is PatchStatus.DRIFTED]
    said = [f"{what} ({len(rs)} patch(es)): " + ", ".join(f"{r.file} [{r.patch_id}]" for r in rs)
            for rs, what in ((missing, "missing files"), (drifted, "drifted")) if rs]
    if said:
        fixes = []
        if missing:
            fixes.append(f"check that {root} is a {ps.name} checkout at the commit the patch "
                         "set was written for (those files are not in it)")
        if drifted:
            fixes.append(f"`cuforge patch {ps.name} {root}` (without --check) prints what "
                         "each drifted patch expects and writes nothing; update the patch set "
                         f"in {ps.directory} or check out the pinned commit")
        raise PatchError(f"patch set {ps.name!r} in {root}: " + "; ".join(said),
                         hint="; ".join(fixes))
    return 0
