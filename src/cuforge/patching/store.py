"""The backup store and atomic file writes.

Before cuforge first changes a file it keeps the original bytes under
``<root>/.cuforge-patches/<set>/originals/<file>`` and records in ``state.json`` the sha256 of
the original and of what cuforge wrote. ``revert`` restores the original bytes exactly when the
file is still what cuforge wrote; when someone edited it since, revert undoes the edits
textually instead, so their changes survive.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from cuforge.core import faults
from cuforge.core.atomic import write_atomic

STORE_DIRNAME = ".cuforge-patches"


def sha256(data: bytes | None) -> str | None:
    """Hex sha256 of ``data``; ``None`` stands for "no file"."""
    return None if data is None else hashlib.sha256(data).hexdigest()


def read_bytes(path: Path) -> bytes | None:
    """The bytes of a file, or ``None`` when it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


@dataclass
class FileRecord:
    """What cuforge knows about one file it changed."""

    original_sha256: str | None  # None: cuforge created the file
    patched_sha256: str


class BackupStore:
    """``<root>/.cuforge-patches/<set>/``: originals plus ``state.json``."""

    def __init__(self, root: Path, set_name: str) -> None:
        self.root = root
        self.directory = root / STORE_DIRNAME / set_name

    @property
    def state_path(self) -> Path:
        return self.directory / "state.json"

    def original_path(self, file: str) -> Path:
        return self.directory / "originals" / file

    def load(self) -> dict[str, FileRecord]:
        """The recorded files (empty when nothing was patched)."""
        data = read_bytes(self.state_path)
        if data is None:
            return {}
        raw = json.loads(data)
        return {name: FileRecord(**record) for name, record in raw.get("files", {}).items()}

    def original(self, file: str) -> bytes | None:
        """The bytes cuforge kept before its first change (``None`` if it created the file)."""
        return read_bytes(self.original_path(file))

    def state_bytes(self, records: dict[str, FileRecord]) -> bytes | None:
        """Serialised state, or ``None`` (delete) when no file is recorded any more."""
        if not records:
            return None
        payload = {"files": {name: asdict(rec) for name, rec in sorted(records.items())}}
        return (json.dumps(payload, indent=2) + "\n").encode()

    def ignore_file(self) -> Path:
        """A ``.gitignore`` that keeps the store out of the user's ``git status``."""
        return self.root / STORE_DIRNAME / ".gitignore"

    def prune(self) -> None:
        """Remove empty store directories after a revert (best effort)."""
        if not self.directory.is_dir():
            return
        for directory in sorted(self.directory.rglob("*"), key=lambda p: -len(p.parts)):
            if directory.is_dir() and not any(directory.iterdir()):
                directory.rmdir()
        for directory in (self.directory, self.directory.parent):
            if directory.is_dir():
                leftovers = [p for p in directory.iterdir() if p.name != ".gitignore"]
                if not leftovers:
                    for p in directory.iterdir():
                        p.unlink()
                    directory.rmdir()


def _put(path: Path, data: bytes | None) -> None:
    """Write ``data`` to ``path``, or delete ``path`` when ``data`` is ``None``."""
    if data is None:
        path.unlink(missing_ok=True)
    else:
        write_atomic(path, data)   # an existing file keeps its mode


def commit(changes: dict[Path, bytes | None]) -> None:
    """Write all ``changes`` (``None`` deletes), or none of them.

    Each file is replaced atomically; if a later write fails, the files already written are put
    back as they were before this call.
    """
    done: list[tuple[Path, bytes | None]] = []
    try:
        for path, data in changes.items():
            before = read_bytes(path)
            _put(path, data)
            done.append((path, before))
            if len(done) == len(changes) // 2:
                faults.point("patch")   # tests: die with the set half-written
    except BaseException:
        for path, before in reversed(done):
            _put(path, before)
        raise
