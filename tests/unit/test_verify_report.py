"""Report data model: merging per-.so results, JSON, the rich table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from cuforge.core.errors import WheelhouseError
from cuforge.publish.wheelhouse import Entry, Wheelhouse
from cuforge.verify.checklist import CHECKS, PREBUILT_MUST_PASS, TABLE, CheckStatus, ordered
from cuforge.verify.report import (CheckResult, WheelReport, merge, outcome_line, render_table,
                                   reports_to_json, verdict_line, worst)


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


# -- typed checks (issue 52 point 2, issue 50 point 3) -------------------------------------
def test_an_unknown_status_is_an_error_never_a_pass():
    """The console once parsed "status: detail" back and read an unknown word as a pass."""
    with pytest.raises(ValueError, match="'ok' is not a valid CheckStatus"):
        CheckResult("smoke", "ok", "looks fine")
    with pytest.raises(ValueError, match="'fine' is not a valid CheckStatus"):
        CheckResult.recorded("abi", "fine: 1 .so")
    assert CheckResult("abi", "fail", "x").status is CheckStatus.FAIL


def test_the_manifest_holds_structured_results_and_reads_old_lines(tmp_path):
    house = Wheelhouse(tmp_path)
    house.publish(None, Entry(package="new", status="skipped", checks={
        "smoke": CheckResult("smoke", "skipped", "skipped: no GPU")}))
    line = json.loads((tmp_path / "manifest.jsonl").read_text().splitlines()[0])
    assert line["checks"] == {"smoke": {"status": "skipped", "detail": "skipped: no GPU"}}
    old = {**line, "package": "old", "checks": {"abi": "pass: 1 .so: fine",
                                                 "smoke": "skipped: no GPU", "import": "pass"}}
    with open(tmp_path / "manifest.jsonl", "a") as f:
        f.write(json.dumps(old) + "\n")
    checks = house.latest()["old"].checks
    assert {n: (r.status, r.reason) for n, r in checks.items()} == {
        "abi": ("pass", "1 .so: fine"), "smoke": ("skipped", "no GPU"), "import": ("pass", "")}
    assert house.latest()["new"].checks["smoke"] == CheckResult("smoke", "skipped",
                                                                "skipped: no GPU")


def test_a_manifest_line_with_an_unknown_status_is_refused(tmp_path):
    line = Entry(package="odd", status="compiled").line()
    (tmp_path / "manifest.jsonl").write_text(
        line.replace('"checks": {}', '"checks": {"smoke": "looks fine: trust me"}') + "\n")
    with pytest.raises(WheelhouseError, match="line 1: 'looks fine' is not a valid"):
        Wheelhouse(tmp_path).entries()


def test_verdict_line_gives_a_reason_for_every_warn_and_skip() -> None:
    results = [CheckResult("smoke", "skipped", "skipped: no GPU"),
               CheckResult("pins", "pass", "pins match"),
               CheckResult("abi", "pass", "1 .so: no mismatch"),
               CheckResult("fatbin", "warn", "12.1: group #1: runs by PTX JIT from compute_120"),
               CheckResult("import", "pass", ""), CheckResult("cudart", "pass", ""),
               CheckResult("symbols", "fail", "undefined [c10::x]\nmore")]
    assert verdict_line("simple-knn", results).plain == (
        "simple-knn: abi pass · symbols fail (undefined [c10::x]) · cudart pass · "
        "fatbin warn (12.1: group #1: runs by PTX JIT from compute_120) · "
        "import pass · smoke skipped (no GPU) · pins pass")


def test_one_table_lists_the_checks():
    assert CHECKS == tuple(c.name for c in TABLE if c.per_wheel)
    # wheelsource rejects a prebuilt wheel on it
    assert "smoke" in PREBUILT_MUST_PASS and "pins" not in PREBUILT_MUST_PASS
    assert ordered(["upstream-tests", "checkout model", "pins", "abi"]) == [
        "abi", "pins", "upstream-tests", "checkout model"]


def test_a_verify_table_has_no_stray_ok_row():
    good = WheelReport(Path("a.whl"), "demo", [CheckResult("abi", "pass", "")])
    bad = WheelReport(Path("b.whl"), "other", [CheckResult("abi", "fail", "mismatch")])
    console = Console(width=200, record=True, file=open("/dev/null", "w"))
    console.print(render_table([good, bad]))
    lines = [ln.strip() for ln in console.export_text().splitlines()]
    assert "ok" not in lines and not any(ln.startswith("ok ") for ln in lines), lines
    assert any(ln.startswith("demo ") for ln in lines)


def test_the_summary_counts_skipped_rows_as_skipped_and_says_why():
    """verify --models with both model rows skipped said "all ok"."""
    wheel = WheelReport(Path("a.whl"), "cuforge-demo", [
        CheckResult("abi", "pass", ""), CheckResult("smoke", "skipped", "skipped: no GPU")])
    models = [WheelReport(Path(f"{m}.py"), f"model:{m}", [CheckResult(
        "smoke", "skipped", f"skipped: the {m} stack's spconv not among the wheels")])
        for m in ("ptv3_tiny", "milo_tiny")]
    assert outcome_line([wheel, *models]) == (
        "1 passed, 2 skipped (model:ptv3_tiny: the ptv3_tiny stack's spconv not among the "
        "wheels; model:milo_tiny: the milo_tiny stack's spconv not among the wheels)")
    broken = WheelReport(Path("b.whl"), "b", [CheckResult("import", "fail", "x")])
    assert outcome_line([broken, wheel]) == "1 FAILED (b), 1 passed"


def test_the_check_list_is_written_once_and_a_new_check_touches_six_files_at_most():
    """The checks were listed in report.py, console.py, gate.py and plan.py, and a result
    was compared with "fail" in 9 places: a new check touched ~12 files."""
    import re
    root = Path(__file__).resolve().parents[2]
    spelled = [p.relative_to(root).as_posix() for p in (root / "src" / "cuforge").rglob("*.py")
               if re.search(r'"abi",\s*"symbols"|abi, symbols, cudart', p.read_text())
               and p.name != "checklist.py"]
    assert spelled == [], spelled
    compared = [p.name for p in (root / "src" / "cuforge").rglob("*.py")
                if re.search(r'status [!=]= "(fail|pass|warn|skipped)"', p.read_text())]
    assert compared == [], compared
    doc = (root / "docs" / "adding-a-check.md").read_text()
    table = doc.split("| file | what goes there |")[1].split("\n\n")[0]
    files = re.findall(r"^\| `([^`]+)`", table, re.M)
    assert 0 < len(files) <= 6, files
    for name in files:   # each names a real place (the new check's own files: their folder)
        where = root / name
        assert where.parent.is_dir() if "<" in name else where.is_file(), name
