"""Check 5: the smoke protocol with real subprocesses (exit 0 / 77 / 1 / SIGSEGV / hang),
and, on a machine without a GPU, ``skipped: no GPU`` — never pass."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "verify"))
import verify_builders as vb  # noqa: E402

from cuforge.verify.smoke import check_smoke, run_smoke  # noqa: E402


def smoke(name: str, **kw):
    return run_smoke(vb.this_python(), vb.SMOKE / name, **kw)


def test_exit_0_passes():
    assert (smoke("passes.py").status, smoke("passes.py").detail) == ("pass", "passed: add_one: 1024 elements ok")


def test_exit_77_is_skipped_with_the_printed_reason():
    result = smoke("skips.py")
    assert (result.status, result.detail) == ("skipped", "skipped: needs two GPUs")


def test_other_exit_fails_with_stderr():
    result = smoke("fails.py")
    assert result.status == "fail"
    assert result.summary == "exited with code 1: ConvAlgo.Native vs MaskImplicitGemm: max abs diff 3.5"


def test_signal_is_a_crash():
    result = smoke("segfaults.py")
    assert (result.status, result.summary) == ("fail", "crashed with SIGSEGV")


def test_hang_times_out():
    result = smoke("hangs.py", timeout=2)
    assert (result.status, result.detail) == ("fail", "timed out after 2 s")


def test_missing_script_fails():
    assert smoke("nope.py").status == "fail"


@pytest.mark.skipif(vb.torch_python() is None, reason=vb.NO_TORCH)
def test_no_gpu_is_skipped_never_passed():
    result = check_smoke(vb.torch_python(), vb.SMOKE / "passes.py", timeout=120)
    if result.status == "pass":  # a GPU machine: the verdict names the device it ran on
        assert " on " in result.summary and "(sm_" in result.summary
    else:
        assert (result.status, result.summary) == ("skipped", "skipped: no GPU")


def test_gpu_probe_failure_is_reported(tmp_path):
    # a "torch" that crashes on import: the probe must fail loudly, not skip
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    result = check_smoke(vb.this_python(), vb.SMOKE / "passes.py", [tmp_path], timeout=60)
    assert result.status == "fail"
    assert result.summary == "cannot probe the GPU: crashed with SIGSEGV while importing torch"
