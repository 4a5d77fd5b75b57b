"""What verification produces: one result per check, one report per wheel, and the context
(interpreter, torch, CUDA, ABI, library dirs, requested arches) every check reads.

>>> r = WheelReport(Path("demo-0.1-cp311-cp311-linux_x86_64.whl"), "demo",
...                 [CheckResult("abi", "pass", "1 .so: no C++ ABI mismatch")])
>>> r.ok
True
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rich.table import Table

from cuforge.config.arches import ArchList

Status = Literal["pass", "fail", "skipped", "warn"]

#: Column order of the table; also the order ``verify_wheel`` runs the checks in.
CHECKS = ("abi", "symbols", "cudart", "fatbin", "import", "smoke")

# Worst first: merging results of several .so files keeps the worst status.
_SEVERITY: dict[str, int] = {"fail": 3, "warn": 2, "skipped": 1, "pass": 0}
_STYLE = {"pass": "green", "fail": "bold red", "skipped": "yellow", "warn": "magenta"}


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict. ``detail`` is for people: the first line is the summary.

    >>> CheckResult("smoke", "skipped", "skipped: no GPU").summary
    'skipped: no GPU'
    """

    check: str
    status: Status
    detail: str

    @property
    def summary(self) -> str:
        """The first line of ``detail``."""
        return self.detail.splitlines()[0] if self.detail else ""

    def to_dict(self) -> dict[str, str]:
        return {"check": self.check, "status": self.status, "detail": self.detail}


@dataclass(frozen=True)
class WheelReport:
    """All check results of one wheel; ``ok`` is False as soon as one check failed."""

    wheel: Path
    package: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.status != "fail" for r in self.results)

    def result(self, check: str) -> CheckResult | None:
        """The result of ``check`` (``"abi"``, ``"fatbin"``, ...), or None if it did not run."""
        return next((r for r in self.results if r.check == check), None)

    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == "fail"]

    def to_dict(self) -> dict:
        return {"wheel": str(self.wheel), "package": self.package, "ok": self.ok,
                "results": [r.to_dict() for r in self.results]}


@dataclass(frozen=True)
class VerifyContext:
    """What the checks compare a wheel against; build it with ``probe_context(python, arches)``.

    ``torch_cuda`` is torch's CUDA version (``"13.0"``; empty for a CPU-only torch).
    ``lib_dirs`` are where the .so files' dependencies live: torch/lib and the nvidia wheels'
    lib dirs. ``requested`` is the arch list the wheel was built for (None: report only).
    """

    python: Path
    torch_version: str
    torch_cuda: str
    cxx11_abi: bool
    lib_dirs: tuple[Path, ...] = ()
    requested: ArchList | None = None
    env: tuple[tuple[str, str], ...] = ()   # what ``python`` needs to run (emulation's variables)
    sysroot: str = ""     # the target's userland under emulation (its loader's first dirs)
    no_device: str = ""   # why no GPU can be visible to ``python`` (emulated): smoke skips, no probe


def worst(statuses: Iterable[Status]) -> Status:
    """The most severe status: ``worst(["pass", "warn"]) == "warn"``; empty -> ``"pass"``."""
    return max(statuses, key=_SEVERITY.__getitem__, default="pass")


def merge(check: str, per_file: list[tuple[str, CheckResult]], *, empty: str) -> CheckResult:
    """Fold per-.so results of one check into one wheel-level result.

    The summary counts files by status; problem files are listed first, each with its detail.
    ``empty`` is the detail when the wheel has no .so at all.

    >>> merge("abi", [], empty="no shared objects").detail
    'no shared objects'
    """
    if not per_file:
        return CheckResult(check, "pass", empty)
    # a file with nothing to check (skipped) does not hide the verdict on the others
    checked = [r.status for _, r in per_file if r.status != "skipped"]
    status = worst(checked) if checked else "skipped"
    counts: dict[str, int] = {}
    for _, r in per_file:
        counts[r.status] = counts.get(r.status, 0) + 1
    head = ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda kv: -_SEVERITY[kv[0]]))
    ordered = sorted(per_file, key=lambda item: -_SEVERITY[item[1].status])
    if status == "pass" and len(per_file) == 1:
        return CheckResult(check, "pass", f"{ordered[0][0]}: {ordered[0][1].detail}")
    if status == "skipped" and len(per_file) == 1:
        name, only = ordered[0]
        return CheckResult(check, "skipped", f"skipped: {name}: {only.detail.removeprefix('skipped: ')}")
    first = ordered[0]
    summary = (f"{len(per_file)} .so: all pass" if status == "pass" and not counts.get("skipped")
               else f"{first[0]}: {first[1].summary}" if status != "pass"
               else f"{len(per_file)} .so: pass, {counts['skipped']} with nothing to check")
    lines = [f"{summary}  [{head}]"]
    for name, r in ordered:
        body = r.detail.replace("\n", "\n    ")
        lines.append(f"  {name} [{r.status}]: {body}")
    return CheckResult(check, status, "\n".join(lines))


def _cell(result: CheckResult | None, width: int) -> str:
    if result is None:
        return "[dim]-[/dim]"
    from cuforge.core.console import EXPLAIN_PASS   # the upstream suite's own summary is the evidence
    text = result.status if result.status == "pass" and result.check not in EXPLAIN_PASS else (
        result.summary if result.summary.startswith(result.status)
        else f"{result.status}: {result.summary}")
    if (result.status != "pass" or result.check in EXPLAIN_PASS) and len(text) > width:
        text = text[: width - 1] + "…"
    return f"[{_STYLE[result.status]}]{_escape(text)}[/]"


def _escape(text: str) -> str:
    return text.replace("[", r"\[")


def render_table(reports: Iterable[WheelReport], *, width: int = 60) -> Table:
    """A rich Table: one row per wheel, one column per check; failures show their reason.

    >>> from rich.console import Console
    >>> t = render_table([WheelReport(Path("a.whl"), "a", [CheckResult("abi", "pass", "")])])
    >>> t.row_count
    1
    """
    reports = list(reports)
    extra = [c for r in reports for c in (x.check for x in r.results) if c not in CHECKS]
    columns = list(CHECKS) + list(dict.fromkeys(extra))
    from cuforge.core.console import table as make_table   # compact, folding: readable at 80 columns
    table = make_table("package", *columns, title="cuforge verify")
    table.show_lines = True
    for report in reports:
        verdict = "[green]ok[/]" if report.ok else "[bold red]FAILED[/]"
        cells = [_cell(report.result(c), width) for c in columns]
        table.add_row(f"{report.package}\n{verdict}", *cells)
    return table


def reports_to_json(reports: Iterable[WheelReport]) -> str:
    """A JSON document: ``{"ok": bool, "wheels": [WheelReport.to_dict(), ...]}``."""
    reports = list(reports)
    doc = {"ok": all(r.ok for r in reports), "wheels": [r.to_dict() for r in reports]}
    return json.dumps(doc, indent=2)
