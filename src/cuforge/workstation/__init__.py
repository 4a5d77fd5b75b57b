"""A user's machine and checkout: ``cuforge setup`` (``setup.py``), ``doctor``, the GPU as NVML
sees it, ``shell`` and MILo's ``mesh-convert``."""
