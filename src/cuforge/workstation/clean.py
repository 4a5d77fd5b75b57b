"""``cuforge clean``: what cuforge keeps under its state dir (``.cuforge/``: combo envs of
~5.6 GB each, build dirs, logs, compiler caches), listed with sizes, and removed when asked:
one combo's dirs, stale envs (no combo names them any more), or all of it. A wheelhouse is
removed only when named (``--wheelhouse DIR``): it holds the published, verified wheels."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from cuforge.config.combos import Combo, load_combos, select_combo
from cuforge.core.console import plural
from cuforge.core.errors import ConfigError
from cuforge.core.project import Project
from cuforge.publish.wheelhouse import MANIFEST

# state dirs that hold one <combo>-torch<V> dir per combo (Combo.env_id)
PER_COMBO = ("envs", "work", "logs", "sccache", "upstream-tests")


@dataclass(frozen=True)
class Item:
    """One thing clean can remove: a path, what it is, its size on disk."""

    path: Path
    kind: str
    size: int


def disk_usage(path: Path) -> int:
    """Bytes ``path`` takes on disk: every inode once (uv hard-links envs from its cache),
    symlinks not followed."""
    if path.is_symlink() or not path.exists():
        return 0
    seen: set[tuple[int, int]] = set()
    total = 0
    for top, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            st = os.lstat(os.path.join(top, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total + os.lstat(path).st_blocks * 512


def human(size: int) -> str:
    """``"5.6 GB"``, ``"13.0 MB"``, ``"4 kB"``.

    >>> human(5_600_000_000), human(13_000_000), human(4096)
    ('5.6 GB', '13.0 MB', '4 kB')
    """
    for unit, scale in (("GB", 1e9), ("MB", 1e6)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{round(size / 1e3)} kB"


def _known_ids(combos: list[Combo]) -> set[str]:
    from dataclasses import replace
    return {replace(c, torch=v).env_id for c in combos for v in c.torch_versions}


def inventory(project: Project) -> list[Item]:
    """Everything under the state dir, per combo dir where a dir holds them."""
    state = project.state_dir
    items: list[Item] = []
    if not state.is_dir():
        return items
    for top in sorted(state.iterdir()):
        if top.name in PER_COMBO and top.is_dir() and not top.is_symlink():
            for d in sorted(top.iterdir()):
                if d.is_dir():
                    items.append(Item(d, top.name, disk_usage(d)))
        elif top.is_dir():
            items.append(Item(top, top.name, disk_usage(top)))
    return items


def select(project: Project, items: list[Item], *, combo: str = "", stale: bool = False,
           everything: bool = False) -> list[Item]:
    """The items a request names: one combo's dirs, those of combos no longer declared, or all."""
    if everything:
        return items
    chosen: list[Item] = []
    if combo:
        c = select_combo(project, name=combo)
        prefix = f"{c.id}-torch"
        chosen += [i for i in items if i.kind in PER_COMBO and i.path.name.startswith(prefix)]
    if stale:
        known = _known_ids(load_combos(project))
        chosen += [i for i in items if i.kind in PER_COMBO and i.path.name not in known
                   and i not in chosen]
    return chosen


def wheelhouse_item(path: Path) -> Item:
    """A wheelhouse named on the command line: it must be one (a manifest under it)."""
    path = path.expanduser().absolute()
    if not path.is_dir() or not any(path.rglob(MANIFEST)):
        raise ConfigError(f"{path} is not a cuforge wheelhouse (no {MANIFEST} under it)",
                          hint="name the wheelhouse root cuforge build wrote, e.g. "
                               "--wheelhouse wheelhouse")
    return Item(path, "wheelhouse", disk_usage(path))


def remove(item: Item) -> None:
    """Delete ``item``; one another cuforge holds (its ``.lock`` beside it: a combo env) is
    refused."""
    if item.path.is_symlink():
        item.path.unlink()
        return
    lock = Path(str(item.path) + ".lock")
    if lock.exists():
        try:
            with FileLock(str(lock), timeout=0):
                shutil.rmtree(item.path)
            lock.unlink(missing_ok=True)
        except Timeout:
            raise ConfigError(f"{item.path} is in use (another cuforge holds {lock})",
                              hint="wait for that build to end, then clean again") from None
        return
    shutil.rmtree(item.path)


def summary(items: list[Item]) -> str:
    return f"{plural(len(items), 'dir')}, {human(sum(i.size for i in items))}"
