"""Switch spconv layers to ConvAlgo.Native when POINTCEPT_SPCONV_ALGO=native (added by cuforge).

Why: on sm_121 (DGX Spark, CUDA 13) spconv's implicit-GEMM path (ConvAlgo.MaskImplicitGemm, the
default for kernel volumes up to 32) crashed training with cudaErrorIllegalAddress, reported
later in thrust's merge_sort. ConvAlgo.Native trains correctly at about 4 % cost.

Changing the algorithm after the model is built is only safe because spconv keeps every weight
in KRSC layout whatever the algorithm; this module checks spconv.constants.ALL_WEIGHT_IS_KRSC
instead of trusting it. Every SparseConvolution / SparseMaxPool is switched, so layers that share
an indice_key keep using one algorithm. Unset (or "default") leaves the model untouched.
"""

import logging
import os

ENV_VAR = "POINTCEPT_SPCONV_ALGO"

logger = logging.getLogger(__name__)


def requested_algo():
    """The algorithm asked for in POINTCEPT_SPCONV_ALGO: "native", or None for spconv's default."""
    value = os.environ.get(ENV_VAR, "").strip().lower()
    if value in ("", "default"):
        return None
    if value != "native":
        raise ValueError(f"{ENV_VAR} must be 'native' or 'default', got {value!r}")
    return value


def all_weight_is_krsc():
    """spconv's ALL_WEIGHT_IS_KRSC (spconv.constants; spconv.core in some builds)."""
    try:
        from spconv.constants import ALL_WEIGHT_IS_KRSC
    except ImportError:
        from spconv.core import ALL_WEIGHT_IS_KRSC
    return bool(ALL_WEIGHT_IS_KRSC)


def force_native_algo(model):
    """Set ``algo = ConvAlgo.Native`` on every spconv conv / max-pool module of ``model``.

    Does nothing unless POINTCEPT_SPCONV_ALGO=native. Returns the model, so it can wrap a build.
    """
    if requested_algo() is None:
        return model
    from spconv.core import ConvAlgo
    from spconv.pytorch.conv import SparseConvolution
    from spconv.pytorch.pool import SparseMaxPool

    if not all_weight_is_krsc():
        raise RuntimeError(
            "spconv.constants.ALL_WEIGHT_IS_KRSC is False in this spconv build: weights are laid "
            f"out per algorithm, so {ENV_VAR}=native cannot switch a built model; unset it"
        )
    switched = 0
    for module in model.modules():
        if isinstance(module, (SparseConvolution, SparseMaxPool)):
            module.algo = ConvAlgo.Native
            switched += 1
    if switched:
        logger.info("%s=native: %d spconv layers use ConvAlgo.Native", ENV_VAR, switched)
    return model
