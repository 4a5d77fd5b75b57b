"""Where a path inside an emulation root lies on the host, as the target sees it: what the
exec trace of an emulated run reads its programs through."""

from __future__ import annotations

import os
from pathlib import Path

from cuforge.env.rootrun import RootEntry


def host_path(e: RootEntry, inside: str) -> Path:
    """Where the file that ``inside`` names in the root lies on the host, symlinks followed as
    the target follows them (an absolute link in a bound directory points into the root).

    >>> e = RootEntry("/r", ("/work/p",), "/", ("true",), {})
    >>> host_path(e, "/work/p/x"), host_path(e, "/usr/bin/env")
    (PosixPath('/work/p/x'), PosixPath('/r/usr/bin/env'))
    """
    def on_host(path: str) -> Path:
        bound = any(path == b or path.startswith(b + "/") for b in e.binds)
        return Path(path) if bound else Path(e.root + path)

    full = inside if inside.startswith("/") else f"{e.cwd}/{inside}"
    todo, done = [p for p in full.split("/") if p], ""
    for _ in range(200):            # bounds symlink loops
        if not todo:
            break
        part = todo.pop(0)
        here = done if part == "." else (done.rsplit("/", 1)[0] if part == ".." else
                                          f"{done}/{part}")
        real = on_host(here)
        if real.is_symlink():
            link = os.readlink(real)
            todo = [p for p in link.split("/") if p] + todo
            if link.startswith("/"):
                done = ""
            continue
        done = here
    return on_host(done or "/")
