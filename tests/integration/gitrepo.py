"""A throw-away git repository for tests that fetch a fixture tree through a recipe's own git
path: fixed identity, no user or system git config."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    """Run ``git -C repo args`` and return its stripped stdout."""
    who = {"NAME": "fixture", "EMAIL": "fixture@example.invalid"}
    env = {**os.environ, **{f"GIT_{role}_{k}": v for role in ("AUTHOR", "COMMITTER")
                            for k, v in who.items()},
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", "-C", str(repo), *args], env=env, check=True,
                          capture_output=True, text=True).stdout.strip()
