"""The user's own checkout as a source: a recipe whose source (or extra source) is a folder of
the stack's repository (MILo's ``submodules/simple-knn``, Pointcept's ``libs/pointops``) is
built from that folder of the checkout when the checkout has it, and fetched at the recipe's
pin only where it has not (``setup --pinned``: always). Which recipes that is follows from
data (the stack's ``repo``, each recipe's ``git`` + ``subdir``), never from a list of names.
The build copies the folder, like ``--src``: patches touch the copy, the key holds its content.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from cuforge.config.recipes import Recipe, Source


@dataclass(frozen=True)
class UserCheckout:
    """A clone of ``repo`` at ``root`` (``setup``'s ``--checkout``, with its stack's repo)."""

    repo: str
    root: Path


@dataclass(frozen=True)
class CheckoutSource:
    """One source of one recipe that lives in the checkout's repository."""

    package: str
    variable: str        # "" = the recipe's [source], else its extra source's variable
    pinned: Source       # the recipe's own: what --pinned (or a checkout without it) fetches
    path: Path | None    # the checkout's folder; None: the checkout lacks it

    @property
    def label(self) -> str:
        return self.package + (f" ({self.variable})" if self.variable else "")


def repo_id(url: str) -> str:
    """A repository URL without what does not change the repository: scheme, ``.git``, case.

    >>> repo_id("https://github.com/Anttwo/MILo.git") == repo_id("git@github.com:anttwo/milo")
    True
    """
    url = url.strip().rstrip("/").removesuffix(".git").lower()
    url = re.sub(r"^[a-z][a-z0-9+.-]*://(?:[^@/]+@)?", "", url)   # https://, ssh://git@
    return re.sub(r"^[^@/]+@([^:/]+):", r"\1/", url)               # git@host:path


def checkout_sources(recipes: Iterable[Recipe], checkout: UserCheckout) -> list[CheckoutSource]:
    """Every source of ``recipes`` that is a folder of the checkout's repository, with the
    checkout's copy of it where the checkout has that folder."""
    found = []
    for recipe in recipes:
        for variable, source in (("", recipe.source), *recipe.extra_sources):
            if source.git and repo_id(source.git) == repo_id(checkout.repo):
                folder = checkout.root / source.subdir if source.subdir else checkout.root
                found.append(CheckoutSource(recipe.name, variable, source,
                                            folder if folder.is_dir() else None))
    return found


def with_checkout(order: list[Recipe], checkout: UserCheckout | None,
                  keep: Iterable[str] = ()) -> list[Recipe]:
    """``order`` with every source the checkout holds replaced by its folder (a local path,
    copied and keyed by content like ``--src``); the packages in ``keep`` (``--src``) as given."""
    if checkout is None:
        return order
    found = {(s.package, s.variable): s.path for s in checkout_sources(order, checkout)
             if s.path is not None and s.package not in set(keep)}

    def local(name: str, variable: str, source: Source) -> Source:
        path = found.get((name, variable))
        return source if path is None else Source(path=str(path), checkout=source.subdir or ".")

    return [replace(r, source=local(r.name, "", r.source),
                    extra_sources=tuple((v, local(r.name, v, s)) for v, s in r.extra_sources))
            for r in order]


def pinned_hint(patch_set: str, stack: str = "STACK") -> str:
    """The fix named when a recipe's patch set does not apply to the checkout's copy."""
    return (f"patches/{patch_set} was written for upstream's pinned copy: `cuforge setup "
            f"{stack} --pinned ...` builds that copy instead (or bring your copy closer to it)")
