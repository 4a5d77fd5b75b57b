"""A recipe's ``[stress]`` table: a repeated, randomized GPU workload run on its wheel
(``cuforge verify --stress``, ``build --stress``, ``setup --stress``; cuforge.verify.stress)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cuforge.core.errors import ConfigError
from cuforge.core.project import Project
from cuforge.core.tomlfile import refuse_unknown_keys

STRESS_PREFIX = "stress_"


@dataclass(frozen=True)
class StressRule:
    """A recipe's ``[stress]``: a repeated, randomized GPU workload whose results its script
    checks (``cuforge verify --stress``; see ``cuforge.verify.stress``). The script follows
    the smoke protocol (0 pass, 77 skipped, else fail) and is ``smoke/stress_<name>.py``
    unless ``script`` names another. ``args`` go to the full run; ``short_args`` to the run
    under compute-sanitizer (``--sanitize``), which must stay short: memcheck slows kernels
    by 10-100x. ``why`` says which of the package's kernels sort, scan or hash."""

    script: str = ""
    args: tuple[str, ...] = ()
    short_args: tuple[str, ...] = ("--short",)
    timeout: float = 1800.0
    sanitize_timeout: float = 1800.0
    why: str = ""

    def path(self, project: Project, name: str) -> Path:
        return project.root / self.script if self.script else \
            project.smoke_dir / f"{STRESS_PREFIX}{name}.py"


STRESS_KEYS = {"script", "args", "short_args", "timeout", "sanitize_timeout", "why"}


def parse_stress(table: dict | None, where: str) -> StressRule | None:
    """Parse ``[stress]``; every mistake is a ConfigError naming the key."""
    if table is None:
        return None
    where = f"{where} [stress]"
    refuse_unknown_keys(table, STRESS_KEYS, where, "[stress]")
    for key in ("args", "short_args"):
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
            raise ConfigError(f"{where}: `{key}` must be a list of strings, not {value!r}")
    for key in ("timeout", "sanitize_timeout"):
        value = table.get(key, 1800)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ConfigError(f"{where}: `{key}` must be a number of seconds, not {value!r}")
    return StressRule(str(table.get("script", "")), tuple(table.get("args", ())),
                      tuple(table.get("short_args", ["--short"])),
                      float(table.get("timeout", 1800)),
                      float(table.get("sanitize_timeout", 1800)), str(table.get("why", "")))
