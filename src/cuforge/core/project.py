"""Where a cuforge project lives: the directory holding envs/, recipes/, native/, patches/.

Found, in this order: an explicit root (``--root``), ``$CUFORGE_ROOT``, the current directory or
a parent of it, the checkout the running cuforge package was imported from (an editable
install), and the copy of the project bundled inside an installed wheel. So ``cuforge patch
milo ~/MILo`` works from any directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cuforge.core.errors import ConfigError

MARKER = Path("envs") / "combos.toml"
BUNDLED = Path(__file__).parents[1] / "_project"    # the wheel's copy (pyproject: force-include)


@dataclass(frozen=True)
class Project:
    root: Path
    home: Path | None = None   # where state and wheels go when ``root`` is read-only (a wheel)
    wheel_root: Path | None = None   # --wheelhouse DIR: before $CUFORGE_WHEELHOUSE
    # config.recipes.Recipe objects made in memory by discovery (``setup --checkout`` of any
    # checkout): every layer reads them with recipes/ (``load_recipes``); core names no type
    # of a layer above it
    discovered: tuple[object, ...] = ()

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
    def stacks_dir(self) -> Path:
        return self.root / "stacks"

    @property
    def state_dir(self) -> Path:
        """Venvs, caches, staging and logs: everything cuforge may delete and recreate."""
        return Path(os.environ.get("CUFORGE_STATE", (self.home or self.root) / ".cuforge"))

    @property
    def wheelhouse(self) -> Path:
        if self.wheel_root is not None:
            return self.wheel_root
        return Path(os.environ.get("CUFORGE_WHEELHOUSE", (self.home or self.root) / "wheelhouse"))

    @property
    def wheelhouse_named_by(self) -> str:
        """Who chose the wheelhouse: ``--wheelhouse``, ``CUFORGE_WHEELHOUSE`` or "" (the
        default), so that an error about it names what the user actually set."""
        if self.wheel_root is not None:
            return "--wheelhouse"
        return "CUFORGE_WHEELHOUSE" if os.environ.get("CUFORGE_WHEELHOUSE") else ""


def _is_project(path: Path) -> bool:
    return (path / MARKER).is_file()


def _user_home() -> Path:
    """Writable home for an installed (wheel) cuforge: ``$XDG_DATA_HOME/cuforge``."""
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "cuforge"


def find_project(start: Path | None = None, *, root: Path | str | None = None) -> Project:
    """The project at ``root``, else ``$CUFORGE_ROOT``, else the nearest parent of ``start``
    (default: the current directory) with ``envs/combos.toml``, else the checkout or wheel
    this package came from. Raises ConfigError naming the fix when there is none."""
    for given, name in ((root, "--root"), (os.environ.get("CUFORGE_ROOT"), "CUFORGE_ROOT")):
        if given:
            path = Path(given).expanduser().resolve()
            if not _is_project(path):
                raise ConfigError(f"{name}={given} is not a cuforge project (no {MARKER})",
                                  hint=f"point {name} at a cuforge checkout, or drop it to use "
                                       "the one cuforge was installed from")
            return Project(path)
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if _is_project(candidate):
            return Project(candidate)
    checkout = Path(__file__).resolve().parents[3]    # <checkout>/src/cuforge/core/project.py
    if _is_project(checkout):
        return Project(checkout)
    if _is_project(BUNDLED):
        return Project(BUNDLED, home=_user_home())
    raise ConfigError(f"no cuforge project (envs/combos.toml) at or above {here}, and this "
                      f"cuforge ({Path(__file__).parents[1]}) carries none",
                      hint="pass --root PATH or set CUFORGE_ROOT to a cuforge checkout, or "
                           "reinstall cuforge from its checkout (`pip install -e .`)")
