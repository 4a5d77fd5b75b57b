"""The port of a package's sccache server: derived from (state dir, combo, package), so
concurrent builds of other packages or clones never meet on one server, and never one that
something else holds now."""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path

# Below Linux's ephemeral ports (32768-60999 by default): any outgoing connection (an index
# download, a redis client) may hold one of those, and sccache then fails with "Address
# already in use" (CI saw it: the package compiled twice, once without its cache).
PORTS = range(20000, 32000)


def server_port(state_dir: Path, env_id: str, package: str) -> int:
    """A port per (state dir, combo, package), so concurrent builds of other packages or clones
    do not meet on one server; the same on every run of this build while it is free, else the
    next free one of its sequence (chosen when the plan is made: the dry run shows it)."""
    digest = hashlib.sha256(f"{state_dir.resolve()}|{env_id}|{package}".encode()).digest()
    first = int.from_bytes(digest[:4], "big")
    candidates = [PORTS[(first + i * 7919) % len(PORTS)] for i in range(16)]
    return next((port for port in candidates if _free(port)), candidates[0])


def _free(port: int) -> bool:
    """Whether a server could listen on loopback ``port`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
