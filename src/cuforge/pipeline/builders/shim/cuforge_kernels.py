"""A recipe's kernel filter, applied inside the package's own build (stdlib only).

patches/spconv calls ``keep`` where spconv's setup.py lists the GEMM and implicit-GEMM
parameter sets it compiles (upstream has its own filter lines there, commented out). The plan
puts the recipe's ``[kernels]`` rules that hold on every target arch into
``CUFORGE_KERNEL_DROP`` as JSON (cuforge.config.kernels); empty or "[]" keeps every set, as
upstream builds. A rule matches a parameter set by its algorithm (``algo.value``, e.g.
"Volta") and, when given, its input/weight/output dtypes (cumm's short names, "f16").
"""

from __future__ import annotations

import json
import os
import sys

VARIABLE = "CUFORGE_KERNEL_DROP"
# where each family keeps its input, weight and output dtypes (cumm's GemmAlgoParams and
# ConvAlgoParams)
DTYPE_FIELDS = {"gemm": ("dtype_a", "dtype_b", "dtype_c"),
                "conv": ("dtype_input", "dtype_weight", "dtype_output")}


def rules(family: str) -> list[dict]:
    """The rules of ``family`` this build applies."""
    text = os.environ.get(VARIABLE, "").strip()
    return [r for r in (json.loads(text) if text else []) if r["family"] == family]


def _short(dtype) -> str:
    return dtype.shortcut() if hasattr(dtype, "shortcut") else str(dtype)


def matches(rule: dict, family: str, params) -> bool:
    """Whether ``rule`` leaves ``params`` (one parameter set of ``family``) out."""
    if getattr(params.algo, "value", params.algo) != rule["algo"]:
        return False
    wanted = rule.get("io_dtypes") or []
    have = [_short(getattr(params, f)) for f in DTYPE_FIELDS[family]]
    return not wanted or have == list(wanted)


def keep(family: str, params: list) -> list:
    """``params`` without the sets this build's rules leave out; says how many stay."""
    drop = rules(family)
    kept = [p for p in params if not any(matches(r, family, p) for r in drop)]
    if drop:
        aot = sum(not getattr(p, "is_nvrtc", False) for p in kept)
        print(f"cuforge: {family} parameter sets: {len(kept)} of {len(params)} kept "
              f"({aot} compiled ahead of time); left out: "
              + "; ".join(f"{r['algo']} {','.join(r.get('io_dtypes') or [])}".strip()
                          for r in drop), file=sys.stderr, flush=True)
    return kept
