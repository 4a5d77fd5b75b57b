"""Smoke scripts run only on a GPU, so a call that no longer matches a shared helper's signature
would first fail on a lent machine (milo_tiny.py called ``run(module)`` after ``run`` gained its
``outputs`` argument). Bind every call of the helpers in smoke/ to their signatures here."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

SMOKE = Path(__file__).resolve().parents[2] / "smoke"


def _helper_functions() -> dict[str, inspect.Signature]:
    """The helper module's functions as signatures, read from its source (importing it needs
    torch)."""
    sigs = {}
    for node in ast.parse((SMOKE / "_gaussian_rasterizer.py").read_text()).body:
        if not isinstance(node, ast.FunctionDef):
            continue
        a = node.args
        plain = [*a.posonlyargs, *a.args]
        first_default = len(plain) - len(a.defaults)
        params = [inspect.Parameter(arg.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                    default=None if i >= first_default else inspect.Parameter.empty)
                  for i, arg in enumerate(plain)]
        params += [inspect.Parameter(arg.arg, inspect.Parameter.KEYWORD_ONLY,
                                     default=None if d is not None else inspect.Parameter.empty)
                   for arg, d in zip(a.kwonlyargs, a.kw_defaults)]
        sigs[node.name] = inspect.Signature(params)
    return sigs


def _calls(script: Path, helpers: set[str]):
    """(line, name, positional count, keywords) of each call of a helper, plain or qualified."""
    imported = set()
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "_gaussian_rasterizer":
            imported |= {a.asname or a.name for a in node.names}
    for node in ast.walk(ast.parse(script.read_text())):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and getattr(f.value, "id", "") == "_gaussian_rasterizer":
            name = f.attr
        elif isinstance(f, ast.Name) and f.id in imported:
            name = f.id
        else:
            continue
        if name in helpers:
            yield node.lineno, name, len(node.args), [k.arg for k in node.keywords]


def test_every_smoke_call_of_the_shared_rasterizer_helper_binds():
    signatures = _helper_functions()
    seen = 0
    for script in sorted(SMOKE.rglob("*.py")):
        for line, name, positional, keywords in _calls(script, set(signatures)):
            seen += 1
            try:
                signatures[name].bind(*range(positional), **dict.fromkeys(keywords))
            except TypeError as err:
                pytest.fail(f"{script.relative_to(SMOKE)}:{line}: {name}(...) {err}")
    assert seen >= 4     # the three rasterizer smokes and the MILo model stage
