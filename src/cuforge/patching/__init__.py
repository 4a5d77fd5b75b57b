"""The patch engine: small, explained, reversible edits to upstream source trees.

Public API::

    ps = load_patch_set("milo")                 # patches/milo/patch.toml
    results = apply(ps, checkout, dry_run=False)
    results = check(ps, checkout)
    results = revert(ps, checkout, dry_run=False)
    console.print(render(results))

The build pipeline uses the same engine for build-time source patches:
``apply(load_patch_set("diff-gaussian-rasterization_ms"), src_dir)``.
"""

from cuforge.patching.engine import apply, check, revert
from cuforge.patching.manifest import available_sets, default_patches_dir, load_patch_set
from cuforge.patching.model import Patch, PatchResult, PatchSet, PatchStatus
from cuforge.patching.report import render, summary

__all__ = [
    "Patch",
    "PatchResult",
    "PatchSet",
    "PatchStatus",
    "apply",
    "available_sets",
    "check",
    "default_patches_dir",
    "load_patch_set",
    "render",
    "revert",
    "summary",
]
