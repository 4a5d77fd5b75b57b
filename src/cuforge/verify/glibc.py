"""The ``glibc`` check: a wheel's floor (``verify.floor``) held to its combo's ceiling.

The ceiling is the combo's ``glibc_floor`` (envs/combos.toml), else the floor torch's own
wheel promises in its tag (torch 2.14.1: ``manylinux_2_28_x86_64``). A wheel that needs more
fails a declared ceiling and warns against torch's (it runs on fewer machines than its torch,
and its tag says so); the detail names each symbol version above it, its library and symbols.
A wheel whose own manylinux tag promises less than its files need fails either way.

>>> check_glibc(None, None).detail
'no ELF files (pure Python wheel)'
"""

from __future__ import annotations

from collections.abc import Iterable

from cuforge.verify.checklist import CheckStatus
from cuforge.verify.floor import Ceiling, Floor, dotted, policy_at, wheel_tag_glibc
from cuforge.verify.report import CheckResult

CHECK = "glibc"


def check_glibc(floor: Floor | None, ceiling: Ceiling | None,
                tags: Iterable[str] = ()) -> CheckResult:
    """``floor``: the wheel's (None: no ELF file); ``ceiling``: what it is held to (None:
    nothing to hold it to); ``tags``: the platform tags its file name carries."""
    if floor is None:
        return CheckResult(CHECK, CheckStatus.PASS, "no ELF files (pure Python wheel)")
    head = f"{floor.text()} ({floor.tag()})"
    noted = (f"\nleft out (torch's wheel or the driver brings them): {', '.join(floor.left_out)}"
             if floor.left_out else "")
    promised = wheel_tag_glibc(tags)
    if promised is not None and floor.glibc is not None and floor.glibc > promised:
        over = [n.words() for n in floor.needs if n.namespace == "GLIBC"
                and n.number and n.number > promised]
        return CheckResult(CHECK, CheckStatus.FAIL,
                           f"tagged for glibc {dotted(promised)}, but needs {head}: "
                           + "; ".join(over) + noted)
    if ceiling is None:
        return CheckResult(CHECK, CheckStatus.SKIPPED,
                           f"skipped: {head}; nothing to hold it to (torch's wheel names no "
                           "manylinux tag; set glibc_floor in the combo)" + noted)
    above_status = CheckStatus.FAIL if ceiling.declared else CheckStatus.WARN
    if floor.policy is None:
        return CheckResult(CHECK, above_status,
                           f"{head}: no manylinux policy holds ({floor.why}), so it cannot be "
                           f"held to {ceiling.text()}" + noted)
    limit = policy_at(floor.machine, ceiling.glibc)
    over = floor.above(limit) if limit is not None else list(floor.needs)
    if over:
        return CheckResult(CHECK, above_status,
                           f"needs {head}, above {ceiling.text()}: "
                           + "; ".join(n.words() for n in over) + noted)
    return CheckResult(CHECK, CheckStatus.PASS, f"{head}, within {ceiling.text()}" + noted)
