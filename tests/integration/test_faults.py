"""Every phase survives a SIGKILL (``CUFORGE_FAULT=<point>``, see cuforge.core.faults).

One project walks through every point in build order: each run is killed at the next point,
so each run is also "the next run" of the previous kill and must get past the phase that was
killed (reusing what was complete); the last run, without a fault, finishes. After every kill:
no partial or unverified wheel in the wheelhouse, a manifest that parses line by line, and no
stale lock (the next run would hang; the timeout fails it). docs/reliability.md has the table.
Real sdist, real compile of a tiny C++ extension, a real uv env created by the test (uv's cache
makes that seconds); a chain rather than one project per point because every run pays for
importing torch (~5 s idle, far more on a loaded 2-core box).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from cuforge.core.faults import POINTS

from reliability_project import (COMBO_DIR, alive, assert_only_verified_wheels, build,
                                 link_combo_env, make_project, manifest_lines)

pytestmark = pytest.mark.slow

KILLED = -signal.SIGKILL


def _kill_at(proj: Path, point: str, **env: str) -> str:
    """One run that must die by SIGKILL at ``point``; then check the wreck. Returns stderr."""
    run = build(proj, env={"CUFORGE_FAULT": point, **env}, timeout=600)
    assert run.returncode == KILLED, (point, run.returncode, run.stderr[-3000:])
    assert_only_verified_wheels(proj)    # also parses every manifest line
    return run.stderr


def _gone(pid: int, wait: float = 10) -> bool:
    """``pid`` has exited (or is a zombie) within ``wait`` seconds: SIGKILL takes a moment."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.2)
    return False


def test_every_point_is_killed_and_the_next_run_recovers(tmp_path):
    proj = make_project(tmp_path)
    house = proj / "wh" / COMBO_DIR
    envs = proj / ".state" / "envs"
    work = proj / ".state" / "work"
    seen = []

    # env: killed after `uv venv`, before torch is installed: no stamp, a half-made venv
    _kill_at(proj, "env")
    seen.append("env")
    env_dir = next(envs.glob("3.11-cu130-*/"))
    assert (env_dir / "bin" / "python").exists() and not (env_dir / "cuforge-env.json").exists()

    # fetch: the next run detects the half env, recreates it, then dies after unpacking
    err = _kill_at(proj, "fetch")
    seen.append("fetch")
    assert "half-created" in err and (env_dir / "cuforge-env.json").is_file()
    src = next(work.glob("*/tinyext/src"))
    assert not list(src.parent.parent.glob(".src.stamp"))    # unsealed: the next run refetches

    # patch: dies with one of the two patched files written
    _kill_at(proj, "patch")
    seen.append("patch")
    assert "PATCHED = True" in (src / "tinyext" / "__init__.py").read_text()
    assert "cuforge: fixture patch" not in (src / "tinyext" / "_c.cpp").read_text()

    # compile: the half-patched tree is completed (patches are idempotent), the compiler runs
    # and is killed with cuforge (it sleeps after compiling; it runs in its own session)
    pidfile = tmp_path / "setup.pid"
    _kill_at(proj, "compile@20", TINYEXT_SLEEP="600", TINYEXT_PIDFILE=str(pidfile))
    seen.append("compile")
    assert "cuforge: fixture patch" in (src / "tinyext" / "_c.cpp").read_text()
    if pidfile.exists():     # reached the sleep (not guaranteed on a very loaded machine)
        assert _gone(int(pidfile.read_text()))

    # verify: a built wheel that is not verified stays out of the wheelhouse
    _kill_at(proj, "verify")
    seen.append("verify")
    assert not list(house.glob("*.whl"))

    # publish: killed after the manifest line, before the wheel is renamed in
    _kill_at(proj, "publish")
    seen.append("publish")
    assert not list(house.glob("*.whl")) and list(house.glob(".incoming-*"))
    assert [line["status"] for line in manifest_lines(proj)] == ["compiled"]

    # manifest: the next run rolls the publish forward (renames the wheel in), then dies while
    # rewriting the table
    _kill_at(proj, "manifest")
    seen.append("manifest")
    assert list(house.glob("*.whl")) and not list(house.glob(".incoming-*"))

    # and the last run, without a fault: nothing to rebuild, a clean table
    last = build(proj, timeout=600)
    assert last.returncode == 0 and "up to date" in last.stderr, last.stderr[-3000:]
    assert_only_verified_wheels(proj)
    assert [line["status"] for line in manifest_lines(proj)] == ["compiled"]
    assert "tinyext" in (house / "manifest.txt").read_text()
    assert not [p for p in house.iterdir() if p.name.startswith((".incoming-", ".table-"))]
    assert seen == list(POINTS)    # every point of cuforge.core.faults was exercised, in order


def test_cuforge_killed_alone_leaves_no_compiler_and_the_next_run_resumes(tmp_path):
    """The OOM killer's way: SIGKILL of the cuforge process only, while the build step runs
    a "compiler" in the tree and one that left it (``setsid``). Both are gone within 5 s of
    cuforge's death (the supervisor, cuforge.core.supervisor), and the next run builds."""
    proj = make_project(tmp_path)
    link_combo_env(proj)
    pidfile = tmp_path / "setup.pid"
    run = build(proj, env={"CUFORGE_FAULT": "compile@15:alone", "TINYEXT_SLEEP": "600",
                           "TINYEXT_ESCAPE": "1", "TINYEXT_PIDFILE": str(pidfile)}, timeout=600)
    assert run.returncode == KILLED, (run.returncode, run.stderr[-3000:])
    died = time.monotonic()
    if not pidfile.exists():
        pytest.skip("the build step did not reach its sleep within 15 s (a very loaded box)")
    escaped = Path(f"{pidfile}.escaped")
    pids = [int(pidfile.read_text())] + ([int(escaped.read_text())] if escaped.exists() else [])
    assert all(_gone(pid, wait=max(0.1, 5 - (time.monotonic() - died))) for pid in pids), \
        "a process of the killed build still ran 5 s after cuforge died"
    again = build(proj, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert_only_verified_wheels(proj)
