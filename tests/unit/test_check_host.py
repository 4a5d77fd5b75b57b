"""The check host (issue 44): inside ``check_host.serving(python)`` every ``python -c`` check
is a child forked from one interpreter, and still a process of its own: a crash or a hang ends that child
only, with the same verdict a fresh interpreter gives."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from cuforge.verify import check_host
from cuforge.verify._proc import run_python

PY = Path(sys.executable)
PARENT = "import os; print(os.getppid())"


def test_checks_are_children_of_one_interpreter_while_served() -> None:
    fresh = {run_python(PY, ["-c", PARENT]).stdout for _ in range(2)}
    assert len(fresh) == 2                                 # each its own supervisor
    with check_host.serving(PY):
        parents = {run_python(PY, ["-c", PARENT]).stdout.strip() for _ in range(3)}
        assert len(parents) == 1
        (pid,) = parents
        assert Path(f"/proc/{pid}").exists()               # the host, alive between checks
    time.sleep(0.5)
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()


def test_a_hosted_check_keeps_argv_paths_exit_codes_and_output(tmp_path: Path) -> None:
    (tmp_path / "shipped.py").write_text("WHO = 'the wheel'\n")
    code = ("import sys, shipped; print(shipped.WHO, sys.argv[1:]); "
            "print('to stderr', file=sys.stderr); raise SystemExit(77)")
    with check_host.serving(PY):
        got = run_python(PY, ["-c", code, "a", "b"], paths=[tmp_path])
    assert got.returncode == 77
    assert got.stdout == "the wheel ['a', 'b']\n"
    assert got.stderr == "to stderr\n"


def test_a_crash_ends_its_child_only() -> None:
    with check_host.serving(PY):
        crashed = run_python(PY, ["-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"])
        after = run_python(PY, ["-c", "print('still here')"])
        raised = run_python(PY, ["-c", "raise ImportError('undefined symbol: _Z3foo')"])
    assert crashed.returncode == -11 and crashed.crashed
    assert "Segmentation fault" in crashed.stderr            # faulthandler, as PYTHONFAULTHANDLER
    assert after.returncode == 0 and after.stdout == "still here\n"
    assert raised.returncode == 1 and "ImportError: undefined symbol: _Z3foo" in raised.stderr


def test_a_hung_check_is_killed_with_what_it_started(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild"
    code = ("import subprocess, sys, time; "
            f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            f"open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    with check_host.serving(PY):
        started = time.monotonic()
        hung = run_python(PY, ["-c", code], timeout=3)
        took = time.monotonic() - started
    assert hung.timed_out and hung.returncode is None
    assert took < 10
    grandchild = int(pidfile.read_text())
    time.sleep(0.5)
    status = Path(f"/proc/{grandchild}/status")
    assert not status.exists() or "zombie" in status.read_text().lower()


def test_the_import_without_torch_has_a_host_without_the_loader_path(monkeypatch) -> None:
    """``plain_loader``: the dynamic loader read its path when the process started, so the plain
    checks need a host started without LD_LIBRARY_PATH (what a fresh venv has)."""
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/from-the-env")
    at_start = "print('LD_LIBRARY_PATH=' in open('/proc/self/environ').read())"
    with check_host.serving(PY):
        plain = run_python(PY, ["-c", at_start], plain_loader=True)
        loaded = run_python(PY, ["-c", at_start])
    assert plain.stdout == "False\n"
    assert loaded.stdout == "True\n"


def test_other_interpreters_and_runs_in_a_cwd_are_not_hosted(tmp_path: Path) -> None:
    with check_host.serving(PY):
        in_cwd = run_python(PY, ["-c", "import os; print(os.getcwd())"], cwd=tmp_path)
    assert in_cwd.stdout.strip() == str(tmp_path)
    assert check_host.pool_for(PY) is None          # the block is over
