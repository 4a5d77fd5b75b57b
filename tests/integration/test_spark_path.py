"""The DGX Spark's own path, rehearsed on this x86_64 machine (slow: ~15 min on 2 cores when
nothing exists yet, mostly pip and uv under QEMU; docs/dgx-spark.md).

Inside the emulation root (`cuforge emulation run`: a chroot of Debian's arm64 userland, run by
QEMU) an aarch64 venv of the root's Python 3.11 gets cuforge (`pip install -e`), and that
cuforge builds for combo spark-3.11 exactly as on an aarch64 machine: the sbsa toolkit wheels'
nvcc, Debian's arm64 g++-12. The kernel's own record of every program it started (strace's
execve trace) is then read: each one must be AArch64 code. The package is a torch CUDA
extension without torch headers (tests/fixtures/cache_ext): an emulated cc1plus takes many
minutes on `torch/extension.h`, and the demo built so (measured by hand and in `nox -s bench
-- --only spark`) proves nothing more about which compilers ran.

Needs `cuforge emulation setup` and root (the chroot); skips otherwise, saying why, and with
CUFORGE_REQUIRE_EMULATION=1 (CI) fails instead.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from cuforge.env import emulation, rootrun
from cuforge.config import platforms
from cuforge.core.project import find_project
from cuforge.verify.fatbin import read_fatbin

import exec_trace

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "cache_ext"
COMBO = "spark-3.11"
COMBO_DIR = Path("linux-aarch64") / "cu130" / "torch2.14.1-cp311"
# what a build of a torch CUDA extension must have run (nvcc's steps, gcc's, the linker)
COMPILERS = {"nvcc", "cudafe++", "cicc", "ptxas", "fatbinary", "g++", "cc1plus", "as", "ld"}
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(platforms.build_platform().machine == "aarch64",
                                 reason="an aarch64 machine runs this path natively")]


def _fail_or_skip(why: str) -> None:
    if os.environ.get("CUFORGE_REQUIRE_EMULATION"):
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="module")
def target():
    project = find_project(ROOT)
    emu = emulation.for_platform(project, "linux-aarch64")
    # (the registration may be another checkout's QEMU: the root runs the same either way)
    if why := rootrun.unusable(project.state_dir, emu):
        _fail_or_skip(f"cannot enter the aarch64 root: {why}")
    if shutil.which("strace") is None:
        _fail_or_skip("strace is not installed (apt-get install strace): it records which "
                      "programs ran")
    return project, emu


def _inside(*argv: str, env: dict | None = None, log: Path | None = None
            ) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "cuforge", "emulation", "run", "--", *argv]
    if log is not None:
        command = [*exec_trace.strace_argv(log), *command]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


@pytest.fixture(scope="module")
def aarch64_cuforge(target):
    """cuforge installed, as a user installs it, in a venv of the root's Python (~7 min the
    first time: ensurepip and pip run emulated)."""
    project, emu = target
    venv = emu.home(project.state_dir) / "cuforge-venv"
    if not (venv / "bin" / "cuforge").exists():
        shutil.rmtree(venv, ignore_errors=True)
        for argv in (["python3.11", "-m", "venv", str(venv)],
                     [str(venv / "bin" / "pip"), "install", "-q", "-e", str(ROOT)]):
            proc = _inside(*argv)
            assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return venv / "bin" / "cuforge"


@pytest.fixture(scope="module")
def built(target, aarch64_cuforge, tmp_path_factory):
    """`cuforge build` of the fixture by the aarch64 cuforge, in a throw-away project whose
    state is the checkout's (the spark-3.11 env is made once there), every exec recorded."""
    project, emu = target
    tmp = Path(tempfile_dir(project))
    proj = tmp / "project"
    shutil.copytree(ROOT / "envs", proj / "envs")
    (proj / "native").symlink_to(ROOT / "native")
    (proj / "recipes").mkdir()
    (proj / "recipes" / "cachekern.toml").write_text(
        f'kind = "setuptools"\nmodules = ["cachekern"]\n[source]\npath = "{FIXTURE}"\n')
    wheelhouse, log = tmp / "wheelhouse", tmp / "execve.log"
    env = {"CUFORGE_ROOT": str(proj), "CUFORGE_STATE": str(project.state_dir),
           "CUFORGE_WHEELHOUSE": str(wheelhouse), "CUFORGE_BUILD_DIR": str(tmp / "work")}
    proc = _inside(str(aarch64_cuforge), "build", "--combo", COMBO, "--only", "cachekern",
                   "--rebuild", "--cache", "off", env=env, log=log)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    entry = rootrun.entry(project.state_dir, emu, ROOT, ["true"], cwd=ROOT)
    ran = exec_trace.machines(entry, exec_trace.after_entering(exec_trace.execs(log)))
    yield wheelhouse, ran, proc.stdout + proc.stderr
    shutil.rmtree(tmp, ignore_errors=True)


def tempfile_dir(project) -> str:
    """A throw-away dir the root sees: under the checkout's state (bound into the root)."""
    import tempfile
    base = project.state_dir / "tmp"
    base.mkdir(parents=True, exist_ok=True)
    return tempfile.mkdtemp(prefix="spark-path-", dir=base)


def test_every_program_that_ran_was_aarch64(built):
    _, ran, _ = built
    names = {Path(r.path).name for r in ran}
    # the names gcc and nvcc run: g++ may run as aarch64-linux-gnu-g++-12, ld via collect2
    assert COMPILERS - names - {"g++", "ld"} == set(), sorted(names)
    assert {"collect2", "ld"} & names and any("g++" in n for n in names), sorted(names)
    foreign = [f"{r.path} ({r.machine or 'not an ELF file'}{', via ' + r.via if r.via else ''})"
               for r in ran if r.machine != "EM_AARCH64"]
    assert not foreign, "non-aarch64 programs ran:\n" + "\n".join(foreign)


def test_the_check_catches_an_x86_64_program(target, tmp_path):
    """The same record, for a host program that can run in the root: QEMU itself (a static
    x86_64 binary in the bound state dir) must be reported, and a root program must not."""
    project, emu = target
    log = tmp_path / "execve.log"
    qemu = emu.qemu_path(project.state_dir)
    proc = _inside("sh", "-c", f"{qemu} --version >/dev/null; uname -m", log=log)
    assert proc.returncode == 0 and proc.stdout.strip() == "aarch64", proc.stderr
    entry = rootrun.entry(project.state_dir, emu, ROOT, ["true"], cwd=ROOT)
    ran = {Path(r.path).name: r.machine for r in
           exec_trace.machines(entry, exec_trace.after_entering(exec_trace.execs(log)))}
    assert ran == {"sh": "EM_AARCH64", "qemu-aarch64": "EM_X86_64", "uname": "EM_AARCH64"}


def test_cuforge_built_as_on_an_aarch64_machine(target, built):
    project, _ = target
    wheelhouse, _, _ = built
    entry = json.loads((wheelhouse / COMBO_DIR / "manifest.jsonl").read_text().splitlines()[-1])
    assert entry["status"] == "compiled" and entry["arches_requested"] == "12.1+PTX;12.0"
    for name in ("abi", "symbols", "cudart", "fatbin"):
        assert entry["checks"][name]["status"] == "pass", (name, entry["checks"][name])
    # the fixture leaves libcudart to torch (as on x86_64): it imports after `import torch`
    imported = entry["checks"]["import"]
    assert imported["status"] == "pass" or (imported["status"] == "warn" and imported[
        "detail"].startswith("imported torch, then")), imported
    # no emulation decision: no x86_64 compilers were laid over the env's toolkit
    env = next((project.state_dir / "envs").glob(f"{COMBO}-torch*/"))
    assert not (env / "native-tools").exists()
    with open(env / "cuda" / "bin" / "nvcc", "rb") as fh:
        assert ELFFile(fh).header["e_machine"] == "EM_AARCH64"


def test_wheel_is_aarch64_with_sm121_sm120_sass_and_compute121_ptx(built, tmp_path):
    wheelhouse, _, _ = built
    wheel = next((wheelhouse / COMBO_DIR).glob("cachekern-*.whl"))
    # its floor's tag (2_17 with its manylinux2014 alias)
    assert re.search(r"-manylinux_2_\d+_aarch64(\.manylinux2014_aarch64)?\.whl$", wheel.name), \
        wheel.name
    with zipfile.ZipFile(wheel) as zf:
        so = Path(zf.extract(next(n for n in zf.namelist() if n.endswith(".so")), tmp_path))
    with open(so, "rb") as fh:
        assert ELFFile(fh).header["e_machine"] == "EM_AARCH64"
    entries = [e for c in read_fatbin(so) or () for e in c.entries]
    assert sorted({e.label for e in entries}) == ["compute_121", "sm_120", "sm_121"]
