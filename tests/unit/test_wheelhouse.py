import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from dataclasses import replace
from pathlib import Path

from cuforge.core.digest import sha256_of

from cuforge.publish.wheelhouse import Entry, Wheelhouse
from cuforge.verify.report import CheckResult


def _wheel(path: Path, payload: bytes) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("pkg/__init__.py", payload)
    return path


def test_publish_writes_wheel_jsonl_and_table(tmp_path):
    house = Wheelhouse(tmp_path / "wh")
    wheel = _wheel(tmp_path / "demo-0.1-cp311-cp311-linux_x86_64.whl", b"x = 1\n")
    house.publish(wheel, Entry(package="demo", status="compiled", version="0.1", wheel=wheel.name,
                               wheel_sha256=sha256_of(wheel),
                               arches_embedded={"sass": ["120", "121"], "ptx": ["121"]}))
    house.publish(None, Entry(package="flash-attn", status="skipped", reason="no arch"))
    assert (tmp_path / "wh" / wheel.name).read_bytes() == wheel.read_bytes()
    lines = [json.loads(l) for l in (tmp_path / "wh" / "manifest.jsonl").read_text().splitlines()]
    assert [l["status"] for l in lines] == ["compiled", "skipped"]
    assert lines[0]["arches_embedded"] == {"sass": ["120", "121"], "ptx": ["121"]}
    table = (tmp_path / "wh" / "manifest.txt").read_text()
    assert "compiled  demo" in table and "skipped   flash-attn" in table and "no arch" in table
    assert not [p for p in (tmp_path / "wh").iterdir() if p.name.startswith(".incoming")]


def test_table_shows_the_upstream_suite_under_its_wheel(tmp_path):
    house = Wheelhouse(tmp_path / "wh")
    wheel = _wheel(tmp_path / "demo-0.1-cp311-cp311-linux_x86_64.whl", b"x = 1\n")
    entry = Entry(package="demo", status="compiled", version="0.1", wheel=wheel.name,
                  wheel_sha256=sha256_of(wheel), checks={"import": "pass"})
    house.publish(wheel, entry)
    assert "upstream tests" not in (tmp_path / "wh" / "manifest.txt").read_text()
    suite = CheckResult("upstream-tests", "pass", "2770 passed, 30 skipped in 10.63s (12.0 s)")
    house.publish(None, replace(entry, checks={**entry.checks, suite.check: suite}))
    rows = (tmp_path / "wh" / "manifest.txt").read_text().splitlines()
    assert rows[1].startswith("compiled  demo")
    assert rows[2].strip() == "upstream tests: pass: 2770 passed, 30 skipped in 10.63s (12.0 s)"


WRITER = r"""
import sys, zipfile
from pathlib import Path
from cuforge.core.digest import sha256_of
from cuforge.publish.wheelhouse import Entry, Wheelhouse
from cuforge.verify.report import CheckResult
house = Wheelhouse(Path(sys.argv[1]))
tag = sys.argv[2]
for i in range(100000):
    w = Path(sys.argv[3]) / f"pkg{tag}-{i % 3}.0-py3-none-any.whl"
    with zipfile.ZipFile(w, "w") as zf:
        zf.writestr("a.py", "x" * (200000 + i))   # big enough that copies take a while
    house.publish(w, Entry(package=f"pkg{tag}", status="compiled", wheel=w.name,
                           wheel_sha256=sha256_of(w), reason="r" * 5000))
"""


def test_concurrent_and_killed_writers_leave_only_whole_lines_and_wheels(tmp_path):
    """Two writers publish concurrently and are SIGKILLed mid-stream: every manifest line
    parses, and every wheel in the wheelhouse is complete (its zip reads)."""
    wh = tmp_path / "wh"
    procs = []
    for tag in ("a", "b"):
        scratch = tmp_path / tag
        scratch.mkdir()
        procs.append(subprocess.Popen([sys.executable, "-c", WRITER, str(wh), tag, str(scratch)]))
    time.sleep(3)
    for p in procs:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    lines = (wh / "manifest.jsonl").read_text().splitlines()
    assert len(lines) > 4
    for line in lines:
        json.loads(line)   # no torn or interleaved line
    for wheel in wh.glob("*.whl"):
        with zipfile.ZipFile(wheel) as zf:
            assert zf.testzip() is None
    latest = Wheelhouse(wh).latest()
    assert set(latest) == {"pkga", "pkgb"}


def test_terminated_build_leaves_no_orphaned_children(tmp_path):
    """SIGTERM to cuforge stops the whole child process tree (no nvcc left writing files)."""
    script = (
        "import sys\n"
        "from cuforge.core.runner import Step, run\n"
        "from cuforge.cli import main\n"
        "import signal\n"
        "from cuforge import cli\n"
        "signal.signal(signal.SIGTERM, cli._interrupt)\n"
        f"run(Step(('sh', '-c', 'sleep 300 & echo $! > {tmp_path}/child; wait')))\n")
    proc = subprocess.Popen([sys.executable, "-c", script])
    for _ in range(100):
        if (tmp_path / "child").exists() and (tmp_path / "child").read_text().strip():
            break
        time.sleep(0.1)
    child = int((tmp_path / "child").read_text())
    os.kill(proc.pid, signal.SIGTERM)
    proc.wait(timeout=20)
    time.sleep(0.5)
    try:
        os.kill(child, 0)
        alive = open(f"/proc/{child}/stat").read().split()[2] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        alive = False
    assert not alive, "the grandchild `sleep` survived cuforge's termination"


def test_runtime_requirements_are_read_from_the_wheel(tmp_path):
    from cuforge.publish.wheelmeta import wheel_requirements
    wheel = tmp_path / "torch_sparse-0.6.18-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("torch_sparse-0.6.18.dist-info/METADATA",
                    "Metadata-Version: 2.1\nName: torch_sparse\nVersion: 0.6.18\n"
                    "Requires-Dist: scipy\nRequires-Dist: pytest ; extra == \"test\"\n"
                    "Requires-Dist: pywin32 ; sys_platform == \"win32\"\n")
    assert wheel_requirements(wheel) == ["scipy"]


def test_a_wheel_altered_after_publishing_is_refused_for_install(tmp_path):
    import pytest

    from cuforge.core.errors import VerifyError
    house = Wheelhouse(tmp_path / "wh")
    wheel = _wheel(tmp_path / "dep-1.0-py3-none-any.whl", b"x = 1\n")
    entry = house.publish(wheel, Entry(package="dep", status="compiled", wheel=wheel.name,
                                       wheel_sha256=sha256_of(wheel)))
    assert house.verified(entry) == tmp_path / "wh" / wheel.name
    _wheel(tmp_path / "wh" / wheel.name, b"x = 2\n")      # swapped behind cuforge's back
    with pytest.raises(VerifyError, match="changed after it was verified"):
        house.verified(entry)


def test_recover_rolls_a_written_line_forward_and_drops_an_unlisted_copy(tmp_path):
    house = Wheelhouse(tmp_path / "wh")
    wheel = _wheel(tmp_path / "a-1.0-py3-none-any.whl", b"a = 1\n")
    house.dir.mkdir(parents=True)
    # a publish killed after its line: the complete copy waits under its hidden name
    (house.dir / f".incoming-{wheel.name}.part").write_bytes(wheel.read_bytes())
    house._append(Entry(package="a", status="compiled", wheel=wheel.name,
                        wheel_sha256=sha256_of(wheel)))
    # a publish killed before its line, and a torn last line (power loss)
    (house.dir / ".incoming-b-1.0-py3-none-any.whl.part").write_bytes(b"partial")
    with open(house.dir / "manifest.jsonl", "a") as f:
        f.write('{"package": "c", "sta')
    house.recover()
    assert (house.dir / wheel.name).read_bytes() == wheel.read_bytes()
    assert not list(house.dir.glob(".incoming-*"))
    assert [e.package for e in house.entries()] == ["a"]
    assert "a-1.0-py3-none-any.whl" in (house.dir / "manifest.txt").read_text()


def test_table_columns_stay_in_line_with_a_long_version(tmp_path):
    """A version longer than its column (a wheel's +cu130torch2.14.1 label) widens the column
    for every row: the arches and wheel columns start at one offset in each row."""
    house = Wheelhouse(tmp_path / "wh")
    for name, version in (("demo", "0.1"), ("spconv", "2.3.8+cu130torch2.14.1.post20261201")):
        wheel = _wheel(tmp_path / f"{name}-0.1-cp311-cp311-linux_x86_64.whl", b"x = 1\n")
        house.publish(wheel, Entry(package=name, status="compiled", version=version,
                                   wheel=wheel.name, wheel_sha256=sha256_of(wheel),
                                   arches_embedded={"sass": ["120"], "ptx": ["121"]}))
    rows = (tmp_path / "wh" / "manifest.txt").read_text().splitlines()
    assert len({row.index(" 120 |") for row in rows[1:]}) == 1, rows
    assert len({row.rindex(" ") for row in rows}) == 1, rows   # the wheel column
