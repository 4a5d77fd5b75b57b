"""cuforge's own data tables (TOML): platforms, CUDA arches, drivers, torch's builds."""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources


@cache
def table(name: str) -> dict:
    """``data/<name>.toml``, read once."""
    return tomllib.loads(resources.files(__name__).joinpath(f"{name}.toml").read_text())
