"""An interrupt that lands while a package is being verified stops its checks and publishes
nothing. A build thread used to go on verifying (its interpreters ran outside the runner's
reach) and then published the wheel after the user's Ctrl-C / SIGTERM; CI caught it when
verification got faster (tests/integration/test_multi_extension.py, one run in three).
Nor does it record a verdict: the stopped check "crashed with SIGTERM", and the build wrote
``FAILED tinyext ... failed verification`` into the manifest, which doctor then reported for
a good wheel (issue 43). The same for a check interpreter killed from outside.
A real build of the reliability project's tiny extension, a real smoke script that hangs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from reliability_project import COMBO_DIR, alive, link_combo_env, make_project, manifest_lines

pytestmark = pytest.mark.slow

HANGING_SMOKE = """import os, sys, time
open(os.environ["SMOKE_PIDFILE"], "w").write(str(os.getpid()))
time.sleep(600)
"""


def _as_from_a_terminal() -> None:
    """Default dispositions: a test run under ``nohup`` or ``&`` hands SIGINT down ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _build_until_the_smoke_runs(tmp_path):
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
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=_as_from_a_terminal)
    deadline = time.monotonic() + 600
    while not (pidfile.exists() and pidfile.read_text()) and proc.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pidfile.exists(), proc.communicate()[1][-3000:]
    return proj, proc, int(pidfile.read_text())


def _nothing_recorded(proj, err: str) -> None:
    assert not list((proj / "wh").rglob("*.whl")), "an interrupted build published its wheel"
    assert "interrupted" in err, err[-3000:]
    lines = manifest_lines(proj)
    assert not [line for line in lines if line.get("status") == "compiled"]
    assert not [line for line in lines if line.get("status") == "FAILED"], lines
    text = proj / "wh" / COMBO_DIR / "manifest.txt"
    assert not text.exists() or "FAILED" not in text.read_text(), text.read_text()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_a_signal_during_the_smoke_stops_it_and_records_nothing(tmp_path, sig):
    proj, proc, smoke = _build_until_the_smoke_runs(tmp_path)
    proc.send_signal(sig)
    stopped = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-3000:]
    assert time.monotonic() - stopped < 15, "cuforge waited for the smoke to finish"
    assert not alive(smoke), "the smoke test still ran after cuforge stopped"
    _nothing_recorded(proj, err)


def test_a_killed_check_is_no_verdict_on_the_wheel(tmp_path):
    """The smoke's interpreter is killed from outside (``kill PID``, a session ending): that
    says nothing about the wheel; the build stops as interrupted and records nothing."""
    proj, proc, smoke = _build_until_the_smoke_runs(tmp_path)
    os.kill(smoke, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    _nothing_recorded(proj, err)
