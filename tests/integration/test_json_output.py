"""`--json` as a program reads it (issue 50, point 4): each command run for real, its stdout
parsed whole with json.loads, the keys docs/json.md lists present, the text for people on
stderr; an error keeps its exit code and is a document too."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_up_to_date import project  # noqa: F401  (the tinyext project: a fixture)

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "json.md").read_text()


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("CUFORGE_QUIET", "COLUMNS")}
    return subprocess.run([sys.executable, "-m", "cuforge", *args], capture_output=True,
                          text=True, cwd=ROOT, env={**clean, **env}, timeout=300)


def documented(section: str, table: int = 0) -> list[str]:
    """The keys of one table of docs/json.md's ``## <section>``."""
    body = DOC.split(f"\n## {section}\n")[1].split("\n## ")[0]
    tables = re.findall(r"(?:^\|.*\|\n)+", body, flags=re.M)
    return re.findall(r"^\| `([a-z_]+)` \|", tables[table], flags=re.M)


def _document(proc: subprocess.CompletedProcess, command: str, section: str) -> dict:
    """stdout is one JSON document with the common keys and the section's."""
    doc = json.loads(proc.stdout)   # nothing else on stdout
    assert doc["command"] == command and doc["exit_code"] == proc.returncode, doc
    for key in documented("Every document") + documented(section):
        assert key in doc, (key, sorted(doc))
    return doc


def test_the_doc_lists_keys_for_every_section():
    assert {"schema_version", "error", "exit_code"} <= set(documented("Every document"))
    assert documented("Every document", 1) == ["kind", "message", "hint", "exit_code"]
    for section in ("matrix", "doctor", "build --dry-run", "build", "setup --dry-run and setup",
                    "verify"):
        assert documented(section), section


def test_matrix_json():
    proc = _cli("matrix", "--json")
    doc = _document(proc, "matrix", "matrix")
    assert doc["schema_version"] == 1 and doc["ok"] and doc["error"] is None
    first = doc["combos"][0]
    assert {"id", "torch", "cuda", "arches", "build_order", "toolkit"} <= set(first)
    assert "cuforge-demo" in doc["all_recipes"]
    assert "cuforge combos" in proc.stderr and first["id"] in proc.stderr   # the table


def test_doctor_json_keeps_the_exit_code(tmp_path: Path):
    plain = _cli("doctor", CUFORGE_WHEELHOUSE=str(tmp_path / "wh"))
    proc = _cli("doctor", "--json", CUFORGE_WHEELHOUSE=str(tmp_path / "wh"))
    assert proc.returncode == plain.returncode in (0, 3), proc.stderr
    doc = _document(proc, "doctor", "doctor")
    assert doc["ok"] is (proc.returncode == 0)
    assert {"check", "status", "detail"} <= set(doc["checks"][0])
    assert "cuforge doctor" in proc.stderr and "memory / jobs" in proc.stderr


def test_build_dry_run_json_and_the_last_build_here(tmp_path: Path):
    """The dry run's plan as data; the text on stderr; and (point 6) how long the last build
    of the package took in this wheelhouse, from its manifest."""
    from cuforge.publish.wheelhouse import Entry, Wheelhouse
    wh = tmp_path / "wh"
    first = _document(_cli("build", "--dry-run", "--json", CUFORGE_WHEELHOUSE=str(wh)),
                      "build", "build --dry-run")
    (demo,) = first["packages"]
    assert demo["name"] == "cuforge-demo" and demo["last_build_seconds"] is None
    assert demo["commands"] and all(isinstance(c["argv"], list) for c in demo["commands"])
    Wheelhouse(Path(first["wheel_dir"])).publish(None, Entry(
        "cuforge-demo", "compiled", build_seconds=72.4, time="2026-12-05T10:00:00+00:00"))
    proc = _cli("build", "--dry-run", "--json", CUFORGE_WHEELHOUSE=str(wh))
    doc = _document(proc, "build", "build --dry-run")
    assert doc["packages"][0]["last_build_seconds"] == 72.4
    assert proc.stderr.startswith("# dry run: combo "), proc.stderr[:300]
    assert "# last build here: 1 min 12 s (2026-12-05T10:00:00+00:00)" in proc.stderr
    plain = _cli("build", "--dry-run", CUFORGE_WHEELHOUSE=str(wh))   # the same text, on stdout
    assert "# last build here: 1 min 12 s" in plain.stdout


def test_setup_dry_run_json(tmp_path: Path):
    checkout = ROOT / "tests" / "fixtures" / "upstream" / "pointcept"
    proc = _cli("setup", "pointcept", "--checkout", str(checkout), "--venv",
                str(tmp_path / "venv"), "--dry-run", "--json",
                CUFORGE_WHEELHOUSE=str(tmp_path / "wh"))
    doc = _document(proc, "setup", "setup --dry-run and setup")
    assert doc["dry_run"] is True and doc["stack"] == "pointcept" and "spconv" in doc["missing"]
    assert "to_build" in doc and doc["venv_exists"] is False
    assert "cuforge setup pointcept (dry run)" in proc.stderr
    assert not (tmp_path / "venv").exists()


def test_an_error_keeps_its_exit_code_and_is_a_document():
    plain = _cli("build", "--dry-run", "--only", "no-such-package")
    proc = _cli("build", "--dry-run", "--only", "no-such-package", "--json")
    assert proc.returncode == plain.returncode == 2
    doc = _document(proc, "build", "Every document")
    assert doc["ok"] is False
    error = doc["error"]
    assert set(error) == set(documented("Every document", 1)), error
    assert error["kind"] == "configuration error" and error["exit_code"] == 2
    assert "no-such-package" in error["message"] and "fix:" not in error["message"]
    assert error["hint"] and "cuforge-demo" in error["hint"]
    assert "cuforge: configuration error:" in proc.stderr   # the line people read, as before


@pytest.mark.slow   # needs the 3.11-cu130 env (made once, hard-linked from uv's cache)
def test_verify_json(tmp_path: Path):
    from test_command_line import _house_with_a_wheel
    house = _house_with_a_wheel(tmp_path)
    proc = _cli("verify", str(house), "--combo", "3.11-cu130", "--json")
    doc = _document(proc, "verify", "verify")
    assert proc.returncode in (0, 7) and doc["verified_wheels"] == 1
    (report,) = doc["wheels"]
    assert report["package"] == "demo" and {r["check"] for r in report["results"]} >= {
        "abi", "fatbin", "import", "manifest"}
    assert "cuforge verify" in proc.stderr and "verified 1 wheel in " in proc.stderr


@pytest.mark.slow   # a real build of a tiny C++ extension in the 3.11-cu130 env (seconds)
def test_a_real_build_with_json_and_its_progress(project, tmp_path: Path, monkeypatch):
    """``build -v --json`` streams the compiler's output, and still stdout is one document:
    the children's output goes to stderr. Each package's build starts with its last build
    time here, and the piped heartbeat says what its counts count (point 6)."""
    from test_up_to_date import _build
    monkeypatch.setenv("CUFORGE_HEARTBEAT_S", "0.5")
    wh = tmp_path / "wh"
    first = _build(project, wh, "-v", "--json")
    doc = _document(first, "build", "build")
    assert first.returncode == 0 and doc["dry_run"] is False, first.stderr[-3000:]
    (pkg,) = doc["packages"]
    assert pkg["name"] == "tinyext" and pkg["result"] == "compiled" and pkg["seconds"] > 0
    assert Path(pkg["wheel"]).is_file() and Path(pkg["log"]).is_file()
    assert "; no earlier build of it here" in first.stderr, first.stderr[-3000:]
    assert "_c.cpp" in first.stderr   # -v: the compiler's lines, on stderr
    again = _build(project, wh, "--rebuild")
    assert f"; its last build here took {pkg['seconds']:.1f} s" in again.stderr, \
        again.stderr[-3000:]
    beats = [ln for ln in again.stderr.splitlines() if ln.startswith("... still running: tinyext")]
    assert any(re.search(r"last build here [\d.]+ s\); 0/1 packages done$", ln) for ln in beats), \
        beats
