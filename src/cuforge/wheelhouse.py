"""The wheelhouse: wheels plus a manifest, written atomically under a lock.

A wheel is copied to a hidden temporary name in the target directory and renamed into place;
a manifest line is one ``write`` of a complete JSON line followed by ``fsync``; the readable
table ``manifest.txt`` is regenerated to a temporary file and renamed. A killed or concurrent
build therefore never leaves a half-written wheel or manifest line.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from filelock import FileLock

from .digest import sha256_of  # noqa: F401  (re-exported: the manifest's wheel hash)

MANIFEST = "manifest.jsonl"
TABLE = "manifest.txt"
STATUSES = ("compiled", "prebuilt", "skipped", "FAILED")


@dataclass(frozen=True)
class Entry:
    """One manifest line."""

    package: str
    status: str                        # compiled | prebuilt | skipped | FAILED
    version: str = ""
    wheel: str = ""
    wheel_sha256: str = ""
    source: str = ""
    arches_requested: str = ""
    arches_embedded: dict[str, list[str]] = field(default_factory=dict)   # {"sass": [...], "ptx": [...]}
    arch_policy: str = ""
    checks: dict[str, str] = field(default_factory=dict)
    torch: str = ""
    python: str = ""
    cuda: str = ""
    build_seconds: float = 0.0
    log: str = ""
    reason: str = ""
    recipe_digest: str = ""            # recipe + patch files; a change makes the wheel stale
    plan_key: str = ""                 # the build plan's key (cuforge.plan): equal = up to date
    time: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))

    def line(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


class Wheelhouse:
    def __init__(self, directory: Path) -> None:
        self.dir = directory

    @property
    def lock(self) -> FileLock:
        self.dir.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.dir / ".lock"))

    def publish(self, wheel: Path | None, entry: Entry) -> Entry:
        """Move ``wheel`` (if any) into place and append ``entry``; both or neither become visible
        (the wheel is renamed in before its line is written; a crash in between leaves a wheel
        without a line, which the next publish of that package replaces)."""
        with self.lock:
            if wheel is not None:
                final = self.dir / wheel.name
                fd, tmp = tempfile.mkstemp(prefix=".incoming-", dir=self.dir)
                os.close(fd)
                try:
                    shutil.copyfile(wheel, tmp)
                    os.replace(tmp, final)
                except BaseException:
                    Path(tmp).unlink(missing_ok=True)
                    raise
            self._append(entry)
            self._write_table()
        return entry

    def entries(self) -> list[Entry]:
        path = self.dir / MANIFEST
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            if line.strip():
                data = json.loads(line)
                known = {k: v for k, v in data.items() if k in Entry.__dataclass_fields__}
                out.append(Entry(**known))   # lines from older cuforge versions stay readable
        return out

    def latest(self) -> dict[str, Entry]:
        """The newest entry per package."""
        latest: dict[str, Entry] = {}
        for e in self.entries():
            latest[e.package] = e
        return latest

    def _append(self, entry: Entry) -> None:
        data = (entry.line() + "\n").encode()
        fd = os.open(self.dir / MANIFEST, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)   # one write of one whole line: O_APPEND keeps it contiguous
            os.fsync(fd)
        finally:
            os.close(fd)

    def _write_table(self) -> None:
        rows = [f"{'status':9} {'package':32} {'version':12} {'arches (sass | ptx)':28} wheel"]
        for e in self.latest().values():
            arches = " ".join(e.arches_embedded.get("sass", [])) + " | " + " ".join(
                e.arches_embedded.get("ptx", []))
            what = e.wheel or e.reason
            rows.append(f"{e.status:9} {e.package:32} {e.version:12} {arches:28} {what}")
        fd, tmp = tempfile.mkstemp(prefix=".table-", dir=self.dir)
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(rows) + "\n")
        os.replace(tmp, self.dir / TABLE)
