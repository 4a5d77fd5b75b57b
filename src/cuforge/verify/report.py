"""What verification produces: one result per check, one report per wheel, and the context
(interpreter, torch, CUDA, ABI, library dirs, requested arches) every check reads. A result
stays a :class:`CheckResult` (a :class:`~cuforge.verify.checklist.CheckStatus` and a detail)
from the check to the manifest and back: only the console turns it into words.

>>> r = WheelReport(Path("demo-0.1-cp311-cp311-linux_x86_64.whl"), "demo",
...                 [CheckResult("abi", "pass", "1 .so: no C++ ABI mismatch")])
>>> r.ok
True
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table
from rich.text import Text

from cuforge.config.arches import ArchList
from cuforge.verify.checklist import CHECKS, CheckStatus, explains_pass, ordered
from cuforge.verify.floor import Ceiling

__all__ = ["CHECKS", "CheckResult", "CheckStatus", "VerifyContext", "WheelReport", "merge",
           "outcome_line", "render_table", "reports_to_json", "verdict_line", "worst"]


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict. ``detail`` is for people: the first line is the summary.
    ``status`` is a CheckStatus (a word that is none raises ValueError).

    >>> CheckResult("smoke", "skipped", "skipped: no GPU").summary
    'skipped: no GPU'
    >>> CheckResult("smoke", "ok", "")
    Traceback (most recent call last):
    ValueError: 'ok' is not a valid CheckStatus
    """

    check: str
    status: CheckStatus
    detail: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", CheckStatus(self.status))

    @property
    def failed(self) -> bool:
        return self.status is CheckStatus.FAIL

    @property
    def summary(self) -> str:
        """The first line of ``detail``."""
        return self.detail.splitlines()[0] if self.detail else ""

    @property
    def reason(self) -> str:
        """The summary without a leading ``"<status>:"`` (details like "skipped: no GPU")."""
        head, sep, rest = self.summary.partition(":")
        return rest.strip() if sep and head.strip() == self.status else self.summary

    def to_dict(self) -> dict[str, str]:
        return {"check": self.check, "status": str(self.status), "detail": self.detail}

    @classmethod
    def recorded(cls, check: str, value: object) -> CheckResult:
        """A result as a manifest line holds it: ``{"status": ..., "detail": ...}``, or, in
        lines of cuforge before typed results, ``"status: detail"``. A status that is not a
        CheckStatus raises ValueError: an unknown word never reads as a pass.

        >>> CheckResult.recorded("smoke", "skipped: no GPU").reason
        'no GPU'
        >>> CheckResult.recorded("abi", {"status": "pass", "detail": "1 .so"}).status
        <CheckStatus.PASS: 'pass'>
        >>> CheckResult.recorded("abi", "fine: 1 .so")
        Traceback (most recent call last):
        ValueError: 'fine' is not a valid CheckStatus
        """
        if isinstance(value, CheckResult):
            return value
        if isinstance(value, Mapping):
            return cls(check, value["status"], str(value.get("detail", "")))
        if not isinstance(value, str):
            raise ValueError(f"check {check!r}: {value!r} is not a check result")
        status, _, detail = value.partition(":")
        return cls(check, status.strip(), detail.strip())

    def recording(self) -> dict[str, str]:
        """What a manifest line holds for this result (``recorded`` reads it back)."""
        return {"status": str(self.status), "detail": self.detail}


@dataclass(frozen=True)
class WheelReport:
    """All check results of one wheel; ``ok`` is False as soon as one check failed."""

    wheel: Path
    package: str
    results: list[CheckResult] = field(default_factory=list)
    # SASS and PTX arch numbers its .so files embed ({"sass": ["90"], "ptx": ["90"]}), read
    # while the wheel was unpacked for the checks (the manifest records them)
    embedded: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(r.failed for r in self.results)

    @property
    def checks(self) -> dict[str, CheckResult]:
        """``{check: result}``: what the manifest entry records."""
        return {r.check: r for r in self.results}

    def result(self, check: str) -> CheckResult | None:
        """The result of ``check`` (``"abi"``, ``"fatbin"``, ...), or None if it did not run."""
        return next((r for r in self.results if r.check == check), None)

    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.failed]

    def to_dict(self) -> dict:
        return {"wheel": str(self.wheel), "package": self.package, "ok": self.ok,
                "results": [r.to_dict() for r in self.results]}


@dataclass(frozen=True)
class VerifyContext:
    """What the checks compare a wheel against; build it with ``cuforge.verify.context_from``.

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
    ceiling: Ceiling | None = None   # the newest glibc its wheels may need (the glibc check)


def worst(statuses: Iterable[CheckStatus | str]) -> CheckStatus:
    """The most severe status: ``worst(["pass", "warn"]) == "warn"``; empty -> ``"pass"``."""
    return max((CheckStatus(s) for s in statuses), key=lambda s: s.severity,
               default=CheckStatus.PASS)


def merge(check: str, per_file: list[tuple[str, CheckResult]], *, empty: str) -> CheckResult:
    """Fold per-.so results of one check into one wheel-level result.

    The summary counts files by status; problem files are listed first, each with its detail.
    ``empty`` is the detail when the wheel has no .so at all.

    >>> merge("abi", [], empty="no shared objects").detail
    'no shared objects'
    """
    if not per_file:
        return CheckResult(check, CheckStatus.PASS, empty)
    # a file with nothing to check (skipped) does not hide the verdict on the others
    checked = [r.status for _, r in per_file if r.status is not CheckStatus.SKIPPED]
    status = worst(checked) if checked else CheckStatus.SKIPPED
    counts: dict[CheckStatus, int] = {}
    for _, r in per_file:
        counts[r.status] = counts.get(r.status, 0) + 1
    head = ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda kv: -kv[0].severity))
    by_severity = sorted(per_file, key=lambda item: -item[1].status.severity)
    if status is CheckStatus.PASS and len(per_file) == 1:
        return CheckResult(check, status, f"{by_severity[0][0]}: {by_severity[0][1].detail}")
    if status is CheckStatus.SKIPPED and len(per_file) == 1:
        name, only = by_severity[0]
        return CheckResult(check, status, f"skipped: {name}: {only.detail.removeprefix('skipped: ')}")
    first = by_severity[0]
    summary = (f"{len(per_file)} .so: all pass" if status is CheckStatus.PASS
               and not counts.get(CheckStatus.SKIPPED)
               else f"{first[0]}: {first[1].summary}" if status is not CheckStatus.PASS
               else f"{len(per_file)} .so: pass, {counts[CheckStatus.SKIPPED]} with nothing to check")
    lines = [f"{summary}  [{head}]"]
    for name, r in by_severity:
        body = r.detail.replace("\n", "\n    ")
        lines.append(f"  {name} [{r.status}]: {body}")
    return CheckResult(check, status, "\n".join(lines))


def _shows_reason(result: CheckResult) -> bool:
    return result.status is not CheckStatus.PASS or explains_pass(result.check)


def _cell(result: CheckResult | None, width: int) -> str:
    if result is None:
        return "[dim]-[/dim]"
    text = f"{result.status}: {result.reason}" if _shows_reason(result) and result.reason \
        else str(result.status)
    if _shows_reason(result) and len(text) > width:
        text = text[: width - 1] + "…"
    return f"[{result.status.style}]{_escape(text)}[/]"


def _escape(text: str) -> str:
    return text.replace("[", r"\[")


def render_table(reports: Iterable[WheelReport], *, width: int = 60) -> Table:
    """A rich Table: one row per wheel, one column per check; failures show their reason.
    A failed package says FAILED under its name; a passing one adds no line (the summary
    line counts them).

    >>> from rich.console import Console
    >>> t = render_table([WheelReport(Path("a.whl"), "a", [CheckResult("abi", "pass", "")])])
    >>> t.row_count
    1
    """
    reports = list(reports)
    extra = [c for r in reports for c in (x.check for x in r.results) if c not in CHECKS]
    columns = list(CHECKS) + ordered(dict.fromkeys(extra))
    from cuforge.core.console import table as make_table   # compact, folding: readable at 80 columns
    table = make_table("package", *columns, title="cuforge verify")
    table.show_lines = True
    for report in reports:
        name = _escape(report.package)
        cells = [_cell(report.result(c), width) for c in columns]
        table.add_row(name if report.ok else f"[bold red]{name}\nFAILED[/]", *cells)
    return table


def reports_to_json(reports: Iterable[WheelReport]) -> str:
    """A JSON document: ``{"ok": bool, "wheels": [WheelReport.to_dict(), ...]}``."""
    reports = list(reports)
    doc = {"ok": all(r.ok for r in reports), "wheels": [r.to_dict() for r in reports]}
    return json.dumps(doc, indent=2)


def verdict_line(package: str, results: Iterable[CheckResult], *, reason_width: int = 70) -> Text:
    """One line per package: each check's status, in the table's order, and the reason for
    every warn, skip or fail.

    >>> verdict_line("demo", [CheckResult("smoke", "skipped", "skipped: no GPU"),
    ...                       CheckResult("abi", "pass", "1 .so")]).plain
    'demo: abi pass · smoke skipped (no GPU)'
    """
    by_name = {r.check: r for r in results}
    line = Text(f"{package}: ", style="bold")
    for i, name in enumerate(ordered(by_name)):
        result = by_name[name]
        if i:
            line.append(" · ")
        line.append(f"{name} ")
        line.append(str(result.status), style=result.status.style)
        if _shows_reason(result) and result.reason:
            first = result.reason
            if len(first) > reason_width:
                first = first[: reason_width - 1] + "…"
            line.append(f" ({first})")
    return line


def outcome(report: WheelReport) -> CheckStatus:
    """A row's outcome: fail when a check failed, skipped when every check was skipped (a
    model row whose stack is not among the wheels), else pass (warnings included)."""
    if not report.ok:
        return CheckStatus.FAIL
    if report.results and all(r.status is CheckStatus.SKIPPED for r in report.results):
        return CheckStatus.SKIPPED
    return CheckStatus.PASS


def outcome_line(reports: Iterable[WheelReport]) -> str:
    """``"1 passed, 2 skipped (model:a: why; model:b: why)"``; failures first, named.

    >>> skip = WheelReport(Path("m.py"), "model:m", [CheckResult("smoke", "skipped", "skipped: no cumm")])
    >>> ok = WheelReport(Path("a.whl"), "a", [CheckResult("abi", "pass", "")])
    >>> outcome_line([ok, skip])
    '1 passed, 1 skipped (model:m: no cumm)'
    """
    by: dict[CheckStatus, list[WheelReport]] = {s: [] for s in CheckStatus}
    for report in reports:
        by[outcome(report)].append(report)
    parts = []
    if by[CheckStatus.FAIL]:
        parts.append(f"{len(by[CheckStatus.FAIL])} FAILED ("
                     + ", ".join(r.package for r in by[CheckStatus.FAIL]) + ")")
    if by[CheckStatus.PASS]:
        parts.append(f"{len(by[CheckStatus.PASS])} passed")
    if by[CheckStatus.SKIPPED]:
        why = "; ".join(f"{r.package}: {r.results[0].reason}" for r in by[CheckStatus.SKIPPED])
        parts.append(f"{len(by[CheckStatus.SKIPPED])} skipped ({why})")
    return ", ".join(parts) or "nothing verified"
