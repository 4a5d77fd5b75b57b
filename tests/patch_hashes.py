"""The code hash a structured patch records (``original_sha256``) of a function in a source
text: what a test writes into a patch set for a fixture tree of its own."""

from __future__ import annotations

import ast

from cuforge.core.errors import PatchError
from cuforge.patching.pyfunc import code_hash, find_definition


def function_hash_in(source: str, qualname: str) -> str:
    """The code hash of ``qualname`` in ``source``: what ``original_sha256`` records.

    """
    node, _ = find_definition(ast.parse(source), qualname)
    if node is None:
        raise PatchError(f"{qualname} is not defined in the given source")
    return code_hash(node)
