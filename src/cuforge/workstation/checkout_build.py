"""What setup builds from the user's checkout (``config.checkout`` decides which sources),
said per package before anything runs: the checkout's folder and its revision (git describe,
or a content hash), the pinned fetch where the checkout lacks the folder, and whether each
recipe's patch set applies to the checkout's copy. Everything here reads the user's tree and
writes nothing: the build patches a copy."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cuforge.config.checkout import UserCheckout, checkout_sources, pinned_hint
from cuforge.config.recipes import Recipe
from cuforge.core.errors import CuforgeError, PatchError
from cuforge.core.project import Project
from cuforge.core.runner import capture
from cuforge.pipeline.fingerprint import tree_digest


@dataclass(frozen=True)
class Drift:
    """A recipe's patch set that does not apply to the checkout's copy of its package."""

    package: str
    label: str           # the package, and the extra source's variable if it is one
    patch_set: str
    where: list[str]     # per patch: "file [patch id]: what differs"

    def text(self) -> str:
        return (f"{self.label}: patches/{self.patch_set} does not apply to your checkout's "
                f"copy: " + "; ".join(self.where))


def source_lines(recipes: tuple[Recipe, ...], checkout: UserCheckout, *, pinned: bool,
                 overrides: dict[str, Path]) -> list[str]:
    """One line per source of ``recipes``: where the build takes it from. ``checkout`` is the
    user's clone; ``pinned``: --pinned was given (every source at the recipe's pin)."""
    mine = {(s.package, s.variable): s for s in checkout_sources(recipes, checkout)}
    lines = []
    for r in recipes:
        for variable, source in (("", r.source), *r.extra_sources):
            label = r.name + (f" ({variable})" if variable else "")
            found = mine.get((r.name, variable))
            if not variable and r.name in overrides:
                lines.append(f"{label}: --src {overrides[r.name]}")
            elif found is not None and pinned:
                lines.append(f"{label}: pinned {source.describe()} (--pinned)")
            elif found is not None and found.path is not None:
                lines.append(f"{label}: from your checkout: {source.subdir or '.'} @ "
                             f"{revision(checkout.root, found.path)}")
            elif found is not None:
                lines.append(f"{label}: pinned {source.describe()} (your checkout has no "
                             f"{source.subdir})")
            elif source.path and source.checkout:   # a folder of the checkout (a stack file's)
                lines.append(f"{label}: from your checkout: {source.checkout} @ "
                             f"{revision(checkout.root, Path(source.path))}")
            elif source.path:   # cuforge's own tree (native/)
                lines.append(f"{label}: cuforge's {source.path}")
            elif source.describe():
                lines.append(f"{label}: pinned {source.describe()}")
    return lines


def revision(root: Path, folder: Path) -> str:
    """The checkout's ``git describe`` when ``folder`` is as committed, else (edited, or not a
    git clone) the content hash the build key holds (its first 12 hex digits)."""
    content = f"content {tree_digest(folder)[:12]}"
    try:
        top = capture(["git", "-C", str(root), "rev-parse", "--show-toplevel"]).strip()
        if Path(top).resolve() != root.resolve():   # a plain tree inside another clone
            return content
        describe = capture(["git", "-C", str(root), "describe", "--always", "--tags"]).strip()
        edited = capture(["git", "-C", str(root), "status", "--porcelain", "--",
                          str(folder)]).strip()
    except CuforgeError:   # not a git clone, or no git
        return content
    return f"{describe} + your edits ({content})" if edited else describe


def drifts(project: Project, recipes: tuple[Recipe, ...], checkout: UserCheckout) -> list[Drift]:
    """Each recipe patch set that does not apply to the checkout's copy (checked, not applied)."""
    from cuforge import patching
    found = []
    for s in checkout_sources(recipes, checkout):
        recipe = next(r for r in recipes if r.name == s.package)
        for name in recipe.patches if s.path is not None else ():
            results = patching.check(patching.load_patch_set(
                name, patches_dir=project.patches_dir), s.path)
            where = [f"{r.file} [{r.patch_id}]: {r.detail}" for r in results
                     if r.status is patching.PatchStatus.DRIFTED]
            if where:
                found.append(Drift(s.package, s.label, name, where))
    return found


def require_patches_apply(found: list[Drift], required: frozenset[str], stack: str) -> None:
    """Refuse, before anything is built, a required package whose recipe patches do not apply
    to the checkout's copy (an optional one fails in its build, with the same words)."""
    fatal = [d for d in found if d.package in required]
    if fatal:
        raise PatchError("\n".join(d.text() for d in fatal) + "\nnothing was built or written",
                         hint=pinned_hint(fatal[0].patch_set, stack))
