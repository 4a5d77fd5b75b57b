"""Where a cuforge project lives: the directory holding envs/, recipes/, native/, patches/."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError


@dataclass(frozen=True)
class Project:
    root: Path

    @property
    def envs_dir(self) -> Path:
        return self.root / "envs"

    @property
    def recipes_dir(self) -> Path:
        return self.root / "recipes"

    @property
    def smoke_dir(self) -> Path:
        return self.root / "smoke"

    @property
    def patches_dir(self) -> Path:
        return self.root / "patches"

    @property
    def state_dir(self) -> Path:
        """Venvs, caches, staging and logs: everything cuforge may delete and recreate."""
        return Path(os.environ.get("CUFORGE_STATE", self.root / ".cuforge"))

    @property
    def wheelhouse(self) -> Path:
        return Path(os.environ.get("CUFORGE_WHEELHOUSE", self.root / "wheelhouse"))


def find_project(start: Path | None = None) -> Project:
    """The project at ``$CUFORGE_ROOT``, else the nearest parent of ``start`` with ``envs/``."""
    if env := os.environ.get("CUFORGE_ROOT"):
        root = Path(env).resolve()
        if not (root / "envs").is_dir():
            raise ConfigError(f"CUFORGE_ROOT={env} has no envs/ directory",
                              hint="point CUFORGE_ROOT at a cuforge checkout")
        return Project(root)
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "envs" / "combos.toml").is_file():
            return Project(candidate)
    raise ConfigError(f"no cuforge project (envs/combos.toml) at or above {here}",
                      hint="run from a cuforge checkout, or set CUFORGE_ROOT")
