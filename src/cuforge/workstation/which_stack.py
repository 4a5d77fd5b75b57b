"""Which stack ``cuforge setup`` serves a checkout with: the one named; else the known stack
whose ``checkout_marker`` the checkout has (MILo's ``milo/``, Pointcept's ``pointcept/``);
else the stack discovery makes of the checkout (``cuforge.discovery``), whose in-memory
recipes the project then carries, so every later step reads them as it reads recipes/."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from rich.console import Console
from rich.text import Text

from cuforge.config.recipes import Recipe
from cuforge.config.stacks import Stack, available_stacks, load_stack
from cuforge.core.errors import ConfigError, NothingToDo
from cuforge.core.project import Project
from cuforge.discovery.fixes import FieldFix, field_fixes
from cuforge.discovery.found import checkout_label, discovered_stack, recipe_for
from cuforge.discovery.requirements import declared
from cuforge.discovery.scan import Discovery, discover


@dataclass(frozen=True)
class Served:
    """The stack a checkout gets, the project that knows its recipes, and how it was chosen."""

    project: Project
    stack: Stack
    why: str                          # "named", "milo/ is in the checkout", "discovered"
    discovery: Discovery | None = None
    recipes: tuple[Recipe, ...] = ()  # the discovered ones
    requirements_left_out: tuple[str, ...] = ()   # declared lines that are not requirements
    fixes: dict[PurePosixPath, list[FieldFix]] = field(default_factory=dict)   # per folder


def serve(project: Project, name: str, checkout: Path) -> Served:
    """The stack ``name`` (``""``: whichever fits ``checkout``)."""
    if name:
        return Served(project, load_stack(project, name), "named on the command line")
    if not checkout.is_dir():
        raise ConfigError(f"no checkout at {checkout}" if not checkout.exists() else
                          f"--checkout {checkout} is not a directory",
                          hint="pass --checkout PATH to the root of your clone")
    for known in available_stacks(project):
        stack = load_stack(project, known)
        if stack.checkout_marker and (checkout / stack.checkout_marker).exists():
            return Served(project, stack, f"a {stack.title} checkout ({stack.checkout_marker} "
                          f"is in it): the {stack.name} stack")
    seen = discover(checkout, project.state_dir / "cache")
    if not seen.found:
        raise NothingToDo(f"no torch extension build found in {checkout} (a setup.py calling "
                          "CUDAExtension/CppExtension, or a CMakeLists.txt finding Torch)",
                          hint="pass --checkout the root of a clone that vendors its CUDA "
                               "extensions, or name a stack: " + ", ".join(available_stacks(project)))
    label = checkout_label(checkout)
    fixes = {ext.folder: field_fixes(project.patches_dir, ext.tree) for ext in seen.found}
    recipes = tuple(recipe_for(ext, label, tuple(f.name for f in fixes[ext.folder]))
                    for ext in seen.found)
    wants = declared(checkout, {str(ext.folder) for ext in seen.found})
    stack = discovered_stack(seen, list(recipes), wants)
    return Served(replace(project, discovered=recipes), stack, "discovered", seen, recipes,
                  wants.left_out, fixes)


def print_discovery(served: Served, out: Console) -> None:
    """What the checkout holds and what was made of it: each extension found (and the lines
    that say so), each folder left out and why, each git submodule."""
    seen = served.discovery
    if seen is None:
        if served.why != "named on the command line":
            out.print(Text(served.why))
        return
    out.print(Text(f"discovered in {seen.root}: {len(seen.found)} torch extension"
                   f"{'s' if len(seen.found) != 1 else ''}", style="bold"))
    for ext, recipe in zip(seen.found, served.recipes):
        origin = (f", git submodule {ext.submodule.url} @ {ext.submodule.commit[:12]} "
                  "(fetched into cuforge's cache)" if ext.submodule else "")
        role = "" if recipe.name in served.stack.packages else \
            " (optional: the checkout's own build has it commented out)"
        out.print(Text(f"  {recipe.name}: {ext.folder} ({ext.build.kind}{origin}){role}"),
                  soft_wrap=True)
        out.print(Text(f"    why: {ext.why()}", style="dim"), soft_wrap=True)
        for fix in served.fixes.get(ext.folder, ()):
            out.print(Text(f"    fix: {fix.name} ({fix.description.removeprefix('Field fix: ')}"
                           f"): {', '.join(fix.files)}", style="yellow"), soft_wrap=True)
    for sub in seen.submodules:
        out.print(Text(f"  submodule {sub.text()}"), soft_wrap=True)
    if served.stack.entry_scripts:
        out.print(Text(f"  entry scripts (run with --help by the model stage): "
                       f"{', '.join(served.stack.entry_scripts)}"), soft_wrap=True)
    for line in served.requirements_left_out:
        out.print(Text(f"  not a requirement: {line}", style="dim"), soft_wrap=True)
    for left in seen.left_out:
        out.print(Text(f"  left out: {left.folder} ({left.reason})", style="dim"), soft_wrap=True)


def discovery_report(served: Served) -> dict:
    """``setup --json``'s ``discovered``, ``left_out`` and ``stack_from`` (docs/json.md)."""
    seen = served.discovery
    if seen is None:
        return {"stack_from": served.why}
    return {"stack_from": "discovered",
            "discovered": [{"name": r.name, "folder": str(ext.folder), "kind": str(ext.build.kind),
                            "why": [c.text() for c in ext.build.calls],
                            "submodule": ext.submodule.url if ext.submodule else None,
                            "fixes": [f.name for f in served.fixes.get(ext.folder, ())],
                            "required": r.name in served.stack.packages}
                           for ext, r in zip(seen.found, served.recipes)],
            "left_out": [{"folder": str(x.folder), "reason": x.reason} for x in seen.left_out],
            "entry_scripts": list(served.stack.entry_scripts)}
