"""A package's verified wheel as the wheel sources hand it to the gate (``Made``), why a source
gave none (``Refused``), and a team wheel checked ahead of its dependencies (``Ahead``): data
only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cuforge.publish.wheelhouse import Status
from cuforge.verify.floor import Floor
from cuforge.verify.report import CheckResult


@dataclass(frozen=True)
class Made:
    """A verified wheel, before it is pinned and published: how it came to be, its checks'
    results, the arches it really embeds, and a note for the manifest's reason."""

    wheel: Path
    status: Status             # compiled, or prebuilt (downloaded, or a prebuilt recipe)
    checks: dict[str, CheckResult]
    embedded: dict[str, list[str]]
    note: str = ""             # e.g. why the published wheel was not used
    team: str = ""             # the team index it came from (--wheels): published as it is
    floor: Floor | None = None   # a team wheel's, read when it was downloaded (verify.floor)


@dataclass(frozen=True)
class Refused:
    """Why a wheel source (the team's index, the recipe's prebuilt wheel) gave no wheel: the
    next source is tried, and the reason is said (and kept as the manifest's note)."""

    why: str


@dataclass(frozen=True)
class Ahead:
    """A team wheel checked before its dependencies were decided, against their team wheels
    (``wheelsource.check_ahead``)."""

    made: Made
    deps: dict[str, str]   # dependency -> sha256 of the team wheel its checks imported
    log: Path              # what the checks printed, copied into the package's log when used
