"""An interrupt that lands while a package is being verified stops its checks and publishes
nothing. A build thread used to go on verifying (its interpreters ran outside the runner's
reach) and then published the wheel after the user's Ctrl-C / SIGTERM; CI caught it when
verification got faster (tests/integration/test_multi_extension.py, one run in three).
A real build of the reliability project's tiny extension, a real smoke script that hangs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from reliability_project import alive, link_combo_env, make_project, manifest_lines

pytestmark = pytest.mark.slow

HANGING_SMOKE = """import os, sys, time
open(os.environ["SMOKE_PIDFILE"], "w").write(str(os.getpid()))
time.sleep(600)
"""


def test_sigterm_during_the_smoke_stops_it_and_publishes_nothing(tmp_path):
    proj = make_project(tmp_path)
    link_combo_env(proj)
    recipe = proj / "recipes" / "tinyext.toml"
    recipe.write_text(recipe.read_text().replace(
        "[source]", '[smoke]\nscript = "smoke/check_tinyext.py"\ngpu = false\n\n[source]', 1))
    (proj / "smoke").mkdir()
    (proj / "smoke" / "check_tinyext.py").write_text(HANGING_SMOKE)
    pidfile = tmp_path / "smoke.pid"
    env = {**os.environ, "CUFORGE_ROOT": str(proj), "CUFORGE_STATE": str(proj / ".state"),
           "CUFORGE_WHEELHOUSE": str(proj / "wh"), "SMOKE_PIDFILE": str(pidfile)}
    proc = subprocess.Popen([sys.executable, "-m", "cuforge", "build", "--combo", "3.11-cu130",
                             "--only", "tinyext"], env=env, cwd=proj, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600
    while not pidfile.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pidfile.exists(), proc.communicate()[1][-3000:]
    smoke = int(pidfile.read_text())
    proc.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-3000:]
    assert time.monotonic() - stopped < 15, "cuforge waited for the smoke to finish"
    assert not alive(smoke), "the smoke test still ran after cuforge stopped"
    assert not list((proj / "wh").rglob("*.whl")), "an interrupted build published its wheel"
    assert "interrupted" in err
    assert not [line for line in manifest_lines(proj) if line.get("status") == "compiled"]
