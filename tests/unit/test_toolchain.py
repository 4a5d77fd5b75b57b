import shutil
from pathlib import Path

import pytest

from cuforge.env.toolchain import default_jobs, toolkit_root_of

nvcc = shutil.which("nvcc")


@pytest.mark.skipif(nvcc is None, reason="no nvcc on PATH")
def test_root_of_a_wrapper_nvcc(tmp_path):
    """A wrapper script in a bin/ outside the toolkit must not make CUDA_HOME its parent."""
    wrapper = tmp_path / "bin" / "nvcc"
    wrapper.parent.mkdir()
    real = Path(toolkit_root_of(Path(nvcc))) / "bin" / "nvcc"
    wrapper.write_text(f'#!/bin/sh\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    root = toolkit_root_of(wrapper)
    assert (root / "include" / "cuda_runtime.h").is_file()
    assert root != tmp_path


def test_default_jobs_is_bounded_by_cores_and_memory(monkeypatch):
    """nvcc needs ~2.5 GB per job: memory, not cores, limits a small box."""
    import cuforge.env.toolchain as tc
    monkeypatch.setattr(tc.os, "cpu_count", lambda: 16)
    monkeypatch.setattr(tc, "mem_available", lambda: 8 * 2**30)     # 8 GiB free
    assert default_jobs() == 3
    monkeypatch.setattr(tc, "mem_available", lambda: 1 * 2**30)     # less than one job's worth
    assert default_jobs() == 1
    monkeypatch.setattr(tc, "mem_available", lambda: 128 * 2**30)   # cores are the limit
    assert default_jobs() == 16
    monkeypatch.setattr(tc, "mem_available", lambda: None)          # unknown: cores
    assert default_jobs() == 16


def test_assembled_toolkit_is_left_alone_when_unchanged(tmp_path):
    """A second build must not rebuild the toolkit root under a running compiler."""
    from cuforge.env.toolchain import assemble_pypi_toolkit
    site = tmp_path / "site"
    nvcc = site / "nvidia" / "cu13" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text('#!/bin/sh\necho "Cuda compilation tools, release 13.0, V13.0.88"\n')
    nvcc.chmod(0o755)
    (site / "nvidia" / "cu13" / "lib").mkdir()
    (site / "nvidia" / "cu13" / "lib" / "libcudart.so.13").write_text("")
    first = assemble_pypi_toolkit(site, tmp_path / "cuda")
    inode = (first.root / "bin").stat().st_ino
    assert str(first.version) == "13.0"
    assert (first.root / "lib64" / "libcudart.so").exists()
    second = assemble_pypi_toolkit(site, tmp_path / "cuda")
    assert (second.root / "bin").stat().st_ino == inode


def test_python_lookup_and_a_missing_one(monkeypatch):
    from cuforge.core.errors import ToolchainError
    from cuforge.env.programs import find_python
    found = find_python("3.11")                      # PATH or pyenv on this machine
    assert found.name.startswith("python3.11") and "/shims/" not in str(found)
    monkeypatch.setenv("UV_PYTHON_DOWNLOADS", "never")
    with pytest.raises(ToolchainError) as err:
        find_python("3.99")
    assert "uv python install 3.99" in str(err.value)


def _fake_nvcc(path: Path, release: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\necho "Cuda compilation tools, release {release}, V{release}.1"\n')
    path.chmod(0o755)


def test_toolkit_root_offers_every_dev_name_and_merges_cuda12_parts(tmp_path):
    """-lnvrtc needs libnvrtc.so, but the wheels ship only sonames (cumm's link failed);
    CUDA 12 wheels each bring an include/ that must end up in one tree."""
    from cuforge.env.toolchain import assemble_pypi_toolkit
    nv = tmp_path / "site" / "nvidia"
    _fake_nvcc(nv / "cuda_nvcc" / "bin" / "nvcc", "12.8")
    (nv / "cuda_nvcc" / "include" / "crt").mkdir(parents=True)
    (nv / "cuda_runtime" / "include" / "cuda").mkdir(parents=True)
    (nv / "cuda_runtime" / "include" / "cuda_runtime.h").touch()
    (nv / "cuda_runtime" / "include" / "cuda" / "barrier").touch()
    (nv / "cuda_cccl" / "include" / "cuda" / "std").mkdir(parents=True)
    (nv / "cuda_runtime" / "lib").mkdir(parents=True)
    (nv / "cuda_runtime" / "lib" / "libcudart.so.12").touch()
    (nv / "cuda_nvrtc" / "lib").mkdir(parents=True)
    for name in ("libnvrtc.so.12", "libnvrtc-builtins.so.12.8", "libnvrtc.alt.so.12"):
        (nv / "cuda_nvrtc" / "lib" / name).touch()
    tk = assemble_pypi_toolkit(tmp_path / "site", tmp_path / "cuda")
    lib = tk.root / "lib64"
    assert {p.name for p in lib.glob("*.so")} == {"libcudart.so", "libnvrtc.so",
                                                   "libnvrtc-builtins.so"}
    assert (lib / "libnvrtc.so").resolve().name == "libnvrtc.so.12"
    inc = tk.root / "include"
    assert (inc / "crt").is_dir() and (inc / "cuda_runtime.h").exists()
    assert (inc / "cuda" / "barrier").exists() and (inc / "cuda" / "std").is_dir()
    # nvcc is a hard link, so it finds include/ and nvvm/ relative to the assembled root.
    assert not tk.nvcc.is_symlink() and str(tk.version) == "12.8"
    assert (tk.root / "targets" / "x86_64-linux" / "include" / "cuda_runtime.h").exists()


def test_the_docstring_examples_hold():
    """jobs_within_memory's and job_shares' examples are the arithmetic the plan relies on."""
    import doctest

    import cuforge.pipeline.plan
    import cuforge.env.toolchain
    for module in (cuforge.env.toolchain, cuforge.pipeline.plan):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
