"""Where a recipe's wheel meets the verification layer (``cuforge.verify``): its smoke script,
the package log's record of its checks, and the arches a wheel really embeds. The build
(``pipeline.gate``) and ``cuforge verify`` (``pipeline.verify_command``) use them."""

from __future__ import annotations

from pathlib import Path

from cuforge.core.project import Project
from cuforge.config.recipes import Recipe


def log_report(log: Path, report) -> None:
    """Every check's verdict and detail into the package's log: the console shows one word per
    check, and a passing smoke's message (what it compared, on which GPU) is evidence too."""
    with open(log, "a") as sink:
        sink.write(f"\n# verification of {report.wheel.name}\n")
        for r in report.results:   # for people: the words, the whole detail
            sink.write(f"{r.check}: {r.status}" + (f": {r.reason}" if r.detail else "")
                       + "".join(f"\n{line}" for line in r.detail.splitlines()[1:]) + "\n")


def smoke_script(project: Project, recipe: Recipe):
    """The recipe's smoke test (``smoke/smoke_<name>.py`` or its ``script``), None without one."""
    from cuforge.verify import SmokeScript
    path = recipe.smoke.path(project, recipe.name)
    return SmokeScript(path, recipe.smoke.gpu, recipe.smoke.requires) if path.is_file() else None
