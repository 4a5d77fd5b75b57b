"""Patch sets loaded for our upstream-shaped fixture trees (tests/fixtures/upstream/).

A replace_function patch records the code hash of upstream's function (patches/milo/patch.toml:
MILo's nvdiff_rasterization at the pin). Fixtures carry our own function bodies, never upstream's,
so that hash cannot match them. Tests therefore load a set with each such hash swapped for the
hash of the fixture's own function: the engine's check runs unchanged on our function. The
recorded upstream hash is checked by hand against the pinned tree (docs/packages.md).
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from cuforge.patching import PatchSet, apply, load_patch_set
from cuforge.patching.pyfunc import ReplaceFunction
from patch_hashes import function_hash_in

PATCHES = Path(__file__).resolve().parents[2] / "patches"


def fixture_set(name: str, root: Path) -> PatchSet:
    """The patch set ``name``, expecting the functions as they are in the fixture copy ``root``."""
    ps = load_patch_set(name, PATCHES)
    patches = []
    for patch in ps.patches:
        if isinstance(patch.op, ReplaceFunction):
            ours = function_hash_in((root / patch.file).read_text(), patch.op.qualname)
            patch = dataclasses.replace(patch, op=dataclasses.replace(patch.op, original_sha256=ours))
        patches.append(patch)
    return dataclasses.replace(ps, patches=tuple(patches))


UPSTREAM = Path(__file__).resolve().parents[1] / "fixtures" / "upstream"


def fixture_tree(name: str, root: Path, patched: bool) -> Path:
    """A copy of the upstream-shaped fixture ``name`` at ``root``, with its patch set applied
    when ``patched``."""
    shutil.copytree(UPSTREAM / name, root)
    if patched:
        apply(fixture_set(name, root), root)
    return root
