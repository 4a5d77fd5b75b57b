"""The field's known build failures, fixed as data: every ``patches/field-*`` set is a named,
generic fix whose patches find the files they concern themselves (a glob and a detection
rule: ``uint32_t`` without ``<cstdint>``, a setup.py that overwrites TORCH_CUDA_ARCH_LIST,
``-std=c++14``, ``AT_CHECK``, ``cub::Max``, ...). A found extension gets each set that
concerns its tree, as its recipe's ``patches``: the build applies them to its copy, the dry
run shows them, the manifest records them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cuforge import patching

FIELD_PREFIX = "field-"


@dataclass(frozen=True)
class FieldFix:
    name: str              # the patch set: field-cstdint
    description: str
    files: tuple[str, ...]  # the files of the tree it would edit


def field_fixes(patches_dir: Path, tree: Path) -> list[FieldFix]:
    """Each field fix that concerns ``tree`` (read only), in name order."""
    found = []
    for name in patching.available_sets(patches_dir):
        if not name.startswith(FIELD_PREFIX):
            continue
        fix = patching.load_patch_set(name, patches_dir=patches_dir)
        files = sorted({r.file for r in patching.check(fix, tree)
                        if r.status is patching.PatchStatus.NOT_APPLIED})
        if files:
            found.append(FieldFix(name, fix.description, tuple(files)))
    return found
