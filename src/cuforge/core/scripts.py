"""The small shell scripts cuforge writes for builds (compiler launchers, the compile-slot
script): written only when their text changes, and atomically, because packages building side
by side may write the same script at once."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_script(script: Path, text: str) -> Path:
    """``script`` with ``text``, executable; untouched when it already holds that text."""
    if not script.is_file() or script.read_text() != text:
        script.parent.mkdir(parents=True, exist_ok=True)
        # a temp name unique per writer: threads of one process building side by side share
        # a pid, so a pid-named temp file was renamed away under the other thread
        fd, name = tempfile.mkstemp(dir=script.parent, prefix=f".{script.name}.")
        tmp = Path(name)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            tmp.chmod(0o755)
            tmp.replace(script)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    return script
