"""A recipe's kernel filter (``[kernels]``): which of a package's ahead-of-time kernel
parameter sets a build leaves out, because the package's own run-time tuner can never choose
them on any of the combo's arches (spconv: docs/packages.md, issue 51).

A recipe may also name narrower sets (``[kernels.sets.NAME]``, asked for with ``--kernels NAME``):
on top of the lean set, parts of the package's API that every GPU could run but that a code
base never calls (spconv's ``3d``: the 3-D sparse ops only, for Pointcept). They reach the
build as the variables the set lists, read by the recipe's patches.

Each rule names a family of parameter sets (``gemm``: spconv's ``SHUFFLE_*_PARAMS``,
``conv``: its ``IMPLGEMM_*_PARAMS``), the algorithm, optionally the input/weight/output
dtypes, and the arch from which the tuner skips them. A rule applies to a build only when it
holds on *every* arch the combo targets; the applicable rules reach the package's build as
JSON in ``CUFORGE_KERNEL_DROP``, read by ``builders/shim/cuforge_kernels.py``.

>>> rule = KernelRule("gemm", "Volta", (), "7.5", "spconv/csrc/sparse/convops.py:563")
>>> from cuforge.config.arches import parse_arch_list
>>> rule.holds_on(parse_arch_list("12.1+PTX;12.0"))
True
>>> rule.holds_on(parse_arch_list("7.0;9.0"))
False
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum

from cuforge.config.arches import ArchList, parse_target
from cuforge.core.errors import ConfigError

VARIABLE = "CUFORGE_KERNEL_DROP"   # what the shim reads (builders/shim/cuforge_kernels.py)
# what patches/cumm conv-params-inline reads: "1" keeps upstream's own translation unit per
# ConvParams (a full build is upstream's build), anything else defines it in its header
UNITS_VARIABLE = "CUFORGE_CONV_PARAMS_UNITS"
FAMILIES = ("gemm", "conv")
RULE_KEYS = {"family", "algo", "io_dtypes", "arch_at_least", "mirrors", "why"}
SET_KEYS = {"env", "says", "why"}


class KernelSet(StrEnum):
    """Which parameter sets a build compiles: the recipe's rules applied, or all of them."""

    LEAN = "lean"
    FULL = "full"


@dataclass(frozen=True)
class KernelRule:
    """Leave out ``family`` kernels of ``algo`` (with these input, weight and output dtypes,
    when given) where every target is at least ``arch_at_least``: the tuner skips them there."""

    family: str
    algo: str
    io_dtypes: tuple[str, ...]
    arch_at_least: str
    mirrors: str          # the upstream file:line whose check this rule restates

    def holds_on(self, arches: ArchList) -> bool:
        """True when the tuner skips these kernels on every arch of ``arches`` (a ``+PTX``
        target also runs on newer GPUs, which are above the bound as well)."""
        floor = parse_target(self.arch_at_least).arch
        return len(arches) > 0 and all((t.arch.major, t.arch.minor) >= (floor.major, floor.minor)
                                       for t in arches)

    def as_json(self) -> dict:
        return {"family": self.family, "algo": self.algo, "io_dtypes": list(self.io_dtypes)}

    def describe(self) -> str:
        dtypes = f" {','.join(self.io_dtypes)}" if self.io_dtypes else ""
        return f"{self.family} {self.algo}{dtypes}"


@dataclass(frozen=True)
class NarrowSet:
    """A named set narrower than lean: the lean set, and without parts of the package's API
    that a code base never calls (no GPU rules them out, so a stack or a user opts in)."""

    name: str
    env: tuple[tuple[str, str], ...]   # what the recipe's patches read in its build
    says: str                          # the manifest's words for what is left out


@dataclass(frozen=True)
class KernelFilter:
    """A recipe's ``[kernels]``: its default set, its rules and its narrower sets."""

    default: KernelSet
    rules: tuple[KernelRule, ...]
    sets: tuple[NarrowSet, ...] = ()

    def _full(self, wanted: str | None) -> bool:
        return (wanted or self.default) == KernelSet.FULL

    def names(self) -> list[str]:
        """Every set a build may ask for."""
        return [KernelSet.LEAN.value, KernelSet.FULL.value, *(s.name for s in self.sets)]

    def narrow(self, wanted: str | None, where: str = "") -> NarrowSet | None:
        """The narrower set ``wanted`` names (None for lean or full); a name the recipe does
        not have is a ConfigError."""
        name = wanted or self.default
        if name in (KernelSet.LEAN, KernelSet.FULL):
            return None
        found = [s for s in self.sets if s.name == name]
        if not found:
            raise ConfigError(f"{where or 'this recipe'} has no kernel set {name!r}",
                              hint=f"--kernels takes one of: {', '.join(self.names())}")
        return found[0]

    def applicable(self, arches: ArchList, wanted: str | None = None
                   ) -> tuple[KernelRule, ...]:
        """The rules that leave kernels out of a build for ``arches`` (none for a full build)."""
        if self._full(wanted):
            return ()
        return tuple(r for r in self.rules if r.holds_on(arches))

    def env(self, arches: ArchList, wanted: str | None = None, where: str = ""
            ) -> dict[str, str]:
        """The build's variables: the applicable rules as JSON ("[]": every kernel is built),
        whether each ConvParams keeps a unit of its own (only in a full build), and a
        narrower set's own variables."""
        full = self._full(wanted)
        narrow = self.narrow(wanted, where)
        return {VARIABLE: json.dumps([r.as_json() for r in self.applicable(arches, wanted)]),
                UNITS_VARIABLE: "1" if full else "0", **dict(narrow.env if narrow else ())}

    def describe(self, arches: ArchList, wanted: str | None = None) -> str:
        """The manifest's words: ``full``, or ``lean`` and what was left out, after a
        narrower set's name and words."""
        if self._full(wanted):
            return KernelSet.FULL.value
        rules = self.applicable(arches, wanted)
        kept = ("without " + "; ".join(r.describe() for r in rules)) if rules else "every kernel"
        lean = f"lean: {kept}; ConvParams in their headers (arches {arches})"
        narrow = self.narrow(wanted)
        return f"{narrow.name}: {narrow.says}; {lean}" if narrow else lean


def set_of(described: str) -> str:
    """The set's name in the manifest's words ``describe`` wrote: ``full``, ``lean`` or a
    narrower set's name.

    >>> set_of("3d: the 3-D sparse ops only; lean: without gemm Volta")
    '3d'
    """
    return described.split(":")[0]


def parse_kernels(table: dict | None, where: str) -> KernelFilter | None:
    """A recipe's ``[kernels]`` table, checked; None when the recipe has none."""
    if table is None:
        return None
    try:
        default = KernelSet(table.get("set", "lean"))
    except ValueError:
        raise ConfigError(f"{where}: kernels.set must be 'lean' or 'full', not "
                          f"{table.get('set')!r}", hint="fix [kernels] in the recipe") from None
    unknown = set(table) - {"set", "drop", "sets"}
    if unknown:
        raise ConfigError(f"{where}: unknown keys in [kernels]: {sorted(unknown)}",
                          hint="[kernels] may have: set, drop, sets")
    return KernelFilter(default, tuple(_rule(row, f"{where} [[kernels.drop]] #{i + 1}")
                                       for i, row in enumerate(table.get("drop", ()))),
                        tuple(_narrow(name, row, f"{where} [kernels.sets.{name}]")
                              for name, row in table.get("sets", {}).items()))


def _narrow(name: str, row: dict, where: str) -> NarrowSet:
    if name in (KernelSet.LEAN, KernelSet.FULL):
        raise ConfigError(f"{where}: {name!r} is a built-in set", hint="name it otherwise")
    unknown, missing = set(row) - SET_KEYS, SET_KEYS - set(row)
    if unknown or missing or not row.get("env"):
        raise ConfigError(f"{where}: " + (f"unknown keys {sorted(unknown)}" if unknown
                                          else f"missing {sorted(missing) or ['env']}"),
                          hint="a set has: env (the variables its patches read), says, why")
    return NarrowSet(name, tuple(sorted((k, str(v)) for k, v in row["env"].items())),
                     " ".join(str(row["says"]).split()))


def _rule(row: dict, where: str) -> KernelRule:
    unknown = set(row) - RULE_KEYS
    missing = {"family", "algo", "arch_at_least", "mirrors"} - set(row)
    if unknown or missing:
        raise ConfigError(f"{where}: " + (f"unknown keys {sorted(unknown)}" if unknown
                                          else f"missing {sorted(missing)}"),
                          hint="a rule has: " + ", ".join(sorted(RULE_KEYS)))
    if row["family"] not in FAMILIES:
        raise ConfigError(f"{where}: family must be one of {FAMILIES}, not {row['family']!r}",
                          hint="gemm: the SHUFFLE_*_PARAMS, conv: the IMPLGEMM_*_PARAMS")
    dtypes = tuple(row.get("io_dtypes", ()))
    if dtypes and len(dtypes) != 3:
        raise ConfigError(f"{where}: io_dtypes names input, weight and output: {dtypes}",
                          hint='e.g. io_dtypes = ["f16", "f16", "f16"]')
    parse_target(row["arch_at_least"])   # a ConfigError names a bad arch
    return KernelRule(row["family"], row["algo"], dtypes, row["arch_at_least"], row["mirrors"])
