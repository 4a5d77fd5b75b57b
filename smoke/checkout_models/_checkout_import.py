"""Import a research checkout's model code without running its package ``__init__`` files.

Why: Pointcept's ``pointcept/models/__init__.py`` imports every model (and their optional
dependencies), ``pointcept/engines/hooks/__init__.py`` the evaluators; MILo's ``scene/__init__.py``
the dataset readers. The model stage needs one model file and what it imports, nothing else.

How: a meta-path finder serves each *package* under the named top-level packages as an empty
module with the package's real ``__path__`` (like a namespace package), so its ``__init__.py``
never runs, while *modules* load exactly as written, through Python's own machinery. A name
that a module takes from a package (``from pointcept.models.utils import offset2bincount``,
which the ``__init__`` re-exports) is found where it is defined: the package's ``.py`` files
are read with ``ast`` for a top-level ``class``/``def``/assignment of that name, and that
module is imported. Packages named in ``run_init`` do run their ``__init__`` (MILo's renderer
lives in ``gaussian_renderer/__init__.py``).

Why it survives upstream changes: it depends on two facts only - the path of the module under
test and Python's import rules. What the ``__init__`` files contain, and which models they
list, can change freely; a moved definition is found where it moved to.
"""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def _defined_names(path: Path) -> set[str]:
    """Top-level names a file defines (classes, functions, assignments)."""
    try:
        tree = ast.parse(path.read_text(errors="replace"), str(path))
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


class _PackageWithoutInit(importlib.abc.Loader):
    """Creates the package module; instead of its ``__init__``, a ``__getattr__`` that finds a
    missing name at its definition site."""

    def exec_module(self, module: ModuleType) -> None:
        directories = [Path(p) for p in module.__spec__.submodule_search_locations]

        def __getattr__(name: str):
            if name.startswith("__"):
                raise AttributeError(name)
            for directory in directories:
                for path in sorted(directory.glob("*.py")):
                    if path.stem != "__init__" and name in _defined_names(path):
                        found = importlib.import_module(f"{module.__name__}.{path.stem}")
                        value = getattr(found, name)
                        setattr(module, name, value)
                        return value
            raise AttributeError(f"module {module.__name__!r} (its __init__ not run) has no "
                                 f"attribute {name!r}, and no module in it defines one")

        module.__getattr__ = __getattr__


class _CheckoutFinder(importlib.abc.MetaPathFinder):
    def __init__(self, root: Path, packages: set[str], run_init: set[str]) -> None:
        self.root, self.packages, self.run_init = root, packages, run_init

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in self.packages or name in self.run_init:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path or [str(self.root)])
        if spec is None or spec.submodule_search_locations is None:
            return None                  # a plain module (or not ours): import it as usual
        stub = importlib.util.spec_from_loader(name, _PackageWithoutInit(), is_package=True)
        stub.submodule_search_locations = list(spec.submodule_search_locations)
        return stub


def install(root: Path, packages: list[str], run_init: list[str] = ()) -> None:
    """Make ``packages`` (top-level names under ``root``) importable without their
    ``__init__`` files, except those in ``run_init``; ``root`` goes first on ``sys.path``."""
    root = Path(root).resolve()
    sys.path.insert(0, str(root))
    sys.meta_path.insert(0, _CheckoutFinder(root, set(packages), set(run_init)))


def not_run_inits(root: Path, packages: list[str]) -> list[str]:
    """The package ``__init__.py`` files under ``root`` that were *not* executed (for the
    check's message: proof that the training code stayed out)."""
    loaded = {getattr(m, "__file__", None) for m in list(sys.modules.values())}
    inits = [p for name in packages for p in (Path(root) / name).rglob("__init__.py")]
    return [str(p.relative_to(root)) for p in inits if str(p) not in loaded]


def checkout_argument(script: str) -> Path:
    """The CHECKOUT argument of a checkout model check (``script CHECKOUT``), after the two
    exits every such check shares: a usage error, and 77 (skipped, saying why) without a GPU."""
    import torch

    if len(sys.argv) != 2:
        sys.exit(f"usage: {script} CHECKOUT")
    if not torch.cuda.is_available():
        print("skipped: no GPU (torch.cuda.is_available() is False)")
        sys.exit(77)
    return Path(sys.argv[1]).resolve()
