"""CUDA target arches: parse ``TORCH_CUDA_ARCH_LIST`` strings, check them against a toolkit,
and render them for the tools that consume them (torch, CMake, nvcc, package-specific lists).

>>> parse_arch_list("12.0;12.1+PTX").torch()
'12.0;12.1+PTX'
>>> parse_arch_list("12.0 12.1+PTX").cmake()
'120-real;121'
>>> parse_arch_list("8.0-virtual").gencode_flags()
['-gencode=arch=compute_80,code=[compute_80]']
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import cache

from packaging.version import Version

from cuforge import data
from cuforge.core.errors import ConfigError


class ArchPolicy(StrEnum):
    """How a package takes targets outside its own arch table (docs/how-it-works.md)."""

    AUTO = "auto"       # native where patches and the toolkit allow, else ptx
    NATIVE = "native"   # keep the target: the package was patched to know it
    PTX = "ptx"         # the newest known arch below it, with PTX (12.1 -> 12.0+PTX)
    SKIP = "skip"       # drop it
    ERROR = "error"     # refuse

    @classmethod
    def parse(cls, value: str, where: str) -> ArchPolicy:
        try:
            return cls(value)
        except ValueError:
            raise ConfigError(f"{where}: arch policy must be one of {', '.join(cls)}, not "
                              f"{value!r}", hint="docs/how-it-works.md explains each policy"
                              ) from None

_TARGET_RE = re.compile(r"^(?P<major>\d+)\.(?P<minor>\d)(?P<suffix>[af]?)(?P<ptx>\+PTX|-virtual)?$")


@dataclass(frozen=True, order=True)
class Arch:
    """A compute capability such as 12.1, optionally arch-specific (``12.0a``) or family (``f``)."""

    major: int
    minor: int
    suffix: str = ""

    @property
    def number(self) -> str:
        """``"121"``: the form nvcc and CMake use (``sm_121``)."""
        return f"{self.major}{self.minor}{self.suffix}"

    @property
    def base(self) -> str:
        """``"12.1"``: the key of the arch table (suffix dropped)."""
        return f"{self.major}.{self.minor}"

    def __str__(self) -> str:
        return f"{self.base}{self.suffix}"


@dataclass(frozen=True, order=True)
class ArchTarget:
    """One entry of an arch list: SASS for ``arch``, plus PTX when ``ptx`` is set; PTX only
    when ``sass`` is off (``8.0-virtual``, CMake's name: the driver must JIT-compile it)."""

    arch: Arch
    ptx: bool = False
    sass: bool = True

    def __str__(self) -> str:
        if not self.sass:
            return f"{self.arch}-virtual"
        return f"{self.arch}{'+PTX' if self.ptx else ''}"

    @property
    def compact(self) -> str:
        """``"121+PTX"``, ``"120"``, ``"80-virtual"``: the patched flash-attn's list format."""
        return self.arch.number + str(self)[len(str(self.arch)):]


@dataclass(frozen=True)
class ArchList:
    """An ordered, duplicate-free list of targets."""

    targets: tuple[ArchTarget, ...]

    def __iter__(self):
        return iter(self.targets)

    def __len__(self) -> int:
        return len(self.targets)

    def __str__(self) -> str:
        return self.torch()

    def torch(self, sep: str = ";") -> str:
        """The list as written (``8.0-virtual`` included): manifests, keys, messages."""
        return sep.join(str(t) for t in self.targets)

    def torch_env(self) -> str:
        """Render for ``TORCH_CUDA_ARCH_LIST``, which has no PTX-only form: ``X-virtual``
        becomes ``X+PTX`` there (torch's builds get SASS as well; the fatbin check lists it)."""
        return ";".join(f"{t.arch}+PTX" if not t.sass else str(t) for t in self.targets)

    def cmake(self) -> str:
        """Render for ``CMAKE_CUDA_ARCHITECTURES`` / ``CUDAARCHS`` (``121`` = SASS + PTX)."""
        forms = {(True, True): "", (True, False): "-real", (False, True): "-virtual"}
        return ";".join(t.arch.number + forms[t.sass, t.ptx] for t in self.targets)

    def compact(self) -> str:
        """``121+PTX;120``: numbers with their ``+PTX`` / ``-virtual`` (flash-attn, patched)."""
        return ";".join(t.compact for t in self.targets)

    def gencode_flags(self) -> list[str]:
        """nvcc ``-gencode`` flags, one per target."""
        flags = []
        for t in self.targets:
            codes = [f"sm_{t.arch.number}"] * t.sass + [f"compute_{t.arch.number}"] * t.ptx
            flags.append(f"-gencode=arch=compute_{t.arch.number},code=[{','.join(codes)}]")
        return flags

    @property
    def sass(self) -> tuple[Arch, ...]:
        """Arches that must have native SASS."""
        return tuple(t.arch for t in self.targets if t.sass)

    @property
    def ptx(self) -> tuple[Arch, ...]:
        """Arches that must have embedded PTX."""
        return tuple(t.arch for t in self.targets if t.ptx)


@dataclass(frozen=True)
class ArchSupport:
    min_cuda: Version
    max_cuda: Version | None
    renamed_to: str | None


@cache
def known_arches() -> dict[str, ArchSupport]:
    """The arch table from ``data/cuda_arches.toml``, keyed by ``"MAJOR.MINOR"``."""
    out = {}
    for key, row in data.table("cuda_arches")["arch"].items():
        out[key] = ArchSupport(
            min_cuda=Version(row["min_cuda"]),
            max_cuda=Version(row["max_cuda"]) if "max_cuda" in row else None,
            renamed_to=row.get("renamed_to"),
        )
    return out


def families() -> dict[str, list[str]]:
    return dict(data.table("cuda_arches")["family"])


def parse_target(text: str) -> ArchTarget:
    """Parse one entry (``"12.1+PTX"``, ``"12.0a"``); raise ConfigError on anything else."""
    m = _TARGET_RE.match(text.strip())
    if not m:
        raise ConfigError(
            f"bad CUDA arch {text!r}: expected MAJOR.MINOR with an optional 'a'/'f' suffix and "
            "'+PTX' (or '-virtual': PTX only), e.g. '12.0', '12.1+PTX', '12.0a', '8.0-virtual'",
            hint="write arches like --cuda-arch \"12.0;12.1+PTX\" (sm_121 is written 12.1)",
        )
    arch = Arch(int(m["major"]), int(m["minor"]), m["suffix"])
    if arch.base not in known_arches():
        known = " ".join(known_arches())
        raise ConfigError(f"unknown CUDA arch {text!r}", hint=f"use one of: {known}")
    return ArchTarget(arch, ptx=bool(m["ptx"]), sass=m["ptx"] != "-virtual")


def parse_arch_list(text: str) -> ArchList:
    """Parse a ``;``- or space-separated list; named families (``Blackwell``) expand."""
    entries = [e for e in re.split(r"[;\s,]+", text.strip()) if e]
    if not entries:
        raise ConfigError("empty CUDA arch list", hint='pass e.g. --cuda-arch "12.0;12.1+PTX"')
    targets: list[ArchTarget] = []
    fams = families()
    for entry in entries:
        name, _, ptx = entry.partition("+")
        if name in fams:
            expanded = [parse_target(a) for a in fams[name]]
            if ptx == "PTX":
                expanded[-1] = ArchTarget(expanded[-1].arch, ptx=True)
            targets.extend(expanded)
        else:
            targets.append(parse_target(entry))
    return ArchList(_merge(targets))


def _merge(targets: list[ArchTarget]) -> tuple[ArchTarget, ...]:
    """Drop duplicates; ``12.1`` and ``12.1+PTX`` (or ``12.1-virtual``) merge into
    ``12.1+PTX``; keep first order."""
    merged: dict[Arch, tuple[bool, bool]] = {}
    for t in targets:
        ptx, sass = merged.get(t.arch, (False, False))
        merged[t.arch] = (ptx or t.ptx, sass or t.sass)
    return tuple(ArchTarget(a, p, s) for a, (p, s) in merged.items())


def check_supported(archs: ArchList, cuda: Version | str, *, where: str = "") -> None:
    """Raise ConfigError unless the CUDA toolkit ``cuda`` compiles every target offline."""
    cuda = Version(str(cuda))
    cuda_mm = Version(f"{cuda.major}.{cuda.minor}")
    ctx = f" ({where})" if where else ""
    for t in archs:
        row = known_arches()[t.arch.base]
        if cuda_mm < row.min_cuda:
            raise ConfigError(
                f"CUDA arch {t.arch} needs CUDA >= {row.min_cuda}, but this combo{ctx} uses "
                f"CUDA {cuda_mm}",
                hint=f"use a combo with CUDA >= {row.min_cuda} (e.g. cu130), or drop {t.arch} "
                "from --cuda-arch (an older arch with +PTX still runs there by JIT)",
            )
        if row.max_cuda is not None and cuda_mm > row.max_cuda:
            newer = f" (it is called {row.renamed_to} there)" if row.renamed_to else ""
            raise ConfigError(
                f"CUDA {cuda_mm}{ctx} can no longer compile for arch {t.arch}{newer}; "
                f"the last toolkit that can is CUDA {row.max_cuda}",
                hint=f"drop {t.arch} from --cuda-arch, or use a combo with CUDA <= {row.max_cuda}",
            )


def map_to_supported(archs: ArchList, supported: list[str], policy: ArchPolicy) -> ArchList:
    """Map a request onto the arches a package knows (cumm's table, flash-attn's kernels).

    ``policy``: ``"skip"`` drops unknown targets; ``"ptx"`` replaces each unknown target by the
    newest known arch below it, with PTX (12.1 -> 12.0+PTX, the published builder's rule);
    ``"error"`` raises. ``"native"`` keeps the target as is (the package was patched to know it).

    >>> str(map_to_supported(parse_arch_list("12.1"), ["9.0", "12.0"], ArchPolicy.PTX))
    '12.0+PTX'
    """
    policy = ArchPolicy(policy)
    known = sorted(parse_target(a).arch for a in supported)
    out: list[ArchTarget] = []
    for t in archs:
        if t.arch in known or policy is ArchPolicy.NATIVE:
            out.append(t)
        elif policy is ArchPolicy.SKIP:
            continue
        elif policy is ArchPolicy.PTX:
            below = [a for a in known if a < t.arch]
            if not below:
                raise ConfigError(f"no supported arch at or below {t.arch} in {supported}")
            out.append(ArchTarget(below[-1], ptx=True))
        else:
            raise ConfigError(
                f"arch {t.arch} is not supported by this package (it knows {' '.join(supported)})",
                hint="choose an arch it supports, or set the recipe's arch policy to 'ptx'",
            )
    return ArchList(_merge(out))


@dataclass(frozen=True)
class ArchRule:
    """How a package takes the combo's arches: kept, mapped to its own table, or narrowed."""

    policy: ArchPolicy = ArchPolicy.NATIVE
    supported: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()   # extra variables, rendered from the mapped list
    ptx: bool = True           # False: the package emits no PTX; +PTX is dropped
    device_code: bool = True   # False: C++-only package (pointseg); no fatbin expected
    native_patches: tuple[str, ...] = ()   # applied under the native policy (cumm's table)
    # True: also append -gencode flags to every nvcc call (NVCC_APPEND_FLAGS), for packages
    # whose own .cu files get nvcc's default arch (cumm, spconv: sm_75 + compute_75).
    append_gencode: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", ArchPolicy(self.policy))   # ValueError: no such policy

    def explain(self, requested: ArchList, policy: ArchPolicy) -> str:
        """For the manifest: how targets outside the package's table were handled.

        >>> ptx = ArchPolicy.PTX
        >>> ArchRule(ptx, ("9.0", "12.0")).explain(parse_arch_list("12.0;12.1+PTX"), ptx)
        'arch policy ptx: outside its arch table: 12.1 -> 12.0+PTX'
        """
        policy = ArchPolicy(policy)
        known = {parse_target(a).arch for a in self.supported}
        parts = []
        for t in requested:
            if not known or t.arch in known:
                continue
            if policy is ArchPolicy.NATIVE:
                parts.append(f"{t.arch} kept (table patched)")
            elif policy is ArchPolicy.PTX:
                to = map_to_supported(ArchList((t,)), list(self.supported), policy)
                parts.append(f"{t.arch} -> {to}")
            else:
                parts.append(f"{t.arch} dropped")
        return f"arch policy {policy}: outside its arch table: {', '.join(parts)}" if parts else ""

    def map(self, archs: ArchList) -> ArchList:
        if self.supported:
            archs = map_to_supported(archs, list(self.supported), self.policy)
        if not self.ptx:   # a PTX-only request becomes SASS: the nearest such a package has
            archs = ArchList(tuple(ArchTarget(t.arch, ptx=False) for t in archs))
        return archs
