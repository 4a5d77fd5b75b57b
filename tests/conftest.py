"""Shared test set-up.

Tests that need an interpreter with torch use ``$CUFORGE_TEST_TORCH_PYTHON``. When it is unset,
the session creates (once; later runs reuse it) the 3.11-cu130 combo env through cuforge itself
and points the variable there, so a fresh clone needs nothing installed by hand.
Set ``CUFORGE_TEST_NO_ENV=1`` to skip that (torch-dependent tests then skip).
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST_COMBO = "3.11-cu130"


def pytest_sessionstart(session) -> None:
    if os.environ.get("CUFORGE_TEST_TORCH_PYTHON") or os.environ.get("CUFORGE_TEST_NO_ENV"):
        return
    from cuforge.config.combos import select_combo
    from cuforge.core.project import find_project
    from cuforge.env.target import resolve
    from cuforge.env.venv import prepare

    project = find_project(ROOT)
    combo = select_combo(project, name=TEST_COMBO)
    env = prepare(project.state_dir, combo, resolve(project, combo),
                  log=project.state_dir / "logs" / "tests-env.log")
    os.environ["CUFORGE_TEST_TORCH_PYTHON"] = str(env.python)


def torch_python() -> Path | None:
    env = os.environ.get("CUFORGE_TEST_TORCH_PYTHON")
    return Path(env) if env else None


def pure_python_project(root: Path, name: str, body: str) -> Path:
    """A pure-Python setuptools project ``name`` at ``root`` (module ``name`` with dashes as
    underscores, holding ``body``): what the real-build tests build quickly."""
    mod = name.replace("-", "_")
    (root / mod).mkdir(parents=True)
    (root / mod / "__init__.py").write_text(textwrap.dedent(body))
    (root / "pyproject.toml").write_text(textwrap.dedent(f"""
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "{name}"
        version = "0.1"
        [tool.setuptools]
        packages = ["{mod}"]
        """))
    return root
