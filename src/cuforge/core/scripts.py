"""Files cuforge writes that another writer may write at the same moment: the build's shell
scripts (compiler launchers, the compile-slot script) and probe caches. Each is written to a
temp name of its own and renamed into place, so a reader sees the old text or the new."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, text: str, mode: int = 0o644) -> Path:
    """Replace ``path`` with ``text`` (``mode``) in one rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # a temp name unique per writer: threads of one process share a pid, so a pid-named temp
    # file could be renamed away under another thread (CI saw it with two packages' launchers)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        tmp.chmod(mode)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_script(script: Path, text: str) -> Path:
    """``script`` with ``text``, executable; untouched when it already holds that text."""
    if not script.is_file() or script.read_text() != text:
        write_atomic(script, text, 0o755)
    return script
