"""``invoke matrix``: every combo with its torch, CUDA toolkit, arches and build order."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from cuforge.config.combos import ToolkitSource, load_combos
from cuforge.core.console import make_console, table
from cuforge.core.errors import CuforgeError
from cuforge.core.project import Project
from cuforge.config.recipes import load_recipes, build_order


def print_matrix(project: Project, console: Console | None = None) -> None:
    out = console or make_console()
    recipes = load_recipes(project)
    t = table("combo", "python", "torch", "CUDA", "arches", "build order",
              title="cuforge combos (nox session: build-<combo>)", wide=["build order"])
    for c in load_combos(project):
        try:
            order = Text(" → ".join(r.name for r in build_order(recipes, list(c.packages))))
        except CuforgeError as err:
            order = Text(str(err), style="red")
        toolkit = f"{c.accel.cuda} {'system' if c.toolkit is ToolkitSource.SYSTEM else 'PyPI'}"
        python = f"{c.python} ({c.interpreter})" if c.interpreter else c.python
        name = f"{c.id} ({c.target.machine})" if c.platform else c.id
        t.add_row(name, python, ", ".join(c.torch_versions), toolkit,
                  c.arches.torch().replace(";", " "), order)
    out.print(t)
    all_order = " → ".join(r.name for r in build_order(recipes, sorted(recipes)))
    out.print(Text(f"all recipes, in build order: {all_order}"))
