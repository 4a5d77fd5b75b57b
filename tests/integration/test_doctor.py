"""`cuforge doctor` on real wheels: .so files compiled by nvcc for known arches, rated for a
GPU given by --gpu-arch (no GPU here: the local probe must say so, not pass silently)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "verify"))
import verify_builders as vb  # noqa: E402

from cuforge.workstation import gpu  # noqa: E402
from cuforge.config.arches import Arch  # noqa: E402
from cuforge.workstation.doctor import run_doctor, wheel_runs_on  # noqa: E402
from cuforge.core.project import find_project  # noqa: E402
from cuforge.publish.wheelhouse import Entry, Wheelhouse  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SM90_PTX = ("-gencode", "arch=compute_90,code=[sm_90,compute_90]")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    """kernels: sm_90 SASS + compute_90 PTX; cpu: a C++ .so without device code."""
    if not vb.have("nvcc"):
        pytest.skip("needs nvcc")
    out = tmp_path_factory.mktemp("doctor")
    so = vb.nvcc_shared(["kernel.cu"], out / "kern.so", *SM90_PTX)
    cpu = vb.gxx_shared(["helper.cpp"], out / "cpu.so")
    tag = "cp311-cp311-linux_x86_64"
    return {
        "kernels": vb.make_wheel(out, "kernels", {"kernels/_k.so": so}, tag=tag),
        "cpu": vb.make_wheel(out, "cpuonly", {"cpuonly/_c.so": cpu}, tag=tag),
    }


@pytest.mark.parametrize(("device", "runs"), [
    (Arch(9, 0), "native"),       # H200
    (Arch(12, 0), "ptx"),         # RTX 50: only compute_90 PTX fits
    (Arch(8, 6), "none"),         # older than every image
])
def test_wheel_rated_for_a_device(wheels, device: Arch, runs: str) -> None:
    rated = wheel_runs_on(wheels["kernels"], device)
    assert rated.runs == runs, rated
    if runs == "ptx":
        assert "compute_90" in rated.detail and "first launch is slow" in rated.detail
    assert "1 kernel groups" not in rated.detail and "1 of 1 " not in rated.detail, rated


def test_cpu_only_wheel_has_no_device_code(wheels) -> None:
    assert wheel_runs_on(wheels["cpu"], Arch(12, 0)).runs == "no device code"


def test_doctor_reports_wheelhouse_at_80_columns(wheels, tmp_path: Path, monkeypatch) -> None:
    house = tmp_path / "wheelhouse" / "linux-x86_64" / "cu130" / "torch2.14.1-cp311"
    staged = tmp_path / "staged"
    staged.mkdir()
    for name, wheel in wheels.items():
        copy = staged / wheel.name
        copy.write_bytes(wheel.read_bytes())
        Wheelhouse(house).publish(copy, Entry(package=name, status="compiled", wheel=wheel.name,
                                              arches_embedded={"sass": ["90"], "ptx": ["90"]}))
    monkeypatch.setenv("CUFORGE_WHEELHOUSE", str(tmp_path / "wheelhouse"))
    out = Console(file=io.StringIO(), width=80, record=True, color_system=None)
    run_doctor(find_project(REPO), gpu_arch="12.1", console=out)
    text = out.export_text()
    assert "…" not in text and max(map(len, text.splitlines())) <= 80
    assert "sm_121 (--gpu-arch)" in text
    lines = {line.split()[0]: line for line in text.splitlines() if line.strip()}
    assert "ptx" in lines["kernels"] and "no device code" in lines["cpu"]


def test_no_gpu_is_said_not_passed() -> None:
    report = gpu.probe()
    if report.gpus:
        pytest.skip("this machine has a GPU")
    assert report.summary.startswith("no GPU (") and report.driver is None
    out = Console(file=io.StringIO(), width=80, record=True, color_system=None)
    run_doctor(find_project(REPO), console=out)
    text = out.export_text()
    assert "no GPU" in text and "CUDA 13.0 needs driver >= 580.65.06" in " ".join(text.split())


def test_old_driver_gets_a_fix_line() -> None:
    from packaging.version import Version
    old = gpu.GpuReport((gpu.Gpu(0, "H200", Arch(9, 0), 141 * 2**30),), "575.51.03",
                        Version("12.9"))
    ok, text = gpu.driver_verdict(old, Version("13.0"))
    assert not ok and "fix: install NVIDIA driver >= 580.65.06" in text
    assert gpu.driver_verdict(old, Version("12.8"))[0]


def _project_with(tmp_path: Path, combos: str) -> Path:
    """A project sharing this one's recipes, patches and smoke tests, with its own combos."""
    root = tmp_path / "project"
    (root / "envs").mkdir(parents=True)
    for name in ("recipes", "patches", "smoke", "stacks", "native"):
        (root / name).symlink_to(REPO / name)
    for name in ("accels.toml", "cache.toml", "ci.toml"):
        (root / "envs" / name).write_text((REPO / "envs" / name).read_text())
    (root / "envs" / "combos.toml").write_text(combos)
    (root / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())
    return root


def test_doctor_judges_the_combos_in_use(tmp_path: Path, monkeypatch) -> None:
    """A combo whose Python this machine lacks (3.99) fails doctor only when it is the one in
    use (--combo, or an env / wheelhouse here); headers count only for packages in use."""
    root = _project_with(tmp_path, '[[combo]]\npython = "3.11"\naccel = "cu130"\n'
                         'torch = "2.14.1"\n\n[[combo]]\npython = "3.99"\naccel = "cu130"\n'
                         'torch = "2.14.1"\n')
    monkeypatch.setenv("CUFORGE_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("CUFORGE_WHEELHOUSE", str(tmp_path / "wheelhouse"))
    project = find_project(root=root)

    def doctor(**kw) -> tuple[int, str]:
        out = Console(file=io.StringIO(), width=200, record=True, color_system=None)
        rc = run_doctor(project, console=out, **kw)
        return rc, out.export_text()

    rc, text = doctor()
    assert "judged: no combo has an env or a wheelhouse here" in text
    assert rc == 0, text
    lines = {line.split()[1]: line for line in text.splitlines() if "combo 3.99" in line}
    assert "info" in lines["3.99-cu130"] and "not in use here" in text, text
    headers = [line for line in text.splitlines() if ": headers" in line]
    assert headers and all(line.split()[2] in ("ok", "info") for line in headers), headers

    (tmp_path / "wheelhouse" / "linux-x86_64" / "cu130" / "torch2.14.1-cp311").mkdir(parents=True)
    rc, text = doctor()
    assert "judged: 3.11-cu130 (an env or a wheelhouse here)" in text
    assert rc == 0, text                          # 3.99's missing Python is information

    rc, text = doctor(combo="3.99-cu130")         # the combo in use now lacks its Python
    assert rc == 3, text
    row = next(line for line in text.splitlines() if "combo 3.99-cu130: python" in line)
    assert row.split()[3] == "missing", row

    (tmp_path / "state" / "envs" / "3.99-cu130-torch2.14.1").mkdir(parents=True)   # an env
    assert doctor()[0] == 3


def _doctor(project, **kw) -> tuple[int, str]:
    out = Console(file=io.StringIO(), width=200, record=True, color_system=None)
    rc = run_doctor(project, console=out, **kw)
    return rc, out.export_text()


def test_an_interpreter_without_torch_is_not_ok_and_the_dry_run_refuses_it(tmp_path: Path,
                                                                           monkeypatch) -> None:
    """`interpreter = ...` (the h200 combo's python3) is probed as the build will use it:
    one without torch is `missing` (exit 3), and the dry run refuses it as the build does
    instead of planning torch wheels for a Python that cannot build them."""
    python = Path(sys.executable)   # the test venv: Python 3.11, no torch
    root = _project_with(tmp_path, f'[[combo]]\npython = "3.11"\naccel = "cu130"\n'
                         f'torch = "2.11.0"\nname = "mine"\ninterpreter = "{python}"\n'
                         'toolkit = "system"\n')
    monkeypatch.setenv("CUFORGE_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("CUFORGE_WHEELHOUSE", str(tmp_path / "wheelhouse"))
    rc, text = _doctor(find_project(root=root), combo="mine")
    row = next(line for line in text.splitlines() if "combo mine: interpreter" in line)
    assert rc == 3 and row.split()[3] == "missing" and "cannot import torch" in row, text
    dry = subprocess.run([sys.executable, "-m", "cuforge", "--root", str(root), "build",
                          "--combo", "mine", "--dry-run"], capture_output=True, text=True,
                         env={**os.environ, "CUFORGE_STATE": str(tmp_path / "state")})
    assert dry.returncode == 3 and "cannot import torch" in dry.stderr, dry.stderr
    assert "torch2.11.0-cp" not in dry.stdout and "Traceback" not in dry.stderr


def test_a_gpu_that_runs_no_wheel_is_not_ok(wheels, tmp_path: Path, monkeypatch) -> None:
    """--gpu-arch 8.6 against a wheelhouse of sm_90 code: every package `none`, exit 3 and
    the fix; 9.0 runs it natively, exit 0."""
    root = _project_with(tmp_path, '[[combo]]\npython = "3.11"\naccel = "cu130"\n'
                         'torch = "2.14.1"\n')
    monkeypatch.setenv("CUFORGE_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("CUFORGE_WHEELHOUSE", str(tmp_path / "wheelhouse"))
    house = tmp_path / "wheelhouse" / "linux-x86_64" / "cu130" / "torch2.14.1-cp311"
    copy = tmp_path / wheels["kernels"].name
    copy.write_bytes(wheels["kernels"].read_bytes())
    Wheelhouse(house).publish(copy, Entry(package="kernels", status="compiled",
                                          wheel=copy.name))
    project = find_project(root=root)
    rc, text = _doctor(project, gpu_arch="8.6")
    assert rc == 3 and "1 package cannot run on sm_86: kernels" in text, text
    assert "--cuda-arch 8.6" in text
    rc, text = _doctor(project, gpu_arch="9.0")
    assert rc == 0 and "cannot run" not in text, text


# -- doctor's summary tells the truth (issue 50 point 3) -----------------------------------
def _judged_project(tmp_path: Path, monkeypatch) -> Path:
    root = _project_with(tmp_path, '[[combo]]\npython = "3.11"\naccel = "cu130"\n'
                         'torch = "2.14.1"\n\n[[combo]]\npython = "3.99"\naccel = "cu130"\n'
                         'torch = "2.14.1"\n')
    monkeypatch.setenv("CUFORGE_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("CUFORGE_WHEELHOUSE", str(tmp_path / "wheelhouse"))
    return root


def test_doctor_ends_with_a_one_line_verdict(tmp_path: Path, monkeypatch) -> None:
    project = find_project(root=_judged_project(tmp_path, monkeypatch))
    rc, text = _doctor(project, combo="3.11-cu130")
    assert rc == 0 and text.strip().splitlines()[-1] == "doctor: ok (3.11-cu130)", text
    rc, text = _doctor(project, combo="3.99-cu130")
    last = text.strip().splitlines()[-1]
    assert rc == 3 and last.startswith("doctor: 1 problem (3.99-cu130): combo 3.99-cu130: "
                                       "python"), last
    # a combo not in use is one row of information, not three
    assert len([ln for ln in text.splitlines() if "combo 3.11-cu130" in ln]) == 1, text


def test_emulation_says_its_fix_once_and_names_no_other_checkout(tmp_path: Path,
                                                                  monkeypatch) -> None:
    """An x86 machine whose binfmt_misc runs aarch64 binaries with another clone's QEMU,
    without cross compilers or the target's Python here: doctor printed the same long fix
    three times, named the other clone's QEMU, and drew a 506-character rule."""
    from cuforge.env import emulation, emulation_setup
    root = _judged_project(tmp_path, monkeypatch)
    (root / "envs" / "emulation.toml").write_text((REPO / "envs" / "emulation.toml").read_text())
    emu = emulation.load(find_project(root=root))["linux-aarch64"]
    other = tmp_path / "other-clone" / ".cuforge" / "emulation" / "linux-aarch64" / "qemu"
    binfmt = tmp_path / "binfmt_misc"   # the kernel's table, as files (what /proc holds)
    binfmt.mkdir()
    (binfmt / "register").write_text("")
    (binfmt / "qemu-aarch64").write_text(
        f"enabled\ninterpreter {other / emu.qemu_binary}\nflags: F\noffset 0\n"
        f"magic {emu.binfmt_magic.hex()}\nmask {'ff' * len(emu.binfmt_magic)}\n")
    monkeypatch.setattr(emulation_setup, "BINFMT", binfmt)
    found = [f for f in emulation_setup.check(tmp_path / "state", emu) if not f.ok]
    assert len(found) >= 2, found   # the case the issue saw: several findings, one fix
    piped = Console(file=io.StringIO(), width=10_000, record=True, color_system=None)
    rc = run_doctor(find_project(root=root), combo="3.11-cu130", console=piped)
    text = "\n".join(line.rstrip() for line in piped.export_text().splitlines())
    rows = [ln for ln in text.splitlines() if ln.strip().startswith("emulation linux-aarch64")]
    assert len(rows) == 1 and "not yet" in rows[0], rows
    assert text.count("emulation setup") == 1, text
    assert "other-clone" not in text, text
    assert "this checkout has no QEMU of its own" in rows[0], rows
    assert max(len(ln) for ln in text.splitlines()) < 200, max(text.splitlines(), key=len)
    assert rc == 0 and text.strip().splitlines()[-1] == "doctor: ok (3.11-cu130)"


def test_a_failed_build_is_no_wheel_verdict_and_the_newest_line_wins(wheels, tmp_path: Path,
                                                                      monkeypatch) -> None:
    """A fetch that failed wrote a FAILED line: doctor showed `FAILED` in the wheel table as
    if a wheel had been rated. The newest line of a package is its state."""
    project = find_project(root=_judged_project(tmp_path, monkeypatch))
    house = tmp_path / "wheelhouse" / "linux-x86_64" / "cu130" / "torch2.14.1-cp311"
    copy = tmp_path / wheels["kernels"].name
    copy.write_bytes(wheels["kernels"].read_bytes())
    wh = Wheelhouse(house)
    wh.publish(None, Entry(package="kernels", status="FAILED", reason="fetch https://x: 404"))
    wh.publish(copy, Entry(package="kernels", status="compiled", wheel=copy.name))   # fixed
    wh.publish(None, Entry(package="cpuonly", status="compiled", wheel="cpuonly-1.whl"))
    wh.publish(None, Entry(package="cpuonly", status="FAILED",
                           reason="fetch https://y/cpuonly.git failed: exit 128\nmore"))
    rc, text = _doctor(project, gpu_arch="9.0")
    rows = {ln.split()[0]: ln for ln in text.splitlines() if ln.strip()}
    assert rows["kernels"].split()[1] == "native", rows["kernels"]       # newest: compiled
    assert rows["cpuonly"].split()[1:3] == ["no", "wheel"], rows["cpuonly"]
    assert "its last build failed: fetch https://y/cpuonly.git failed: exit 128" in \
        rows["cpuonly"], rows["cpuonly"]
    assert " FAILED " not in text, text
    assert rc == 0, text
