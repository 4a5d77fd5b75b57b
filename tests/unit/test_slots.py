"""The compile-slot pool with the real script and real processes: never more compilers at once
than slots, every command runs, exit statuses pass through, slots come back after a failure,
and without a pool the script only runs the command."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from cuforge.pipeline import slots

pytestmark = pytest.mark.skipif(not slots.available(), reason="needs mkfifo and dd")

# Each "compiler" records how many others were running when it started (a counter guarded by
# mkdir, which is atomic), holds its slot for a moment, then leaves.
FAKE_COMPILER = """
d={dir}
until mkdir "$d/lock" 2>/dev/null; do sleep 0.01; done
n=$(( $(cat "$d/running") + 1 )); echo $n > "$d/running"; echo $n >> "$d/seen"
rmdir "$d/lock"
sleep 0.3
until mkdir "$d/lock" 2>/dev/null; do sleep 0.01; done
echo $(( $(cat "$d/running") - 1 )) > "$d/running"
rmdir "$d/lock"
exit {status}
"""


def _start(script: Path, tmp: Path, status: int = 0) -> subprocess.Popen:
    body = FAKE_COMPILER.format(dir=tmp, status=status)
    return subprocess.Popen([str(script), "sh", "-c", body])


def test_never_more_compilers_than_slots_and_every_status_passes_through(tmp_path):
    (tmp_path / "running").write_text("0\n")
    script = slots.launcher(tmp_path / "state")
    with slots.pool(tmp_path / "state", 2):
        procs = [_start(script, tmp_path, status=3 if i == 0 else 0) for i in range(6)]
        codes = [p.wait(timeout=60) for p in procs]
        # the failed one gave its slot back: two more still run side by side
        again = [_start(script, tmp_path) for _ in range(2)]
        assert [p.wait(timeout=60) for p in again] == [0, 0]
    seen = [int(n) for n in (tmp_path / "seen").read_text().split()]
    assert codes == [3, 0, 0, 0, 0, 0]
    assert len(seen) == 8 and max(seen) == 2          # all ran, never three at once
    assert "CUFORGE_SLOTS" not in os.environ          # the pool's variable is gone after it


def test_without_a_pool_the_script_only_runs_the_command(tmp_path):
    script = slots.launcher(tmp_path / "state")
    env = {k: v for k, v in os.environ.items() if k != "CUFORGE_SLOTS"}
    started = time.monotonic()
    out = subprocess.run([str(script), "sh", "-c", "echo ran; exit 5"], env=env,
                         capture_output=True, text=True, timeout=30)
    assert (out.returncode, out.stdout) == (5, "ran\n")
    assert time.monotonic() - started < 5
