"""The smoke exit-code protocol and the skip of a device the fatbin does not cover, as pure
functions."""

from __future__ import annotations

from cuforge.config.arches import Arch
from cuforge.verify._proc import describe_exit, last_error_line
from cuforge.verify.fatbin import FatbinContainer, FatbinEntry
from cuforge.verify.smoke import Device, skip_if_uncovered, smoke_verdict


def test_protocol():
    assert smoke_verdict(0, "ran 3 cases\nall equal\n", "").detail == "passed: all equal"
    assert smoke_verdict(0, "pass: 3 cases equal\n", "").detail == "passed: 3 cases equal"
    assert smoke_verdict(77, "skipped: needs CGAL\n", "").detail == "skipped: needs CGAL"
    assert smoke_verdict(77, "no second GPU\n", "").detail == "skipped: no second GPU"
    assert smoke_verdict(1, "", "Traceback...\nAssertionError: mismatch\n").summary == \
        "exited with code 1: AssertionError: mismatch"
    assert smoke_verdict(-6, "", "").summary == "crashed with SIGABRT"
    assert smoke_verdict(None, "", "", timeout=5).detail == "timed out after 5 s"


def test_exit_words():
    assert describe_exit(-11) == "crashed with SIGSEGV"
    assert describe_exit(255) == "exited with code 255"
    assert last_error_line("a\nb\n\n") == "b"


def group(index, sass=(), ptx=()):
    entries = [FatbinEntry("sass", a, (1, 8), 0, 0, True, None) for a in sass]
    entries += [FatbinEntry("ptx", a, (9, 0), 0, 0, True, None) for a in ptx]
    return FatbinContainer(index, 0, tuple(entries))


def test_skip_if_uncovered_skips_uncovered_devices():
    h200 = Device("NVIDIA H200", Arch(9, 0))
    fatbins = {"pkg/_C.so": [group(0, sass=(Arch(12, 0),)), group(1, sass=(Arch(9, 0),))]}
    skipped = skip_if_uncovered(h200, fatbins)
    assert skipped.status == "skipped"
    assert skipped.detail == ("skipped: NVIDIA H200 (sm_90) is not covered by the wheel's fatbin: "
                           "pkg/_C.so group #1 (SASS sm_120, PTX -)")


def test_skip_if_uncovered_lets_ptx_and_compatible_sass_through():
    spark = Device("GB10", Arch(12, 1))
    fatbins = {"a.so": [group(0, sass=(Arch(12, 0),)), group(1, ptx=(Arch(7, 5),))]}
    assert skip_if_uncovered(spark, fatbins) is None


def test_a_smoke_declared_gpu_free_runs_without_a_device_probe(tmp_path):
    """The GPU probe imports torch (absent from this interpreter): a GPU smoke cannot pass
    here, a declared GPU-free one runs at once."""
    import sys
    from pathlib import Path

    from cuforge.verify.smoke import SmokeScript, check_smoke
    script = tmp_path / "check_cpu_only.py"
    script.write_text("print('pass: computed on the CPU')\n")
    free = check_smoke(Path(sys.executable), SmokeScript(script, gpu=False))
    assert free.status == "pass" and "declared GPU-free" in free.summary, free.detail
    assert check_smoke(Path(sys.executable), SmokeScript(script)).status != "pass"


def test_an_interpreter_that_can_reach_no_gpu_skips_the_smoke_without_probing(tmp_path):
    """Under QEMU no device is visible: the smoke says so at once instead of probing (an
    emulated `import torch` outran the probe's 120 s under load and failed pointops' wheel).
    A probe fails here: this interpreter has no torch."""
    import sys
    from pathlib import Path

    from cuforge.verify.smoke import SmokeScript, check_smoke
    script = tmp_path / "check_gpu.py"
    script.write_text("raise SystemExit(1)\n")
    python = Path(sys.executable)
    assert check_smoke(python, SmokeScript(script)).status == "fail"
    skipped = check_smoke(python, SmokeScript(script), no_device="runs under QEMU")
    assert skipped.status == "skipped", skipped.detail
    assert skipped.summary.startswith("skipped: no GPU: runs under QEMU")
