"""``invoke matrix``: every combo with its torch, CUDA toolkit, arches and build order."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from cuforge.config.combos import Combo, ToolkitSource, load_combos
from cuforge.core import jsonout
from cuforge.core.console import make_console, table
from cuforge.core.errors import CuforgeError
from cuforge.core.project import Project
from cuforge.config.recipes import load_recipes, build_order


def combo_row(combo: Combo, recipes: dict) -> dict:
    """One combo as data: what the table shows and ``matrix --json`` writes (docs/json.md)."""
    try:
        order, error = [r.name for r in build_order(recipes, list(combo.packages))], None
    except CuforgeError as err:
        order, error = None, str(err)
    return {"id": combo.id, "python": combo.python, "interpreter": combo.interpreter or None,
            "platform": combo.target_platform.machine if combo.platform else None,
            "torch": list(combo.torch_versions), "cuda": str(combo.accel.cuda),
            "toolkit": "system" if combo.toolkit is ToolkitSource.SYSTEM else "pypi",
            "accel": combo.accel.tag, "arches": combo.arches.torch(),
            "build_order": order, "error": error}


def print_matrix(project: Project, console: Console | None = None) -> None:
    out = console or make_console()
    recipes = load_recipes(project)
    rows = [combo_row(c, recipes) for c in load_combos(project)]
    all_order = [r.name for r in build_order(recipes, sorted(recipes))]
    jsonout.update(combos=rows, all_recipes=all_order)
    t = table("combo", "python", "torch", "CUDA", "arches", "build order",
              title="cuforge combos (nox session: build-<combo>)", wide=["build order"])
    for row in rows:
        order = (Text(" → ".join(row["build_order"])) if row["error"] is None
                 else Text(row["error"], style="red"))
        toolkit = f"{row['cuda']} {'system' if row['toolkit'] == 'system' else 'PyPI'}"
        python = f"{row['python']} ({row['interpreter']})" if row["interpreter"] else row["python"]
        name = f"{row['id']} ({row['platform']})" if row["platform"] else row["id"]
        t.add_row(name, python, ", ".join(row["torch"]), toolkit,
                  row["arches"].replace(";", " "), order)
    out.print(t)
    out.print(Text(f"all recipes, in build order: {' → '.join(all_order)}"))
