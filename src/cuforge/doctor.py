"""``invoke doctor``: what this machine has for each combo and recipe, and what is missing."""

from __future__ import annotations

import shutil

from rich.console import Console
from rich.table import Table

from . import venv
from .combos import load_combos
from .errors import CuforgeError
from .project import Project
from .recipes import load_recipes
from .syslibs import missing_headers
from .toolchain import default_jobs, find_system_toolkit


def run_doctor(project: Project) -> int:
    table = Table(title="cuforge doctor")
    for col in ("check", "status", "detail"):
        table.add_column(col)
    problems = 0

    def row(check: str, ok: bool, detail: str) -> None:
        nonlocal problems
        problems += not ok
        table.add_row(check, "[green]ok[/]" if ok else "[red]missing[/]", detail)

    try:
        row("uv", True, venv.find_uv())
    except CuforgeError as err:
        row("uv", False, str(err))
    for tool in ("g++", "git", "cmake", "ninja"):
        found = shutil.which(tool)
        row(tool, bool(found) or tool in ("cmake", "ninja"),
            found or "not on PATH (combo envs install cmake and ninja from PyPI)")
    row("parallel jobs", True, f"{default_jobs()} (min(cores, free memory / 2.5 GB))")
    for combo in load_combos(project):
        if combo.interpreter:
            found = shutil.which(combo.interpreter)
            row(f"combo {combo.id}: interpreter", bool(found), found or combo.interpreter)
            continue
        try:
            row(f"combo {combo.id}: python {combo.python}", True, str(venv.find_python(combo.python)))
        except CuforgeError as err:
            row(f"combo {combo.id}: python {combo.python}", False, str(err))
        ready = venv.is_ready(project.state_dir, combo)
        table.add_row(f"combo {combo.id}: env", "ok" if ready else "not yet",
                      "reused on next build" if ready else "created on first build")
        if combo.toolkit == "system":
            try:
                tk = find_system_toolkit(combo.accel.cuda)
                row(f"combo {combo.id}: system CUDA", True, f"{tk.version} at {tk.root}")
            except CuforgeError as err:
                row(f"combo {combo.id}: system CUDA", False, str(err))
    for recipe in load_recipes(project).values():
        missing = missing_headers(recipe)
        if recipe.system_headers:
            row(f"{recipe.name}: system headers", not missing,
                "found" if not missing else "apt-get install "
                + " ".join(sorted({h.debian for h in missing})))
    Console().print(table)
    return 0 if problems == 0 else 3
