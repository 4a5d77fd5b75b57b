"""The compiler cache's configuration, decided once per build (``decide``) by whoever makes the
build's request (the command line, setup's decision) and carried on it (``BuildRequest.cache``):
``envs/cache.toml``'s ``[cache]`` table, then the combo's ``cache`` key, ``$CUFORGE_CACHE`` and
``--cache``; for ``dist``, ``[cache.dist]``, ``$CUFORGE_DIST_SCHEDULER``, ``--scheduler`` and the
scheduler's answer. What a package's build then does with it is ``compiler_cache.py``'s."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from cuforge.core.errors import ConfigError
from cuforge.core.tomlfile import read_toml
from cuforge.pipeline import dist_cache
from cuforge.pipeline.dist_cache import DistSettings, SchedulerProbe

CONFIG_FILE = "cache.toml"          # under envs/: the project's [cache] table
REMOTE_SCHEMES = ("redis", "rediss")
LOCAL_SPECS = ("off", "local", "dist")


@dataclass(frozen=True)
class CacheConfig:
    """Where compile results go. ``spec``: ``off``, ``local`` (under the state dir), ``dist``
    (local storage, misses compiled on sccache-dist build servers), a directory, or a
    ``redis://`` URL (shared; local storage is the fallback)."""

    spec: str = "local"
    scope: str = "combo"           # local storage: "combo" (one tree per combo env) or "shared"
    size: str = "10G"              # per package store (sccache evicts the oldest beyond it)
    # Where packages are fetched and compiled ("" = under each clone's state dir). nvcc hands
    # its cudafe++/cicc steps the source's absolute path, which sccache 0.16 keys on as is:
    # one directory for every clone on a machine (or lab) makes those steps hit too.
    build_dir: str = ""
    dist: DistSettings = DistSettings()   # [cache.dist]: read when spec is "dist"
    # dist: what the scheduler answered when the build was decided (``decide``); None: not asked
    dist_answer: SchedulerProbe | None = None

    @property
    def kind(self) -> str:
        if self.spec in LOCAL_SPECS:
            return self.spec
        return "remote" if urlsplit(self.spec).scheme in REMOTE_SCHEMES else "dir"


def parse_spec(spec: str, where: str) -> str:
    """Validate a cache spec: ``off``, ``local``, ``dist``, an absolute directory or
    ``redis://host:port``.

    >>> parse_spec("redis://127.0.0.1:6379", "--cache")
    'redis://127.0.0.1:6379'
    """
    spec = spec.strip()
    if spec in LOCAL_SPECS:
        return spec
    scheme = urlsplit(spec).scheme
    if scheme in REMOTE_SCHEMES:
        if not urlsplit(spec).hostname:
            raise ConfigError(f"{where}: {spec!r} names no host", hint="e.g. redis://host:6379")
        return spec
    if scheme == "file":
        spec = urlsplit(spec).path
    elif scheme:
        raise ConfigError(f"{where}: cache storage {spec!r} is not supported",
                          hint="use off, local, dist, a directory, or redis://host:port")
    if not Path(spec).is_absolute():
        raise ConfigError(f"{where}: cache directory {spec!r} is not an absolute path",
                          hint="give the full path of a directory shared by the builds")
    return spec


def load_config(envs_dir: Path, *, combo_spec: str = "", override: str = "",
                scheduler: str = "") -> CacheConfig:
    """The project's ``envs/cache.toml`` ``[cache]`` table, then the combo's ``cache`` key, then
    ``$CUFORGE_CACHE``, then ``--cache`` (each later one wins); ``[cache.dist]``, then
    ``$CUFORGE_DIST_SCHEDULER``, then ``--scheduler`` (``scheduler``) for ``dist``."""
    config = CacheConfig()
    path = envs_dir / CONFIG_FILE
    if path.is_file():
        table = read_toml(path, "compiler cache table").get("cache", {})
        unknown = set(table) - {"storage", "scope", "size", "build_dir", "dist"}
        if unknown:
            raise ConfigError(f"{path}: unknown key(s) {', '.join(sorted(unknown))} in [cache]",
                              hint="known keys: storage, scope, size, build_dir, [cache.dist]")
        if table.get("scope", "combo") not in ("combo", "shared"):
            raise ConfigError(f"{path}: [cache] scope must be 'combo' or 'shared'")
        config = CacheConfig(parse_spec(table.get("storage", "local"), str(path)),
                             table.get("scope", "combo"), str(table.get("size", config.size)),
                             parse_build_dir(str(table.get("build_dir", "")), str(path)),
                             dist_cache.parse_table(table.get("dist", {}), str(path)))
    for spec, where in ((combo_spec, "envs/combos.toml cache"),
                        (os.environ.get("CUFORGE_CACHE", ""), "$CUFORGE_CACHE"),
                        (override, "--cache")):
        if spec:
            config = replace(config, spec=parse_spec(spec, where))
    if os.environ.get("CUFORGE_BUILD_DIR"):
        config = replace(config, build_dir=parse_build_dir(os.environ["CUFORGE_BUILD_DIR"],
                                                           "$CUFORGE_BUILD_DIR"))
    if scheduler and config.kind != "dist":
        raise ConfigError(f"--scheduler {scheduler}: the compiler cache is {config.spec!r}, "
                          "not dist", hint="add --cache dist to compile through the scheduler")
    config = replace(config, dist=dist_cache.with_overrides(config.dist, scheduler))
    if config.kind == "dist":
        dist_cache.require(config.dist)
    return config


def decide(envs_dir: Path, *, combo_spec: str = "", override: str = "", scheduler: str = "",
           say=print) -> CacheConfig:
    """A build's compiler cache, decided once by whoever makes its request (the CLI, setup's
    decision) and carried on it: the configuration (``load_config``), and for ``dist`` the
    scheduler asked now, so that a refused token stops the build (and its dry run) before
    anything is built; a scheduler that is down: one warning, and local compiles."""
    config = load_config(envs_dir, combo_spec=combo_spec, override=override, scheduler=scheduler)
    if config.kind != "dist":
        return config
    return replace(config, dist_answer=dist_cache.check(config.dist, say))


def parse_build_dir(value: str, where: str) -> str:
    """``""`` (each clone's state dir) or an absolute directory every clone builds in."""
    value = value.strip()
    if value and not Path(value).expanduser().is_absolute():
        raise ConfigError(f"{where}: build_dir {value!r} is not an absolute path",
                          hint="give one absolute directory for every clone, e.g. "
                          "/var/tmp/cuforge-build")
    return str(Path(value).expanduser()) if value else ""
