"""Unit tests of the ast-located Python function replacement."""

from __future__ import annotations

import ast
import textwrap

import pytest

from cuforge.core.errors import PatchError
from cuforge.patching.model import PatchStatus
from cuforge.patching.pyfunc import ReplaceFunction, canonical_dump
from patch_hashes import function_hash_in

MODULE = textwrap.dedent(
    '''
    import torch


    class Rasterizer:
        def __init__(self, use_opengl=True):
            # pick a context
            self.ctx = "gl" if use_opengl else "cuda"

        def forward(self, x):
            return x


    def helper(a, b):
        return a + b
    '''
)

PAYLOAD = textwrap.dedent(
    '''
    def __init__(self, use_opengl=True):
        """cuforge: env-selected context."""
        self.ctx = "cuda"
    '''
).lstrip()


def op() -> ReplaceFunction:
    return ReplaceFunction("Rasterizer.__init__", PAYLOAD, function_hash_in(MODULE, "Rasterizer.__init__"))


def test_hash_ignores_comments_and_formatting() -> None:
    reformatted = MODULE.replace("# pick a context\n", "").replace('"gl" if', '"gl"  if')
    assert function_hash_in(reformatted, "Rasterizer.__init__") == function_hash_in(MODULE, "Rasterizer.__init__")


def test_hash_sees_code_changes() -> None:
    changed = MODULE.replace('"cuda"', '"vulkan"')
    assert function_hash_in(changed, "Rasterizer.__init__") != function_hash_in(MODULE, "Rasterizer.__init__")


def test_canonical_dump_leaves_out_empty_fields() -> None:
    dump = canonical_dump(ast.parse("def f(): pass").body[0])
    assert "type_params" not in dump and "decorator_list" not in dump


def test_method_is_replaced_with_its_indentation() -> None:
    replacement = op()
    assert replacement.probe(MODULE).status is PatchStatus.NOT_APPLIED
    patched = replacement.forward(MODULE)
    assert '        """cuforge: env-selected context."""' in patched
    assert replacement.probe(patched).status is PatchStatus.APPLIED
    ast.parse(patched)
    assert "def forward(self, x):" in patched and "def helper(a, b):" in patched


def test_changed_upstream_function_is_drift() -> None:
    changed = MODULE.replace('"cuda"', '"vulkan"')
    probe = op().probe(changed)
    assert probe.status is PatchStatus.DRIFTED and "changed upstream" in probe.detail


def test_missing_function_is_drift() -> None:
    probe = op().probe(MODULE.replace("__init__", "setup"))
    assert probe.status is PatchStatus.DRIFTED and "not defined" in probe.detail


def test_payload_must_end_with_the_target() -> None:
    with pytest.raises(PatchError):
        ReplaceFunction("helper", "def other():\n    pass\n", "0" * 64)


def test_reverse_needs_the_backup() -> None:
    with pytest.raises(PatchError, match="backup"):
        op().reverse(MODULE)
