"""No compiler outlives cuforge, however it dies (docs/reliability.md, "No compiler outlives
cuforge"). Real processes: a small driver runs one step through ``cuforge.core.runner`` - a
"build" whose compiler stays in its process group and a second one that leaves it with
``setsid`` (as a daemonised tool does) - and the test kills the driver the way each death
happens. Within 5 s neither "compiler" may be left. The full-build case (cuforge killed alone
by ``CUFORGE_FAULT=compile@...:alone``) is in test_faults.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reliability_project import alive

SRC = Path(__file__).resolve().parents[2] / "src"

DRIVER = """
import sys
from pathlib import Path
from cuforge.core.runner import Step, run
pids = Path(sys.argv[1])
script = f"setsid sleep 301 & echo $! > {pids}.escaped; sleep 302 & echo $! > {pids}.group; wait"
try:
    run(Step(("sh", "-c", script)))
except KeyboardInterrupt:
    sys.exit(130)
"""


def _as_from_a_terminal() -> None:
    """The driver gets the signal dispositions of a command typed at a terminal. A test run
    started under ``nohup`` or with ``&`` hands SIGHUP/SIGINT down as ignored, and an ignoring
    driver would not die of the signal this test sends."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_driver(tmp_path: Path) -> tuple[subprocess.Popen, list[int]]:
    pids = tmp_path / "pids"
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(pids)], start_new_session=True,
                              env={**os.environ, "PYTHONPATH": str(SRC)},
                              preexec_fn=_as_from_a_terminal)
    deadline = time.monotonic() + 30
    files = [Path(f"{pids}.escaped"), Path(f"{pids}.group")]
    while not all(f.exists() and f.read_text().strip() for f in files):
        assert time.monotonic() < deadline and driver.poll() is None, "the step did not start"
        time.sleep(0.05)
    compilers = [int(f.read_text()) for f in files]
    assert all(alive(p) for p in compilers)
    return driver, compilers


def _kill_driver_alone(driver: subprocess.Popen) -> None:
    os.kill(driver.pid, signal.SIGKILL)        # the OOM killer picks one process


def _kill_driver_group(driver: subprocess.Popen) -> None:
    os.killpg(driver.pid, signal.SIGKILL)      # `kill -9 -PGID`, a closed session's hard end


def _signal(sig: int):
    return lambda driver: os.kill(driver.pid, sig)


DEATHS = {
    "sigkill-alone": _kill_driver_alone,
    "sigkill-group": _kill_driver_group,
    "sigterm": _signal(signal.SIGTERM),
    "sighup": _signal(signal.SIGHUP),           # the terminal closed
    "ctrl-c": lambda d: os.killpg(d.pid, signal.SIGINT),   # the terminal's foreground group
}


@pytest.mark.parametrize("death", list(DEATHS))
def test_no_compiler_is_left_5_s_after_cuforge_dies(tmp_path, death):
    driver, compilers = _start_driver(tmp_path)
    DEATHS[death](driver)
    driver.wait(timeout=30)
    deadline = time.monotonic() + 5
    while any(alive(p) for p in compilers) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [p for p in compilers if alive(p)]
    for pid in left:                           # do not leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert not left, f"{death}: {len(left)} of the step's processes still ran after 5 s"


def test_a_normal_end_keeps_the_exit_status_and_output(tmp_path):
    from cuforge.core.errors import BuildError
    from cuforge.core.runner import Step, run
    assert run(Step(("sh", "-c", "echo hello; exit 0"))) == "hello\n"
    with pytest.raises(BuildError, match="exit 3"):
        run(Step(("sh", "-c", "exit 3")))
    with pytest.raises(BuildError, match="command not found"):
        run(Step(("no-such-compiler-here",)))


CHECK_DRIVER = """
import sys
from pathlib import Path
from cuforge.verify._proc import run_python
pid = Path(sys.argv[1])
code = f"import os, time; open({str(pid)!r}, 'w').write(str(os.getpid())); time.sleep(303)"
try:
    run_python(Path(sys.executable), ["-c", code], timeout=600)
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.parametrize("death", ["sigkill-alone", "sigterm", "ctrl-c"])
def test_no_check_interpreter_is_left_5_s_after_cuforge_dies(tmp_path, death):
    """Verification's interpreters (an import check, a smoke test; under emulation each is a
    QEMU process) end with cuforge too: one emulated import check once ran on after a SIGKILL
    of cuforge alone, reparented to init."""
    pid_file = tmp_path / "check.pid"
    driver = subprocess.Popen([sys.executable, "-c", CHECK_DRIVER, str(pid_file)],
                              start_new_session=True, preexec_fn=_as_from_a_terminal,
                              env={**os.environ, "PYTHONPATH": str(SRC)})
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text().strip()):
        assert time.monotonic() < deadline and driver.poll() is None, "the check did not start"
        time.sleep(0.05)
    check = int(pid_file.read_text())
    assert alive(check)
    DEATHS[death](driver)
    driver.wait(timeout=30)
    deadline = time.monotonic() + 5
    while alive(check) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = alive(check)
    if left:
        os.kill(check, signal.SIGKILL)
    assert not left, f"{death}: the check's interpreter still ran 5 s after cuforge died"
