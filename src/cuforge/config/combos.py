"""Build combos (python x torch x accel x arches), read from ``envs/*.toml`` into frozen objects."""

from __future__ import annotations

import difflib
import re

from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path

from packaging.version import InvalidVersion, Version

from cuforge.config import platforms
from cuforge.config.arches import ArchList, check_supported, parse_arch_list
from cuforge.core.errors import ConfigError
from cuforge.core.project import Project
from cuforge.core.tomlfile import read_toml


class ToolkitSource(StrEnum):
    """Where a combo's nvcc comes from: PyPI's nvidia-cuda-* wheels in its env, or the CUDA
    installed on this machine."""

    PYPI = "pypi"
    SYSTEM = "system"

    @classmethod
    def parse(cls, value: str, where: str) -> ToolkitSource:
        try:
            return cls(value)
        except ValueError:
            raise ConfigError(f"{where}: toolkit must be 'pypi' or 'system', not {value!r}"
                              ) from None


@dataclass(frozen=True)
class Accel:
    """An accelerator tag such as ``cu130``: its CUDA version and where its toolkit comes from."""

    tag: str
    cuda: Version
    default_arches: str
    torch_index: str
    toolkit_wheels: tuple[str, ...]
    toolkit: ToolkitSource = ToolkitSource.PYPI   # its combos' nvcc unless they say otherwise
    torch_libs: tuple[str, ...] = ()   # site-packages/nvidia/<dir>s of torch's CUDA wheels
    cccl_overlay: str = ""   # a newer nvidia-cuda-cccl whose headers come first (env/cccl.py)
    sanitizer: str = ""      # a PyPI compute-sanitizer for --sanitize (pipeline/stress_stage.py)


@dataclass(frozen=True)
class Combo:
    """One build target. Everything after the CLI edge takes this, never raw strings."""

    python: str
    accel: Accel
    torch: str
    torch_versions: tuple[str, ...]
    arches: ArchList
    toolkit: ToolkitSource = ToolkitSource.PYPI
    torch_index: str = ""
    find_links: str = ""
    interpreter: str = ""
    packages: tuple[str, ...] = ("cuforge-demo",)
    name: str = ""
    platform: str = ""             # e.g. linux-aarch64; "" = the machine cuforge runs on
    ci: bool = True                # part of the CI matrix (false: tied to one machine)
    ci_why: str = ""               # why not (``cuforge ci matrix`` says it on stderr)
    host_cxx: str = ""                      # pinned host C++ compiler (else CXX, else g++)
    host_cc: str = ""                       # its C sibling (default: derived from host_cxx)
    host_fallbacks: tuple[str, ...] = ()    # tried when the default links libstdc++ statically
    cache: str = ""                         # compiler cache storage (envs/cache.toml spec)
    emulate: bool = False          # build a foreign platform here under QEMU (envs/emulation.toml)
    glibc_floor: str = ""          # the newest glibc its wheels may need ("2.31"); "": torch's

    @property
    def target_platform(self) -> platforms.Platform:
        """The platform the wheels are for (and so the machine that must build them)."""
        return platforms.get(self.platform) if self.platform else platforms.build_platform()

    @property
    def id(self) -> str:
        """``3.12-cu130``: the nox session suffix and the CLI's way to name a combo."""
        return self.name or f"{self.python}-{self.accel.tag}"

    @property
    def env_id(self) -> str:
        """Directory name of the combo's venv: one per python x accel x torch."""
        return f"{self.id}-torch{self.torch}"

    @property
    def cp(self) -> str:
        return "cp" + self.python.replace(".", "")

    def wheel_dir(self, wheelhouse: Path) -> Path:
        """``wheelhouse/<platform>/<accel>/torch<ver>-cp<py>/``, e.g. ``linux-aarch64/cu130/...``."""
        return (wheelhouse / self.target_platform.name / self.accel.tag
                / f"torch{self.torch}-{self.cp}")


def load_accels(project: Project) -> dict[str, Accel]:
    data = _read_toml(project.envs_dir / "accels.toml")
    accels = {}
    for tag, row in data.items():
        accels[tag] = Accel(
            tag=tag,
            cuda=_version(row["cuda"], f"accels.toml [{tag}] cuda"),
            default_arches=row["default_arches"],
            torch_index=row.get("torch_index", ""),
            toolkit_wheels=tuple(row.get("toolkit_wheels", ())),
            toolkit=ToolkitSource.parse(row.get("toolkit", "pypi"), f"accels.toml [{tag}]"),
            torch_libs=tuple(row.get("torch_libs", ())),
            cccl_overlay=row.get("cccl_overlay", ""),
            sanitizer=row.get("sanitizer", ""),
        )
    return accels


def load_combos(project: Project) -> list[Combo]:
    """Every combo declared in ``envs/combos.toml``, validated (arches against the CUDA version)."""
    accels = load_accels(project)
    table = _read_toml(project.envs_dir / "combos.toml")
    fallbacks = tuple(table.get("host_cxx_fallbacks", ()))
    combos = [replace(_combo_from_row(row, accels), host_fallbacks=fallbacks)
              for row in table.get("combo", [])]
    seen: set[str] = set()
    for c in combos:
        if c.id in seen:
            raise ConfigError(f"two combos in envs/combos.toml are both called {c.id!r}",
                              hint="give one of them a distinct `name = \"...\"`")
        seen.add(c.id)
    return combos


def select_combo(project: Project, *, python: str | None = None, accel: str | None = None,
                 name: str | None = None) -> Combo:
    """The combo named ``name`` (e.g. ``3.12-cu130`` or ``h200``), or the one for python x accel."""
    combos = load_combos(project)
    wanted = name or f"{python}-{accel}"
    for c in combos:
        if c.id == wanted:
            return c
    ids = ", ".join(c.id for c in combos)
    accels = load_accels(project)
    if not name and accel not in accels:
        raise ConfigError(f"unknown accel {accel!r} (envs/accels.toml declares: "
                          f"{', '.join(accels)})",
                          hint="pass one of those to --accel, or add a table for it to "
                          "envs/accels.toml (see docs/adding-a-combo.md)")
    close = difflib.get_close_matches(wanted, [c.id for c in combos], n=3, cutoff=0.6)
    raise ConfigError(f"no combo {wanted!r} in envs/combos.toml (have: {ids})",
                      hint=(f"did you mean {' or '.join(close)}? Or add " if close else "add ")
                      + "a [[combo]] table to envs/combos.toml (see docs/adding-a-combo.md)")


def with_overrides(combo: Combo, *, torch: str | None = None, arches: str | None = None,
                   interpreter: str | None = None, emulate: bool = False) -> Combo:
    """Apply command-line overrides, re-validating the arches against the combo's CUDA."""
    if emulate:
        combo = replace(combo, emulate=True)
    if torch:
        _version(torch, "--torch")
        combo = replace(combo, torch=torch)
    if interpreter:
        combo = replace(combo, interpreter=interpreter,
                        toolkit=ToolkitSource.SYSTEM)
    if arches:
        archs = parse_arch_list(arches)
        check_supported(archs, combo.accel.cuda, where=combo.id)
        combo = replace(combo, arches=archs)
    return combo


def _combo_from_row(row: dict, accels: dict[str, Accel]) -> Combo:
    where = f"envs/combos.toml combo python={row.get('python')} accel={row.get('accel')}"
    for key in ("python", "accel", "torch"):
        if key not in row:
            raise ConfigError(f"{where}: missing key {key!r}")
    if row["accel"] not in accels:
        raise ConfigError(f"{where}: unknown accel {row['accel']!r}",
                          hint=f"declare it in envs/accels.toml (have: {', '.join(accels)})")
    accel = accels[row["accel"]]
    torch_versions = row["torch"] if isinstance(row["torch"], list) else [row["torch"]]
    for v in torch_versions:
        _version(v, f"{where} torch")
    arches = parse_arch_list(row.get("arches", accel.default_arches))
    check_supported(arches, accel.cuda, where=where)
    if "platform" in row:
        platforms.get(row["platform"], where=where)
    toolkit = ToolkitSource.parse(row.get("toolkit", accel.toolkit), where)
    if toolkit is ToolkitSource.PYPI and not accel.toolkit_wheels:
        raise ConfigError(f"{where}: {accel.tag} has no PyPI toolkit (CUDA {accel.cuda}'s "
                          "nvcc is not published as a wheel)",
                          hint=f"use toolkit = \"system\" with CUDA {accel.cuda} installed")
    return Combo(
        python=str(row["python"]),
        accel=accel,
        torch=torch_versions[0],
        torch_versions=tuple(torch_versions),
        arches=arches,
        toolkit=toolkit,
        torch_index=row.get("torch_index", accel.torch_index),
        find_links=row.get("find_links", ""),
        interpreter=row.get("interpreter", ""),
        packages=tuple(row.get("packages", ("cuforge-demo",))),
        name=row.get("name", ""),
        platform=row.get("platform", ""),
        ci=bool(row.get("ci", True)),
        ci_why=" ".join(str(row.get("ci_why", "")).split()),
        host_cxx=row.get("host_cxx", ""),
        host_cc=row.get("host_cc", ""),
        cache=row.get("cache", ""),
        emulate=bool(row.get("emulate", False)),
        glibc_floor=_glibc_floor(row.get("glibc_floor", ""), where),
    )


def _glibc_floor(value: object, where: str) -> str:
    """A combo's ``glibc_floor``: ``"2.31"`` (a glibc version, major.minor), or ``""``.

    >>> _glibc_floor("2.31", "combo")
    '2.31'
    >>> _glibc_floor("", "combo")
    ''
    """
    if value == "":
        return ""
    if not isinstance(value, str) or not re.fullmatch(r"2\.\d+", value):
        raise ConfigError(f"{where}: glibc_floor must be a glibc version in quotes, such as "
                          f"\"2.31\", not {value!r}",
                          hint="the oldest glibc the combo's wheels must run on (Ubuntu 20.04 "
                          "and Debian 11 have 2.31); leave it out to hold them to torch's own")
    return value


def _read_toml(path: Path) -> dict:
    return read_toml(path, "combo table" if path.name == "combos.toml" else "accelerator table")


def _version(text: str, where: str) -> Version:
    try:
        return Version(str(text))
    except InvalidVersion:
        raise ConfigError(f"{where}: {text!r} is not a version number") from None
