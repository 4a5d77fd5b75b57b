import shutil
from pathlib import Path

import pytest

from cuforge.toolchain import default_jobs, toolkit_root_of

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
    import cuforge.toolchain as tc
    monkeypatch.setattr(tc.os, "cpu_count", lambda: 16)
    monkeypatch.setattr(tc, "_mem_available", lambda: 8 * 2**30)     # 8 GiB free
    assert default_jobs() == 3
    monkeypatch.setattr(tc, "_mem_available", lambda: 1 * 2**30)     # less than one job's worth
    assert default_jobs() == 1
    monkeypatch.setattr(tc, "_mem_available", lambda: 128 * 2**30)   # cores are the limit
    assert default_jobs() == 16
    monkeypatch.setattr(tc, "_mem_available", lambda: None)          # unknown: cores
    assert default_jobs() == 16


def test_assembled_toolkit_is_left_alone_when_unchanged(tmp_path):
    """A second build must not rebuild the toolkit root under a running compiler."""
    from cuforge.toolchain import assemble_pypi_toolkit
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
    from cuforge.errors import ToolchainError
    from cuforge.venv import find_python
    found = find_python("3.11")                      # PATH or pyenv on this machine
    assert found.name.startswith("python3.11") and "/shims/" not in str(found)
    monkeypatch.setenv("UV_PYTHON_DOWNLOADS", "never")
    with pytest.raises(ToolchainError) as err:
        find_python("3.99")
    assert "uv python install 3.99" in str(err.value)
