"""The GPUs of this machine and their driver, read through NVML (``nvidia-ml-py``), the
library behind nvidia-smi: no output parsing. No driver, no GPU: a report that says why.

>>> GpuReport((), None, None, "no NVIDIA driver").summary
'no GPU (no NVIDIA driver)'
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from cuforge import data
from cuforge.config.arches import Arch


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    arch: Arch
    memory_bytes: int


@dataclass(frozen=True)
class GpuReport:
    gpus: tuple[Gpu, ...]
    driver: str | None           # "580.95.05"
    driver_cuda: Version | None  # the newest CUDA this driver runs (NVML's figure)
    reason: str = ""             # why there is no GPU

    @property
    def summary(self) -> str:
        if not self.gpus:
            return f"no GPU ({self.reason})" if self.reason else "no GPU"
        return "; ".join(f"{g.index}: {g.name}, compute capability {g.arch}, "
                         f"{g.memory_bytes / 2**30:.0f} GiB" for g in self.gpus)


def probe() -> GpuReport:
    """Ask NVML for every GPU (name, compute capability, memory) and the driver version."""
    try:
        import pynvml
    except ImportError:
        return GpuReport((), None, None, "nvidia-ml-py is not installed: pip install nvidia-ml-py")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:   # LibraryNotFound / DriverNotLoaded on GPU-less machines
        return GpuReport((), None, None, f"NVML: {err} — no NVIDIA driver is loaded here")
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda_int = pynvml.nvmlSystemGetCudaDriverVersion_v2()     # e.g. 13000
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
            gpus.append(Gpu(i, _text(pynvml.nvmlDeviceGetName(h)), Arch(major, minor),
                            int(pynvml.nvmlDeviceGetMemoryInfo(h).total)))
    except pynvml.NVMLError as err:
        return GpuReport((), None, None, f"NVML: {err}")
    finally:
        pynvml.nvmlShutdown()
    cuda = Version(f"{cuda_int // 1000}.{cuda_int % 1000 // 10}")
    return GpuReport(tuple(gpus), driver, cuda, "" if gpus else "the driver sees no device")


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value   # older bindings: bytes


def min_driver(cuda: Version) -> str | None:
    """The oldest driver for toolkit ``cuda`` (data/cuda_drivers.toml), None if not listed."""
    row = data.table("cuda_drivers")["cuda"].get(f"{cuda.major}.{cuda.minor}")
    return row["driver"] if row else None


def driver_verdict(report: GpuReport, cuda: Version) -> tuple[bool, str]:
    """(ok, text) for running CUDA ``cuda`` code with this machine's driver.

    >>> driver_verdict(GpuReport((), "575.51.03", Version("12.9")), Version("13.0"))[0]
    False
    """
    need = min_driver(cuda)
    if report.driver is None:
        return True, f"no driver here; CUDA {cuda} needs driver >= {need or '?'}"
    ok = report.driver_cuda is not None and report.driver_cuda >= Version(f"{cuda.major}.{cuda.minor}")
    if need:
        try:
            ok = ok and Version(report.driver) >= Version(need)
        except InvalidVersion:
            pass
    if ok:
        return True, f"driver {report.driver} runs CUDA {report.driver_cuda} >= {cuda}"
    return False, (f"driver {report.driver} runs CUDA up to {report.driver_cuda}, the combo needs "
                   f"{cuda}\n  fix: install NVIDIA driver >= {need or f'the one for CUDA {cuda}'}"
                   " (e.g. apt-get install nvidia-driver-<version>), then reboot")
