"""What discovery found, as the pipeline's own data: one in-memory :class:`Recipe` per found
extension (built from a copy of its folder, like ``--src``) and a :class:`Stack` holding them,
so that ``setup`` plans, builds, verifies and installs them exactly as it does a recipe's.

A found extension's recipe is named after its distribution and the checkout
(``diff-gaussian-rasterization@gaussian-splatting``: the wheelhouse's manifest never mixes two
checkouts' forks), and its wheels end their local version with the folder's content
(``+cu130torch2.14.1.src1a2b3c4d``: two forks never share a wheel file)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from packaging.utils import canonicalize_name

from cuforge.config.arches import ArchRule
from cuforge.config.recipes import SMOKE_PREFIX, BuildKind, Recipe, SmokeRule, Source
from cuforge.config.stress import STRESS_PREFIX
from cuforge.config.stacks import CheckoutPackage, Stack
from cuforge.discovery.entry import entry_scripts
from cuforge.discovery.requirements import Declared
from cuforge.discovery.scan import Discovery, FoundExtension
from cuforge.pipeline.fingerprint import tree_digest

def checkout_label(root: Path) -> str:
    """The checkout's name in recipe names: its folder's, as a package name would write it.

    >>> checkout_label(Path("/home/me/Gaussian_Opacity Fields"))
    'gaussian-opacity-fields'
    """
    return re.sub(r"[^a-z0-9]+", "-", root.resolve().name.lower()).strip("-") or "checkout"


def variant(tree: Path) -> str:
    """A folder's content as a local version segment: ``src`` + 8 hex digits of its digest."""
    return f"src{tree_digest(tree)[:8]}"


def recipe_for(ext: FoundExtension, label: str, tree: Path, fixes: tuple[str, ...] = (),
               fork_of: Recipe | None = None) -> Recipe:
    """The in-memory recipe of one found extension, built from ``tree`` (its folder, or that
    with the submodules fetched into it: ``scan.composed_tree``); ``fixes``: the field fixes
    (patch sets) its tree needs; ``fork_of``: the recipe whose API it has (``discovery.api``),
    whose smoke and stress it gets (else it has no smoke script: none of ours fits it)."""
    dist = canonicalize_name(ext.build.name)
    known = {} if fork_of is None else {
        "smoke": SmokeRule(fork_of.smoke.script or f"smoke/{SMOKE_PREFIX}{fork_of.name}.py",
                           fork_of.smoke.gpu, fork_of.smoke.requires),
        "stress": None if fork_of.stress is None else replace(
            fork_of.stress, script=fork_of.stress.script or
            f"smoke/{STRESS_PREFIX}{fork_of.name}.py")}
    return Recipe(name=f"{dist}@{label}", kind=ext.build.kind or BuildKind.SETUPTOOLS,
                  source=Source(path=str(tree), checkout=str(ext.folder)),
                  modules=ext.build.modules or (dist.replace("-", "_"),),
                  arches=ArchRule(), variant=variant(tree), patches=fixes, **known)


def recipe_from_package(pkg: CheckoutPackage, tree: Path, stack: str) -> Recipe:
    """The in-memory recipe of a stack file's ``[[package]]`` (its folder's files at ``tree``)."""
    dist = canonicalize_name(pkg.name)
    return Recipe(name=f"{dist}@{stack}", kind=BuildKind(pkg.kind),
                  source=Source(path=str(tree), checkout=pkg.folder),
                  modules=pkg.modules or (dist.replace("-", "_"),), arches=ArchRule(),
                  variant=variant(tree), patches=pkg.fixes)


def discovered_stack(seen: Discovery, recipes: list[Recipe], declared: Declared) -> Stack:
    """A stack of the found extensions: those the checkout's own build builds are required,
    the others optional (``FoundExtension.optional_because``); no patch set; the requirements
    the checkout declares; its entry scripts."""
    live = tuple(r.name for r, ext in zip(recipes, seen.found) if not ext.optional_because)
    return Stack(name=checkout_label(seen.root),
                 description=f"the torch extensions found in {seen.root}", packages=live,
                 patch_set="", env=(), checkout_model="", file=Path("(discovery)"),
                 optional=tuple(r.name for r in recipes if r.name not in live),
                 requirements=declared.requirements, title=seen.root.name,
                 entry_scripts=entry_scripts(seen.root))
