"""File digests (sdist checksums, wheel hashes in the manifest, wheel RECORD entries)."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def record_digest(data: bytes) -> str:
    """The sha256 of ``data`` as a wheel's RECORD writes it: urlsafe base64, no padding."""
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
