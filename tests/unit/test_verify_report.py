"""Report data model: merging per-.so results, JSON, the rich table."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from cuforge.verify.report import CheckResult, WheelReport, merge, render_table, reports_to_json, worst


def test_worst():
    assert worst(["pass", "skipped", "warn"]) == "warn"
    assert worst(["warn", "fail"]) == "fail"
    assert worst([]) == "pass"


def test_merge_puts_the_worst_file_first():
    merged = merge("fatbin", [("a.so", CheckResult("fatbin", "pass", "SASS sm_90")),
                              ("b.so", CheckResult("fatbin", "warn", "12.0: JIT\nmore"))],
                   empty="none")
    assert merged.status == "warn"
    assert merged.summary == "b.so: 12.0: JIT  [1 warn, 1 pass]"
    assert "  b.so [warn]: 12.0: JIT\n    more" in merged.detail


def test_merge_single_pass_and_empty():
    one = merge("abi", [("a.so", CheckResult("abi", "pass", "fine"))], empty="none")
    assert (one.status, one.detail) == ("pass", "a.so: fine")
    assert merge("abi", [], empty="no shared objects").detail == "no shared objects"


def test_report_ok_and_json():
    report = WheelReport(Path("x-1-py3-none-any.whl"), "x", [
        CheckResult("abi", "pass", ""), CheckResult("smoke", "skipped", "skipped: no GPU")])
    assert report.ok  # skipped is not a failure...
    doc = report.to_dict()
    assert doc["results"][1] == {"check": "smoke", "status": "skipped", "detail": "skipped: no GPU"}
    bad = WheelReport(Path("y.whl"), "y", [CheckResult("import", "fail", "crashed with SIGSEGV")])
    assert not bad.ok and bad.failures()[0].check == "import"
    assert json.loads(reports_to_json([report, bad]))["ok"] is False


def test_table_shows_reasons():
    report = WheelReport(Path("y.whl"), "spconv", [
        CheckResult("import", "fail", "crashed with SIGSEGV while importing spconv.pytorch\n..."),
        CheckResult("smoke", "skipped", "skipped: no GPU"), CheckResult("abi", "pass", "ok [x]")])
    console = Console(width=250, record=True, file=open("/dev/null", "w"))
    console.print(render_table([report]))
    text = console.export_text()
    assert "fail: crashed with SIGSEGV while importing spconv.pytorch" in text
    assert "skipped: no GPU" in text and "FAILED" in text


def test_merge_a_file_with_nothing_to_check_hides_no_verdict():
    nothing = CheckResult("fatbin", "skipped", "skipped: nothing to check: 0 kernel groups")
    ok = CheckResult("fatbin", "pass", "SASS sm_120; 3 kernel groups")
    both = merge("fatbin", [("a.so", ok), ("core_cc.so", nothing)], empty="-")
    assert both.status == "pass" and "1 with nothing to check" in both.summary
    alone = merge("fatbin", [("core_cc.so", nothing)], empty="-")
    assert (alone.status, alone.summary) == ("skipped", "skipped: core_cc.so: nothing to check: 0 kernel groups")
    bad = merge("fatbin", [("core_cc.so", nothing), ("b.so", CheckResult("fatbin", "fail", "x"))], empty="-")
    assert bad.status == "fail"
