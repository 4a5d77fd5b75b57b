"""``invoke matrix``: every combo with its torch, CUDA toolkit, arches and build order."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from .combos import load_combos
from .errors import CuforgeError
from .project import Project
from .recipes import load_recipes, plan


def print_matrix(project: Project) -> None:
    recipes = load_recipes(project)
    table = Table(title="cuforge combos", show_lines=True)
    for col in ("combo", "python", "torch", "CUDA toolkit", "default arches", "build order"):
        table.add_column(col)
    for c in load_combos(project):
        try:
            order = " -> ".join(r.name for r in plan(recipes, list(c.packages)))
        except CuforgeError as err:
            order = f"[red]{err}[/]"
        toolkit = (f"{c.accel.cuda} ({'system nvcc' if c.toolkit == 'system' else 'PyPI wheels'})")
        where = f" @ {c.interpreter}" if c.interpreter else ""
        table.add_row(f"build-{c.id}", c.python + where, ", ".join(c.torch_versions), toolkit,
                      c.arches.torch(), order)
    Console().print(table)
    all_order = " -> ".join(r.name for r in plan(recipes, sorted(recipes)))
    Console().print(f"all recipes, in build order: {all_order}")
