"""Which stack ``cuforge setup`` serves a checkout with: the one named; else the known stack
whose ``checkout_marker`` the checkout has (MILo's ``milo/``, Pointcept's ``pointcept/``);
else the stack discovery makes of the checkout (``cuforge.discovery``), whose in-memory
recipes the project then carries, so every later step reads them as it reads recipes/."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from rich.console import Console
from rich.text import Text

from cuforge.config.recipes import Recipe, load_recipes
from cuforge.config.stacks import Stack, available_stacks, load_stack
from cuforge.core.errors import ConfigError, NothingToDo
from cuforge.core.project import Project
from cuforge.discovery.api import fork_of
from cuforge.discovery.fixes import FieldFix, field_fixes
from cuforge.discovery.found import (checkout_label, discovered_stack, recipe_for,
                                     recipe_from_package)
from cuforge.discovery.requirements import declared
from cuforge.discovery.scan import Discovery, composed_tree, discover, tree_of
from cuforge.discovery.stackfile import stack_text


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
    forks: dict[PurePosixPath, Recipe] = field(default_factory=dict)   # folder -> its API's recipe


def serve(project: Project, name: str, checkout: Path) -> Served:
    """The stack ``name`` (``""``: whichever fits ``checkout``)."""
    if name:
        stack = load_stack(project, name)
        if stack.checkout_packages:   # written by `cuforge stack new`: its folders of the checkout
            return _from_packages(project, stack, checkout)
        return Served(project, stack, "named on the command line")
    _require_dir(checkout)
    for known in available_stacks(project):
        stack = load_stack(project, known)
        if stack.checkout_marker and (checkout / stack.checkout_marker).exists():
            return Served(project, stack, f"a {stack.title} checkout ({stack.checkout_marker} "
                          f"is in it): the {stack.name} stack")
    return _discovered(project, checkout)


def _require_dir(checkout: Path) -> None:
    if not checkout.is_dir():
        raise ConfigError(f"no checkout at {checkout}" if not checkout.exists() else
                          f"--checkout {checkout} is not a directory",
                          hint="pass --checkout PATH to the root of your clone")


def _discovered(project: Project, checkout: Path) -> Served:
    seen = discover(checkout, project.state_dir / "cache")
    if not seen.found:
        raise NothingToDo(f"no torch extension build found in {checkout} (a setup.py calling "
                          "CUDAExtension/CppExtension, or a CMakeLists.txt finding Torch)",
                          hint="pass --checkout the root of a clone that vendors its CUDA "
                               "extensions, or name a stack: " + ", ".join(available_stacks(project)))
    label = checkout_label(checkout)
    trees = {ext.folder: composed_tree(ext, seen, project.state_dir / "cache")
             for ext in seen.found}
    fixes = {folder: field_fixes(project.patches_dir, tree) for folder, tree in trees.items()}
    known = load_recipes(project).values()
    forks = {ext.folder: fork_of(ext.build.modules, trees[ext.folder], known)
             for ext in seen.found}
    recipes = tuple(recipe_for(ext, label, trees[ext.folder],
                               tuple(f.name for f in fixes[ext.folder]), forks[ext.folder])
                    for ext in seen.found)
    wants = declared(checkout, {str(ext.folder) for ext in seen.found})
    stack = discovered_stack(seen, list(recipes), wants)
    return Served(replace(project, discovered=recipes), stack, "discovered", seen, recipes,
                  wants.left_out, fixes, {f: r for f, r in forks.items() if r is not None})


def _from_packages(project: Project, stack: Stack, checkout: Path) -> Served:
    """A stack file's ``[[package]]`` folders of ``checkout`` as in-memory recipes (a folder in
    a submodule that is not checked out: its fetched tree), as discovery would make them."""
    _require_dir(checkout)
    recipes = []
    for pkg in stack.checkout_packages:
        tree = tree_of(checkout, pkg.folder, project.state_dir / "cache")
        if not tree.is_dir():
            raise ConfigError(f"{stack.file}: [[package]] {pkg.name}: {checkout} has no "
                              f"{pkg.folder}", hint=f"pass the checkout {stack.file.name} was "
                              f"written from, or write it again: cuforge stack new {checkout}")
        recipes.append(recipe_from_package(pkg, tree, stack.name))
    required = tuple(r.name for r, pkg in zip(recipes, stack.checkout_packages) if pkg.required)
    served = replace(stack, packages=(*stack.packages, *required),
                     optional=(*stack.optional, *(r.name for r in recipes
                                                   if r.name not in required)))
    return Served(replace(project, discovered=tuple(recipes)), served,
                  f"the {stack.name} stack ({stack.file.name}: {len(recipes)} folders of the "
                  "checkout)", recipes=tuple(recipes))


def write_stack(project: Project, checkout: Path, name: str = "", *, force: bool = False
                ) -> Path:
    """``cuforge stack new``: stacks/NAME.toml from what discovery finds in ``checkout``."""
    _require_dir(checkout)
    served = _discovered(project, checkout)
    assert served.discovery is not None
    name = name or served.stack.name
    path = project.stacks_dir / f"{name}.toml"
    if path.exists() and not force:
        raise ConfigError(f"{path} exists", hint="pass --force to write it again, or --name "
                          "another name")
    required = {str(ext.folder) for ext, r in zip(served.discovery.found, served.recipes)
                if r.name in served.stack.packages}
    fixes = {str(folder): [f.name for f in found] for folder, found in served.fixes.items()}
    text = stack_text(name, served.discovery, fixes, required, served.stack.requirements,
                      served.stack.entry_scripts)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".toml.tmp")
    tmp.write_text(text)
    tmp.replace(path)   # a stack file is whole or absent
    return path


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
        role = f" (optional: {ext.optional_because})" if ext.optional_because else ""
        out.print(Text(f"  {recipe.name}: {ext.folder} ({ext.build.kind}{origin}){role}"),
                  soft_wrap=True)
        out.print(Text(f"    why: {ext.why()}", style="dim"), soft_wrap=True)
        known = served.forks.get(ext.folder)
        if known is not None and known.api is not None:
            out.print(Text(f"    smoke: {recipe.smoke.script} (the {known.name} recipe's: it "
                           f"builds {known.api.module} defining {', '.join(known.api.defines)})"),
                      soft_wrap=True)
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
    if seen is None:   # the same keys, empty: a named or known stack discovered nothing
        return {"stack_from": served.why, "discovered": [], "left_out": [],
                "entry_scripts": list(served.stack.entry_scripts)}
    return {"stack_from": "discovered",
            "discovered": [{"name": r.name, "folder": str(ext.folder), "kind": str(ext.build.kind),
                            "why": [c.text() for c in ext.build.calls],
                            "submodule": ext.submodule.url if ext.submodule else None,
                            "fixes": [f.name for f in served.fixes.get(ext.folder, ())],
                            "smoke": r.smoke.script or None,
                            "required": r.name in served.stack.packages}
                           for ext, r in zip(seen.found, served.recipes)],
            "left_out": [{"folder": str(x.folder), "reason": x.reason} for x in seen.left_out],
            "entry_scripts": list(served.stack.entry_scripts)}

