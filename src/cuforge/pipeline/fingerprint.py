"""Content fingerprints: what a build step's key is made of.

A key is a sha256 over named inputs (recipe and patch bytes, the source tree's content, the
arches, the exact command line and environment), in the spirit of Bazel's action keys: equal
keys mean the same output, so "up to date" and "resume" compare keys, never timestamps.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
from pathlib import Path

from cuforge.core.digest import sha256_of

# Build outputs and VCS data: not part of a source tree's identity (nor copied by a fetch).
IGNORED = (".git", "build", "dist", "*.egg-info", "__pycache__")


def _ignored(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in IGNORED)


def tree_files(root: Path) -> dict[str, tuple[int, str]]:
    """``{relative path: (size, sha256)}`` of every file under ``root`` that a fetch copies;
    symlinks count by their target text.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = Path(d, "setup.py").write_text("x")
    ...     Path(d, "__pycache__").mkdir()
    ...     _ = Path(d, "__pycache__", "setup.pyc").write_text("compiled")
    ...     tree_files(Path(d))
    {'setup.py': (1, '2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881')}
    """
    out: dict[str, tuple[int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not _ignored(d))
        for name in sorted(filenames):
            if _ignored(name):
                continue
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                target = os.readlink(path)
                out[rel] = (len(target), hashlib.sha256(target.encode()).hexdigest())
            else:
                out[rel] = (path.stat().st_size, sha256_of(path))
    return out


def tree_digest(root: Path) -> str:
    """One sha256 over a tree's file paths, sizes and contents (mtimes play no part)."""
    h = hashlib.sha256()
    for rel, (size, digest) in tree_files(root).items():
        h.update(f"{rel}\0{size}\0{digest}\n".encode())
    return h.hexdigest()


def files_digest(files: list[Path], root: Path) -> str:
    """sha256 over files' names (relative to ``root`` when inside it) and bytes."""
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(root) if f.is_relative_to(root) else f).encode() + b"\0")
        h.update(f.read_bytes())
    return h.hexdigest()


def key_of(inputs: dict[str, str]) -> str:
    """The key of a set of named inputs (order-independent)."""
    h = hashlib.sha256()
    for name in sorted(inputs):
        h.update(f"{name}\0{inputs[name]}\n".encode())
    return h.hexdigest()
