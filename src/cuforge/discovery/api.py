"""Which recipe a found extension is a fork of, by its API (the recipe's ``[api]``: module and
the functions it defines): 3DGS's, 2DGS's and GOF's simple-knn all build ``simple_knn._C``
defining ``distCUDA2``, so the simple-knn recipe's smoke (distCUDA2 against a brute-force
3-NN) checks each of them too. Read from the sources, nothing built."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from cuforge.config.recipes import Recipe

_SOURCES = ("*.cpp", "*.cc", "*.cu")


# a pybind11 binding (``m.def("distCUDA2", ...)``) or a C API method table entry
# (``{"distCUDA2", fn, METH_VARARGS, ...}``)
_DEFINES = re.compile(r'\.def\(\s*"(\w+)"|\{\s*"(\w+)"\s*,\s*[\w:&()*]+\s*,\s*METH_')


def defined_names(tree: Path) -> set[str]:
    """The names a tree's bindings define."""
    names: set[str] = set()
    for pattern in _SOURCES:
        for path in tree.rglob(pattern):
            for bound, table in _DEFINES.findall(path.read_text(errors="replace")):
                names.add(bound or table)
    return names


def fork_of(modules: Iterable[str], tree: Path, recipes: Iterable[Recipe]) -> Recipe | None:
    """The recipe whose ``[api]`` the found extension (its ``modules``, its sources at
    ``tree``) has, or None."""
    have = set(modules)
    candidates = [r for r in recipes if r.api is not None and r.api.module in have]
    if not candidates:
        return None
    names = defined_names(tree)
    return next((r for r in candidates if set(r.api.defines) <= names), None)
