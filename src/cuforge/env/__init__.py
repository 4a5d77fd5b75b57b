"""Environments and toolchains: the combo venvs, the CUDA toolkit and host compiler, torch as
the env has it, the programs cuforge runs (uv, a Python), the install overlays of a build's
dependencies and a checkout's requirements, system headers, emulation under QEMU and what
`cuforge clean` removes."""
