"""``runner.package_commands``: one package's commands in one scope (its log begun afresh with
cuforge's notes, the work dir's lock held by every command's supervisor, their lines to the
package's progress, a failure during an interrupt no verdict), with real commands."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cuforge.core.errors import BuildError
from cuforge.core.runner import Interrupted, Step, package_commands, resume, run, stop_all


def test_a_package_s_commands_share_its_log_its_lock_and_its_listener(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "demo.log"
    log.parent.mkdir()
    log.write_text("the last build's output\n")
    lines: list[str] = []
    lock = os.open(tmp_path / "demo.lock", os.O_CREAT | os.O_RDWR)
    try:
        with package_commands(log, holding=lock, on_line=lines.append,
                              notes=["4 of 8 jobs: memory", ""]):
            # the command's parent is its supervisor: it keeps the lock's descriptor open
            run(Step(("sh", "-c", "echo first; ls /proc/$PPID/fd")), log=log)
        run(Step(("sh", "-c", "echo after")), log=log)
    finally:
        os.close(lock)
    text = log.read_text()
    assert text.startswith("\n# 4 of 8 jobs: memory\n") and "last build" not in text
    assert lines[0].strip() == "first" and str(lock) in {ln.strip() for ln in lines[1:]}
    assert "after" in text and not any("after" in ln for ln in lines)   # the scope ended


def test_a_failure_once_an_interrupt_stops_the_commands_is_no_verdict(tmp_path: Path) -> None:
    log = tmp_path / "demo.log"
    with pytest.raises(BuildError, match="the compiler"), package_commands(log):
        raise BuildError("the compiler failed")
    stop_all()
    try:
        with pytest.raises(Interrupted, match="demo was not finished"), package_commands(log):
            raise BuildError("a command ended by the interrupt")
    finally:
        resume()
