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


def test_default_jobs_is_bounded():
    assert 1 <= default_jobs()
