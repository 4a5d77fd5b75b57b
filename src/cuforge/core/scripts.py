"""The small shell scripts cuforge writes for builds (compiler launchers, the compile-slot
script): written only when their text changes, and atomically, because packages building side
by side may write the same script at once."""

from __future__ import annotations

import os
from pathlib import Path


def write_script(script: Path, text: str) -> Path:
    """``script`` with ``text``, executable; untouched when it already holds that text."""
    if not script.is_file() or script.read_text() != text:
        script.parent.mkdir(parents=True, exist_ok=True)
        tmp = script.with_suffix(f".{os.getpid()}")
        tmp.write_text(text)
        tmp.chmod(0o755)
        tmp.replace(script)
    return script
