"""``cuforge clean``: what cuforge keeps under its state dir (``.cuforge/``: combo envs of
~5.6 GB each, build dirs, logs, compiler caches), listed with sizes, and removed when asked:
one combo's dirs, stale envs (no combo names them any more), or all of it. A wheelhouse is
removed only when named (``--wheelhouse DIR``): it holds the published, verified wheels."""

from __future__ import annotations

import math
import os
import shutil
import stat
from collections.abc import Iterable
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
    """One thing clean can remove: a path, what it is, its size on disk (every inode once),
    and what removing it frees: the inodes with no link outside it (uv hard-links a combo
    env's files from its cache: 6 GB on disk, a few MB freed)."""

    path: Path
    kind: str
    size: int
    frees: int = 0


def _inodes(paths: Iterable[Path]) -> dict[tuple[int, int], tuple[int, bool]]:
    """``(dev, inode) -> (bytes on disk, whether every link to it is under paths)``, each inode
    once, symlinks not followed. A directory counts as all inside (its link count holds its
    subdirectories' ``..``)."""
    sizes: dict[tuple[int, int], int] = {}
    links: dict[tuple[int, int], int] = {}   # links seen; a directory: its own count
    counts: dict[tuple[int, int], int] = {}  # the inode's link count

    def see(p: str) -> None:
        st = os.lstat(p)
        key = (st.st_dev, st.st_ino)
        sizes[key] = st.st_blocks * 512
        links[key] = links.get(key, 0) + 1
        counts[key] = links[key] if stat.S_ISDIR(st.st_mode) else st.st_nlink

    for path in paths:
        if path.is_symlink() or not path.exists():
            continue
        see(str(path))
        for top, dirs, files in os.walk(path):
            for name in (*dirs, *files):
                see(os.path.join(top, name))
    return {k: (size, links[k] >= counts[k]) for k, size in sizes.items()}


def disk_usage(path: Path) -> int:
    """Bytes ``path`` takes on disk: every inode once, symlinks not followed (``du -s``)."""
    return sum(size for size, _ in _inodes([path]).values())


def freed(paths: Iterable[Path]) -> int:
    """Bytes that removing all of ``paths`` frees: inodes whose every link is among them (a
    file hard-linked from uv's cache stays there). Two envs linking the same file free it
    only together."""
    return sum(size for size, inside in _inodes(paths).values() if inside)


def human(size: int) -> str:
    """In the units ``du -h`` prints: powers of 1024, rounded up, one decimal below 10.

    >>> human(5_600_000_000), human(23_000_000), human(4096), human(300)
    ('5.3G', '22M', '4.0K', '300')
    """
    if size < 1024:
        return str(size)
    value, unit = float(size), ""
    for unit in "KMGTP":
        value /= 1024
        if value < 1024:
            break
    if value < 10 and math.ceil(value * 10) < 100:
        return f"{math.ceil(value * 10) / 10:.1f}{unit}"
    return f"{math.ceil(value)}{unit}"


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
                    items.append(_item(d, top.name))
        elif top.is_dir():
            items.append(_item(top, top.name))
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
    return _item(path, "wheelhouse")


def _item(path: Path, kind: str) -> Item:
    return Item(path, kind, disk_usage(path), freed([path]))


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
    """``"3 dirs, 6.1G on disk; removing them frees 25M (the rest is hard links into uv's
    cache)"``: the links shared among ``items`` counted once."""
    paths = [i.path for i in items]
    on_disk, frees = sum(s for s, _ in _inodes(paths).values()), freed(paths)
    them = "it" if len(items) == 1 else "them"
    return (f"{plural(len(items), 'dir')}, {human(on_disk)} on disk; removing {them} frees "
            f"{human(frees)}" + (" (the rest is hard links into uv's cache)"
                                 if on_disk - frees >= 1024 ** 2 else ""))
