"""cuforge: build, verify and publish CUDA-extension wheels per python x torch x CUDA x arch combo."""

__version__ = "0.1.0"
