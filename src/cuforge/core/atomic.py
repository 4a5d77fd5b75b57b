"""Files that another writer may write at the same moment: the build's shell scripts (compiler
launchers, the compile-slot script), probe caches, and the patch store's files. Each is written
to a temp name of its own and renamed into place, so a reader sees the old bytes or the new."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

EXECUTABLE = 0o755


def write_atomic(path: Path, data: str | bytes, mode: int | None = None) -> Path:
    """Replace ``path`` with ``data`` in one rename, on disk before it is renamed; untouched
    when it already holds exactly that (a launcher rewritten under a running compiler).
    ``mode``: the file's permissions; None keeps an existing file's (0o644 for a new one)."""
    raw = data.encode() if isinstance(data, str) else data
    old_mode = path.stat().st_mode & 0o7777 if path.is_file() else None
    mode = mode if mode is not None else old_mode if old_mode is not None else 0o644
    if old_mode == mode and path.read_bytes() == raw:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    # a temp name unique per writer: threads of one process share a pid, so a pid-named temp
    # file could be renamed away under another thread (CI saw it with two packages' launchers)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".cuforge-tmp")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        tmp.chmod(mode)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
