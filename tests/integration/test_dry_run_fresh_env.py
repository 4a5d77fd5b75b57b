"""A dry run before the combo's env exists prints the plan the build then follows: the same
commands, variables and keys as a dry run once the env is made (issue 42: the predictor fixed
the C++ ABI and took one nvidia/ dir, so a fresh dry run showed other include dirs and keys).

Slow: each case creates a real torch env (uv hard-links it from its cache, ~1 min here), for a
PyPI-toolkit combo and a system-toolkit one.
"""

from __future__ import annotations

import shutil

import pytest

from reliability_project import cuforge, make_project

pytestmark = pytest.mark.slow

SYSTEM_COMBO = """
[[combo]]
name = "3.11-cu130-system"
python = "3.11"
accel = "cu130"
torch = "2.14.1"
toolkit = "system"
"""


def plan_text(proj, combo: str) -> list[str]:
    """The dry run's plan from the wheel dir on: what the build will run, with its keys."""
    done = cuforge(proj, "build", "--combo", combo, "--only", "tinyext", "--dry-run")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# wheel dir:"))
    return lines[start:]


@pytest.mark.parametrize("combo", ["3.11-cu130", "3.11-cu130-system"])
def test_a_fresh_dry_run_is_the_plan_of_the_env_made_after_it(tmp_path, combo):
    if combo.endswith("system") and shutil.which("nvcc") is None:
        pytest.skip("no system CUDA toolkit (nvcc) on this machine")
    proj = make_project(tmp_path)
    with (proj / "envs" / "combos.toml").open("a") as table:
        table.write(SYSTEM_COMBO)
    before = plan_text(proj, combo)
    assert not (proj / ".state" / "envs").exists() or not any((proj / ".state" / "envs").iterdir())
    made = cuforge(proj, "shell", "--combo", combo, "--print-env", timeout=1200)
    assert made.returncode == 0, made.stderr[-2000:]
    assert "note: torch's CUDA wheels made" not in made.stderr   # accels.toml predicted them
    after = plan_text(proj, combo)
    assert any(line.startswith("# key ") for line in after)
    assert before == after
