"""The wheelhouse: wheels plus a manifest, written atomically under a lock.

Publishing is a small journal: the wheel is copied in full to ``.incoming-<wheel>.part``, then
its manifest line is appended (one ``write`` of a whole line, then ``fsync``), then the copy is
renamed into place. A process killed anywhere in between leaves either an ``.incoming-`` copy
without a line (deleted by the next ``recover``) or a line whose complete copy still waits
(renamed in by the next ``recover``, which checks the copy's sha256 against the line first):
never a visible wheel without its verified line, nor a torn line. The readable table ``manifest.txt`` is regenerated to a temporary file and renamed.
A directory with a package index (``simple/``, cuforge.publish.index) has it brought up to date in the
same step, under the same lock, and again by ``recover`` after a kill.
A full disk (or a file-size limit) while publishing undoes the partial work and raises
:class:`~cuforge.core.errors.WheelhouseError`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from enum import StrEnum
from pathlib import Path

from filelock import FileLock

from cuforge.core import faults
from cuforge.publish import index
from cuforge.core.digest import sha256_of
from cuforge.core.errors import VerifyError, WheelhouseError
from cuforge.publish.writable import elsewhere, where
from cuforge.verify.report import CheckResult

MANIFEST = "manifest.jsonl"
TABLE = "manifest.txt"
TABLE_WIDTHS = (9, 32, 12, 28)   # status, package, version, arches; the wheel last
INCOMING = ".incoming-"


class Status(StrEnum):
    """How a package ended, as its manifest line says (the published builder's words)."""

    COMPILED = "compiled"
    PREBUILT = "prebuilt"
    SKIPPED = "skipped"
    FAILED = "FAILED"

    @property
    def has_wheel(self) -> bool:
        return self in (Status.COMPILED, Status.PREBUILT)



@dataclass(frozen=True)
class Entry:
    """One manifest line."""

    package: str
    status: Status
    version: str = ""
    wheel: str = ""
    wheel_sha256: str = ""
    source: str = ""
    arches_requested: str = ""
    arches_embedded: dict[str, list[str]] = field(default_factory=dict)   # {"sass": [...], "ptx": [...]}
    arch_policy: str = ""
    kernels: str = ""                  # a [kernels] recipe's set: "full" or "lean: without ..."
    checks: dict[str, CheckResult] = field(default_factory=dict)   # {"status", "detail"} each
    torch: str = ""
    python: str = ""
    cuda: str = ""
    build_seconds: float = 0.0
    log: str = ""
    reason: str = ""
    recipe_digest: str = ""            # recipe + patch files; a change makes the wheel stale
    runtime_installed: list[str] = field(default_factory=list)   # Requires-Dist verify installed
    plan_key: str = ""                 # the build plan's key (cuforge.pipeline.plan): equal = up to date
    compiler_cache: dict = field(default_factory=dict)   # storage, hits, misses, hit_rate
    upstream_wheel: str = ""           # the wheel as built, before its pins were written in
    requires: list[str] = field(default_factory=list)    # its Requires-Dist as published
    cccl: str = ""                     # the CCCL (CUB/Thrust) version its compiles saw
    floor: dict = field(default_factory=dict)   # the C library it needs (verify.floor): text, tag, why, ...
    patches: list[str] = field(default_factory=list)   # the patch sets its source got (field fixes too)
    time: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))

    def __post_init__(self) -> None:   # a line read back: a Status, and CheckResults (older
        # lines' "status: detail" strings too); an unknown word raises ValueError
        object.__setattr__(self, "status", Status(self.status))
        object.__setattr__(self, "checks", {name: CheckResult.recorded(name, value)
                                            for name, value in self.checks.items()})

    def line(self) -> str:
        data = asdict(self)
        data["checks"] = {name: r.recording() for name, r in self.checks.items()}
        return json.dumps(data, sort_keys=True)


class Wheelhouse:
    def __init__(self, directory: Path, named_by: str = "") -> None:
        self.dir = directory
        self.named_by = named_by   # --wheelhouse, CUFORGE_WHEELHOUSE, "": what an error names

    @classmethod
    def open(cls, directory: Path, named_by: str = "") -> Wheelhouse:
        """The wheelhouse a build reads and publishes into, once what a killed publish left
        half-done is finished or undone (``recover``): its entries are then the whole truth."""
        house = cls(directory, named_by)
        house.recover()
        return house

    @property
    def lock(self) -> FileLock:
        self.dir.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.dir / ".lock"))

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The lock, held; a directory that cannot hold it (read-only, not ours) is a
        WheelhouseError, not a traceback (the commands ask ``writable`` first)."""
        try:
            lock = self.lock
            lock.acquire()
        except OSError as err:
            raise WheelhouseError(f"cannot write to {where(self.dir, self.named_by)}: "
                                  f"{err.strerror or err}; nothing was written",
                                  hint=elsewhere(self.named_by)) from None
        try:
            yield
        finally:
            lock.release()

    def publish(self, wheel: Path | None, entry: Entry) -> Entry:
        """Put ``wheel`` (if any) and its ``entry`` into the wheelhouse: both or neither, even
        if the process dies in between (see the module docstring). The line records the wheel
        as it is published: its file name, version and sha256 are read from the file here."""
        if wheel is not None:
            entry = replace(entry, wheel=wheel.name, version=_version(wheel),
                            wheel_sha256=sha256_of(wheel))
        with self.lock:
            self._recover()
            incoming = None
            if wheel is not None:
                incoming = self.dir / f"{INCOMING}{wheel.name}.part"   # not *.whl: unseen
                self._guard(incoming, lambda: shutil.copyfile(wheel, incoming))
            self._guard(incoming, lambda: self._append(entry))
            faults.point("publish")
            if incoming is not None:
                os.replace(incoming, self.dir / wheel.name)
            self._write_table()
            self._refresh_index()
        return entry

    def recover(self) -> None:
        """Finish or undo what a killed publish left behind (cheap when nothing is there)."""
        with self._locked():
            self._recover()

    def _recover(self) -> None:
        for stale in [*self.dir.glob(".table-*"), *self.dir.glob(".manifest-*")]:
            stale.unlink(missing_ok=True)
        manifest, table = self.dir / MANIFEST, self.dir / TABLE
        if not manifest.exists():
            return
        with open(manifest, "rb") as f:
            torn = f.seek(0, os.SEEK_END) > 0 and f.seek(-1, os.SEEK_END) >= 0 \
                and f.read(1) != b"\n"
        if torn:    # a torn last line (power loss): drop it
            data = manifest.read_bytes()
            self._rewrite_manifest(data[:data.rfind(b"\n") + 1])
        incoming = sorted(self.dir.glob(f"{INCOMING}*"))
        latest = {e.wheel: e for e in self.entries() if e.wheel} if incoming else {}
        for path in incoming:
            name = path.name.removeprefix(INCOMING).removesuffix(".part")
            entry = latest.get(name)
            if entry is not None and entry.wheel_sha256 == sha256_of(path):
                os.replace(path, self.dir / name)    # its line is written: roll forward
            else:
                path.unlink()                          # no line: it never happened
        if incoming or not table.exists() or table.stat().st_mtime < manifest.stat().st_mtime:
            self._write_table()
        self._refresh_index()   # a publish killed after its rename left the index behind

    def write_index(self) -> index.IndexTree:
        """Write (or rewrite) this directory's index under the lock: ``cuforge index``."""
        with self._locked():
            return index.rewrite(self.dir)

    def _refresh_index(self) -> None:
        """The directory's package index, if it has one, listing the wheels there now."""
        try:
            index.refresh(self.dir)
        except OSError as err:   # the index is derived: the wheel and its line stand
            raise WheelhouseError(
                f"the wheelhouse {self.dir} is up to date, but its index (simple/) could not "
                f"be rewritten: {err.strerror or err}",
                hint=f"free disk space there and run `cuforge index {self.dir}`") from None

    def _guard(self, incoming: Path | None, write) -> None:
        """Run ``write``; on a full disk remove the incoming copy and raise a clean error."""
        try:
            write()
        except OSError as err:
            if incoming is not None:
                incoming.unlink(missing_ok=True)
            raise WheelhouseError(
                f"cannot write to {where(self.dir, self.named_by)}: {err.strerror or err}; "
                "nothing was published",
                hint=f"free disk space there (or {elsewhere(self.named_by)}) and run the "
                "same command again") from None

    def verified(self, entry: Entry) -> Path:
        """The path of ``entry``'s wheel, after checking it still has the sha256 its manifest
        line recorded (installing a wheel altered after verification must fail closed)."""
        path = self.dir / entry.wheel
        digest = sha256_of(path) if path.is_file() else "missing"
        if digest != entry.wheel_sha256:
            raise VerifyError(f"{path}: sha256 {digest}, but its manifest line recorded "
                              f"{entry.wheel_sha256}: it changed after it was verified",
                              hint=f"rebuild it: cuforge build --only {entry.package} --rebuild")
        return path

    def entries(self) -> list[Entry]:
        path = self.dir / MANIFEST
        if not path.exists():
            return []
        out = []
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                data = json.loads(line)
                known = {k: v for k, v in data.items() if k in Entry.__dataclass_fields__}
                try:   # lines from older cuforge versions stay readable
                    out.append(Entry(**known))
                except ValueError as err:   # a word no check says: never read as a pass
                    raise WheelhouseError(
                        f"{path}, line {number}: {err}",
                        hint="cuforge did not write that line: delete it, then rebuild "
                        f"the package (cuforge build --only {data.get('package', 'PKG')} "
                        "--rebuild)") from None
        return out

    def latest(self) -> dict[str, Entry]:
        """The newest entry per package."""
        latest: dict[str, Entry] = {}
        for e in self.entries():
            latest[e.package] = e
        return latest

    def last_build(self, package: str) -> Entry | None:
        """The newest entry of ``package`` compiled into this wheelhouse: its ``build_seconds``
        is how long the last build of it took here (the dry run and the progress say it)."""
        return next((e for e in reversed(self.entries()) if e.package == package
                     and e.status is Status.COMPILED and e.build_seconds > 0), None)

    def intact(self, entry: Entry) -> bool:
        """The entry's wheel is here with the bytes its line records."""
        wheel = self.dir / entry.wheel
        return wheel.is_file() and sha256_of(wheel) == entry.wheel_sha256

    def _append(self, entry: Entry) -> None:
        data = (entry.line() + "\n").encode()
        fd = os.open(self.dir / MANIFEST, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        size = os.fstat(fd).st_size
        try:
            # one write of one whole line: O_APPEND keeps it contiguous
            if os.write(fd, data) != len(data):
                raise OSError(27, "File too large")   # a partial line: the limit was hit
            os.fsync(fd)
        except OSError:
            os.ftruncate(fd, size)    # never leave a torn line behind
            raise
        finally:
            os.close(fd)

    def _write_table(self) -> None:
        # imported here: cuforge.verify loads every check (pyelftools too) for one name
        from cuforge.verify.upstream import CHECK as UPSTREAM_CHECK
        cells = [("status", "package", "version", "arches (sass | ptx)", "wheel")]
        notes: dict[int, list[str]] = {}
        for e in self.latest().values():
            arches = " ".join(e.arches_embedded.get("sass", [])) + " | " + " ".join(
                e.arches_embedded.get("ptx", []))
            cells.append((e.status, e.package, e.version, arches, e.wheel or e.reason))
            said = []   # under its wheel: what it runs on, and its upstream suite's summary
            if e.floor and e.status.has_wheel:
                why = f": {e.floor['why']}" if e.floor.get("why") else ""
                said.append(f"runs on: {e.floor.get('text', '')} ({e.floor.get('tag', '')}{why})")
            if (suite := e.checks.get(UPSTREAM_CHECK)):
                said.append(f"upstream tests: {suite.status}: {suite.reason}")
            if said:
                notes[len(cells) - 1] = said
        # each column at least its usual width, wider for a longer cell: a long version
        # (2.3.8+cu130torch2.14.1) must not push the columns after it out of line
        widths = [max(least, *(len(row[i]) for row in cells))
                  for i, least in enumerate(TABLE_WIDTHS)]
        rows = []
        for i, row in enumerate(cells):
            rows.append(" ".join(c.ljust(w) for c, w in zip(row, widths)) + " " + row[4])
            rows += [" " * (widths[0] + widths[1] + 2) + note for note in notes.get(i, ())]
        fd, tmp = tempfile.mkstemp(prefix=".table-", dir=self.dir)
        try:
            with os.fdopen(fd, "w") as f:
                f.write("\n".join(rows) + "\n")
            _readable(tmp)
            faults.point("manifest")
            os.replace(tmp, self.dir / TABLE)
        except OSError:
            Path(tmp).unlink(missing_ok=True)   # the table is derived: the next publish redoes it

    def _rewrite_manifest(self, data: bytes) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".manifest-", dir=self.dir)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        _readable(tmp)
        faults.point("manifest")
        os.replace(tmp, self.dir / MANIFEST)


def _version(wheel: Path) -> str:
    """A wheel file's version, from its name (``demo-0.1-cp311-...whl`` -> ``0.1``)."""
    parts = wheel.name.split("-")
    return parts[1] if len(parts) > 1 else ""


def _readable(path: str | Path) -> None:
    """0644 (less the umask), as the wheels and manifest.jsonl are: ``mkstemp`` makes 0600, and
    a served wheelhouse (``cuforge index``, a web server) must be readable by others."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o644 & ~umask)


def write_indexes(paths: list[Path], named_by: str = "") -> list[index.IndexTree]:
    """``cuforge index``: every wheel under ``paths`` checked first, and every directory
    asked whether it can be written (``named_by`` chose them), then one index per wheel
    directory, each written under its wheelhouse lock."""
    from cuforge.publish.writable import check_writable
    dirs = index.checked_dirs(paths)
    for d in dirs:
        check_writable(d, named_by)
    return [Wheelhouse(d, named_by).write_index() for d in dirs]
