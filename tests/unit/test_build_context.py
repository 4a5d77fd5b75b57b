"""One build context by composition (issue 52): the executor's parts are plain functions of one
frozen ``BuildContext``, not mixins of one class that call each other through ``self`` and use
attributes no one declares. Read from the syntax trees of ``cuforge.pipeline``."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import cuforge.pipeline
from cuforge.pipeline.context import BuildContext, RunState

PIPELINE = Path(cuforge.pipeline.__file__).parent
TREES = {p.relative_to(PIPELINE).as_posix(): ast.parse(p.read_text())
         for p in sorted(PIPELINE.rglob("*.py")) if "shim" not in p.parts}


def _cuforge_names(tree: ast.Module) -> set[str]:
    """The names a module binds to something of cuforge: imported from it, or its own classes."""
    names = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cuforge"):
            names.update(a.asname or a.name for a in node.names)
    return names


def test_no_class_of_the_pipeline_inherits_from_a_cuforge_class():
    """A base of cuforge's own is a mixin (an error family is the one exception); enums,
    dataclasses and protocols inherit from the standard library only."""
    mixed = []
    for rel, tree in TREES.items():
        ours = _cuforge_names(tree)
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for base in cls.bases:
                name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", "")
                if name in ours and not name.endswith("Error"):
                    mixed.append(f"{rel}: {cls.name}({name})")
    assert mixed == []


def test_no_attribute_of_a_pipeline_object_appears_after_its_init():
    """Every ``self.x = ...`` outside ``__init__`` names an attribute ``__init__`` (or the class
    body) declared: no attribute that first appears in ``run()``."""
    late = []
    for rel, tree in TREES.items():
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            declared = {t.target.id for t in cls.body
                        if isinstance(t, ast.AnnAssign) and isinstance(t.target, ast.Name)}
            set_in: dict[str, set[str]] = {}
            for fn in (f for f in cls.body if isinstance(f, ast.FunctionDef)):
                for node in ast.walk(fn):
                    targets = (node.targets if isinstance(node, ast.Assign) else
                               [node.target] if isinstance(node, ast.AnnAssign) else [])
                    for t in targets:
                        for attr in (t.elts if isinstance(t, ast.Tuple) else [t]):
                            if (isinstance(attr, ast.Attribute) and isinstance(attr.value, ast.Name)
                                    and attr.value.id == "self"):
                                set_in.setdefault(fn.name, set()).add(attr.attr)
            declared |= set_in.pop("__init__", set()) | set_in.pop("__post_init__", set())
            late += [f"{rel}: {cls.name}.{fn}: self.{a}" for fn, attrs in set_in.items()
                     for a in sorted(attrs - declared)]
    assert late == []


def _uses(attribute_of: str) -> dict[str, set[str]]:
    """``ctx.NAME`` (``attribute_of="ctx"``) or ``ctx.state.NAME`` (``"ctx.state"``) as the
    pipeline's modules read them: name -> the modules that do."""
    found: dict[str, set[str]] = {}
    for rel, tree in TREES.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and ast.unparse(node.value) in (
                    attribute_of, f"self.{attribute_of}"):
                found.setdefault(node.attr, set()).add(rel)
    return found


def test_the_context_is_frozen_and_declares_everything_its_users_read():
    assert dataclasses.is_dataclass(BuildContext)
    assert BuildContext.__dataclass_params__.frozen
    ctx_fields = {f.name for f in dataclasses.fields(BuildContext)}
    state_fields = {f.name for f in dataclasses.fields(RunState)}
    used = _uses("ctx")
    # the wheel sources, the gate and the handlers each read it (composition, not mixins)
    for part in ("wheelsource.py", "gate.py", "actions.py", "executor.py"):
        assert any(part in where for where in used.values()), part
    assert set(used) - ctx_fields == set()
    assert set(_uses("ctx.state")) - state_fields == set()
    with pytest.raises(dataclasses.FrozenInstanceError):
        BuildContext.__setattr__(object.__new__(BuildContext), "req", None)
