"""cuforge's demo CUDA extension (saxpy, sum of squares)."""

import torch  # noqa: F401  (loads libtorch before the extension)

from ._C import saxpy_, sumsq

__all__ = ["saxpy_", "sumsq"]
