"""The checks a wheel meets, in one table, and the four words a check can say.

Everything that lists checks reads :data:`TABLE`: the order ``verify_wheel`` runs them in and
the columns of the verify table (:data:`CHECKS`), the verdict line's order, which checks a
prebuilt wheel must pass to be used (:data:`PREBUILT_MUST_PASS`), and whose passing verdict
still shows its reason. docs/adding-a-check.md says what else a new check touches.

>>> CheckStatus("skipped").severity > CheckStatus.PASS.severity
True
>>> CheckStatus("ok")
Traceback (most recent call last):
ValueError: 'ok' is not a valid CheckStatus
>>> CHECKS
('abi', 'symbols', 'cudart', 'fatbin', 'glibc', 'import', 'smoke')
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class CheckStatus(StrEnum):
    """What one check says. There is no default: a word not listed here is an error."""

    PASS = "pass"
    SKIPPED = "skipped"
    WARN = "warn"
    FAIL = "fail"

    @property
    def severity(self) -> int:
        """Merging several results keeps the most severe: fail > warn > skipped > pass."""
        return _SEVERITY[self]

    @property
    def style(self) -> str:
        """How the console shows the word (rich style)."""
        return _STYLE[self]


_SEVERITY = {CheckStatus.PASS: 0, CheckStatus.SKIPPED: 1, CheckStatus.WARN: 2,
             CheckStatus.FAIL: 3}
_STYLE = {CheckStatus.PASS: "green", CheckStatus.SKIPPED: "yellow", CheckStatus.WARN: "magenta",
          CheckStatus.FAIL: "bold red"}


@dataclass(frozen=True)
class Check:
    """One row of the table. ``per_wheel``: ``verify_wheel`` runs it on every wheel (a column
    of every verify table); the others are added by a later stage (publishing's pins, the
    wheelhouse's manifest, the upstream suite). ``prebuilt_must_pass``: a downloaded or team
    wheel that fails it is not used (it is compiled instead). ``explain_pass``: its passing
    verdict still shows its reason (the upstream suite's own "2770 passed" is the evidence)."""

    name: str
    per_wheel: bool = True
    prebuilt_must_pass: bool = False
    explain_pass: bool = False


#: Every check, in the order verdicts print (and ``verify_wheel`` runs the per-wheel ones).
TABLE: tuple[Check, ...] = (
    Check("abi", prebuilt_must_pass=True),
    Check("symbols", prebuilt_must_pass=True),
    Check("cudart", prebuilt_must_pass=True),
    Check("fatbin", prebuilt_must_pass=True),
    Check("glibc", prebuilt_must_pass=True, explain_pass=True),   # the floor shows on a pass
    Check("import", prebuilt_must_pass=True),
    Check("smoke", prebuilt_must_pass=True),
    Check("pins", per_wheel=False),
    Check("manifest", per_wheel=False),
    Check("cccl", per_wheel=False),
    Check("upstream-tests", per_wheel=False, explain_pass=True),
    Check("stress", per_wheel=False),
    Check("sanitize", per_wheel=False),
    Check("stress-ptx-jit", per_wheel=False),     # either, on the wheel's PTX (--ptx-jit)
    Check("sanitize-ptx-jit", per_wheel=False),
)

BY_NAME = {c.name: c for c in TABLE}
CHECKS = tuple(c.name for c in TABLE if c.per_wheel)
PREBUILT_MUST_PASS = tuple(c.name for c in TABLE if c.prebuilt_must_pass)


def ordered(names) -> list[str]:
    """``names`` in the table's order; names the table does not hold (the model stage's
    "checkout model") follow in their own order.

    >>> ordered(["smoke", "checkout model", "abi"])
    ['abi', 'smoke', 'checkout model']
    """
    names = list(names)
    return [c.name for c in TABLE if c.name in names] + [n for n in names if n not in BY_NAME]


def explains_pass(name: str) -> bool:
    return name in BY_NAME and BY_NAME[name].explain_pass
