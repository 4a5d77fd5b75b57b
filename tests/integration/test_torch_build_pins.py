"""A published wheel's torch pin names the CUDA build (cuforge.publish.wheelmeta): offered another build
of the same torch version (``+cu126``, ``+cu128``, ``+rocm6.4``, ``+cpu``, or a ``+cu135`` no
table knows), pip and uv refuse; offered the build it was compiled against, they install it and
it imports.

All real but tiny and offline: an "extension" wheel whose ``_ext.so`` (g++) needs ``libc10.so``
and a c10-like symbol, published through ``wheelmeta`` as the pipeline does, against a torch
that looks like PyPI's plain 2.14.1 (a CUDA 13.0 build: ``Requires-Dist:
cuda-toolkit[cudart]==13.0.3``). Fake torch wheels of each build, each offered alone in a
``--find-links`` directory, with fake ``cuda-toolkit`` wheels of every CUDA on offer beside
them, so a refusal comes from the pin and not from something missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "verify"))
import verify_builders as vb  # noqa: E402

from cuforge.publish import importguard, rewrite, wheelmeta  # noqa: E402
from cuforge.publish.wheelhouse import write_indexes  # noqa: E402
from cuforge.env.venv import find_uv  # noqa: E402
from test_wheel_pins import EXT_INIT, TORCH_INIT, _gxx  # noqa: E402  (the same fake torch and extension)

TREE = Path("linux-x86_64") / "cu130" / "torch2.14.1-cp311"
TAG = f"cp{sys.version_info.major}{sys.version_info.minor}-cp{sys.version_info.major}" \
      f"{sys.version_info.minor}-linux_x86_64"
RUNTIME = 'cuda-toolkit[cudart]==13.0.3; platform_system == "Linux"'   # torch 2.14.1's, cut down
# each build of torch 2.14.1 PyTorch publishes (and one no table knows), with the CUDA runtime
# its metadata requires; None: a CPU or ROCm build, which requires none
WRONG = {"2.14.1+cu126": "12.6.3", "2.14.1+cu128": "12.8.1", "2.14.1+rocm6.4": None,
         "2.14.1+cpu": None, "2.14.1+cu135": "13.5.0"}
RIGHT = {"2.14.1": "13.0.3",          # PyPI's plain 2.14.1, the build it was compiled against
         "2.14.1+cu130": "13.0.3"}    # the same build from download.pytorch.org


@pytest.fixture(scope="module")
def offers(tmp_path_factory) -> dict:
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    tmp = tmp_path_factory.mktemp("builds")
    c10 = _gxx(tmp / "libc10.so", "namespace helper { int add(int a, int b) { return a + b; } }\n",
               "-Wl,-soname,libc10.so")
    ext_so = _gxx(tmp / "_ext.so", "namespace helper { int add(int a, int b); }\n"
                  'extern "C" int tiny_add(int a, int b) { return helper::add(a, b); }\n',
                  f"-L{tmp}", "-lc10")
    runtimes = tmp / "cuda-runtimes"           # every CUDA's runtime wheel, always on offer
    for cuda in {*filter(None, WRONG.values()), *RIGHT.values()}:
        vb.make_wheel(runtimes, "cuda-toolkit", {f"cuda_toolkit_{cuda.replace('.', '_')}.py": ""},
                      version=cuda, extras=("cudart",))
    torches = {}
    for version, cuda in {**WRONG, **RIGHT}.items():
        dest = tmp / "torch" / version         # one directory per build: each offered alone
        vb.make_wheel(dest, "torch", version=version, files=
                      {"torch/__init__.py": TORCH_INIT.format(version=version),
                       "torch/lib/libc10.so": c10}, tag=TAG,
                      requires=(f'cuda-toolkit[cudart]=={cuda}; platform_system == "Linux"',)
                      if cuda else ())
        torches[version] = dest
    upstream = vb.make_wheel(tmp / "upstream", "cuforge-tiny-ext", version="0.1", files=
                             {"cuforge_tiny_ext/__init__.py": EXT_INIT,
                              "cuforge_tiny_ext/_ext.so": ext_so}, tag=TAG, requires=("torch",))
    house = tmp / "wheelhouse" / TREE
    built_against = wheelmeta.TorchBuild("2.14.1", (RUNTIME,))
    rewrite.for_wheelhouse(upstream, house, house, accel="cu130", torch=built_against)
    # the control: the same wheel as main published it (``!=+cpu`` only: any CUDA build let in)
    control = tmp / "control" / TREE
    vb.make_wheel(control, "cuforge-tiny-ext", version="0.1+cu130torch2.14.1", files=
                  {"cuforge_tiny_ext/__init__.py": EXT_INIT, "cuforge_tiny_ext/_ext.so": ext_so},
                  tag=TAG, requires=("torch!=2.14.1+cpu,==2.14.1",))
    write_indexes([house, control])
    return {"house": house / "simple", "control": control / "simple", "torches": torches,
            "runtimes": runtimes}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("UV_", "PIP_")) and k != "VIRTUAL_ENV"}
    return {**env, "PIP_CONFIG_FILE": os.devnull}


def _install(tool: str, venv: Path, index: Path, torch_dir: Path, runtimes: Path):
    subprocess.run([find_uv(), "venv", "-q", "--python", sys.executable, str(venv)], check=True,
                   env=_env())
    python = venv / "bin" / "python"
    sources = ["--index-url", index.as_uri(), "--find-links", str(torch_dir),
               "--find-links", str(runtimes)]
    if tool == "pip":
        argv = [sys.executable, "-m", "pip", "--python", str(python), "install",
                "--disable-pip-version-check", "--no-cache-dir", *sources]
    else:
        argv = [find_uv(), "pip", "install", "--no-config", "--no-cache", "--offline",
                "--python", str(python), *sources, "--index-strategy", "unsafe-best-match"]
    proc = subprocess.run([*argv, "cuforge-tiny-ext"], capture_output=True, text=True,
                          env=_env(), timeout=300)
    return proc, python


def _torch(python: Path) -> str | None:
    out = subprocess.run([str(python), "-c", "import importlib.metadata as m; "
                          "print(m.version('torch'))"], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def test_the_pin_excludes_every_other_build_and_carries_the_cuda_runtime(offers):
    wheel = next(offers["house"].parent.glob("*.whl"))
    _version, requires = wheelmeta.metadata(wheel)
    torch_line = next(r for r in requires if r.startswith("torch"))
    assert wheelmeta.admitted_builds(torch_line, "2.14.1") == ["", "cu130"]
    assert RUNTIME in requires                       # copied from the build torch, verbatim
    assert wheelmeta.check(wheel).status == "pass"
    control = next(offers["control"].parent.glob("*.whl"))
    detail = wheelmeta.check(control).detail         # the old pin: verify says why it is loose
    loose = len(wheelmeta.known_labels()) - 1          # every label but +cpu
    assert f"lets in {loose} builds of torch 2.14.1 (+cpu.cxx11.abi, +cu118" in detail, detail
    assert "publish it again" in detail


@pytest.mark.parametrize("tool", ["pip", "uv"])
@pytest.mark.parametrize("build", list(WRONG))
def test_another_build_of_the_same_torch_is_refused(offers, tmp_path, tool, build):
    proc, python = _install(tool, tmp_path / "venv", offers["house"], offers["torches"][build],
                            offers["runtimes"])
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0, said
    refusals = ("ResolutionImpossible", "No matching distribution found for torch",
                "conflicting dependencies") if tool == "pip" else ("No solution found",)
    assert any(r in said for r in refusals), said
    if build.endswith("+cu135"):    # a label no table has: refused by its CUDA runtime alone
        assert "cuda-toolkit" in said, said
    assert _torch(python) is None


@pytest.mark.parametrize("tool", ["pip", "uv"])
@pytest.mark.parametrize("build", list(RIGHT))
def test_the_build_it_was_compiled_against_installs_and_imports(offers, tmp_path, tool, build):
    proc, python = _install(tool, tmp_path / "venv", offers["house"], offers["torches"][build],
                            offers["runtimes"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _torch(python) == build
    ok = subprocess.run([str(python), "-c", "import cuforge_tiny_ext as m; print(m.add(2, 3))"],
                        capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.strip() == "5", ok.stderr


@pytest.mark.parametrize("tool", ["pip", "uv"])
def test_control_the_old_pin_lets_another_cuda_build_in(offers, tmp_path, tool):
    """What the issue saw: ``torch!=2.14.1+cpu,==2.14.1`` installs beside ``+cu126``."""
    proc, python = _install(tool, tmp_path / "venv", offers["control"],
                            offers["torches"]["2.14.1+cu126"], offers["runtimes"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _torch(python) == "2.14.1+cu126"


SWAPS = {"2.14.1+cu126": "cu126", "2.14.1+rocm6.4": "rocm6.4"}


@pytest.mark.parametrize("tool", ["pip", "uv"])
@pytest.mark.parametrize("swap", list(SWAPS))
def test_a_later_swap_of_torch_is_refused_at_import(offers, tmp_path, tool, swap):
    """What pins cannot stop: a command that installs torch alone does not resolve the wheel's
    requirements, so it swaps the build (pip warns, uv did not). The wheel's import guard
    (cuforge.publish.importguard) then refuses the import with one line naming both builds; nothing
    else in the env is touched by it."""
    _, python = _install(tool, tmp_path / "venv", offers["house"], offers["torches"]["2.14.1"],
                         offers["runtimes"])
    assert _torch(python) == "2.14.1"
    sources = ["--no-index", "--find-links", str(offers["torches"][swap]),
               "--find-links", str(offers["runtimes"]), f"torch=={swap}"]
    argv = [sys.executable, "-m", "pip", "--python", str(python), "install",
            "--disable-pip-version-check", "--no-cache-dir", *sources] if tool == "pip" else \
        [find_uv(), "pip", "install", "--no-config", "--no-cache", "--offline", "--python",
         str(python), *sources]
    swapped = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=300)
    assert swapped.returncode == 0, swapped.stdout + swapped.stderr
    assert _torch(python) == swap
    # pip warns afterwards ("cuforge-tiny-ext ... requires torch..., but you have torch
    # 2.14.1+cu126 which is incompatible"); uv 0.13.9 said nothing when this was written
    assert tool == "uv" or f"but you have torch {swap}" in swapped.stderr, swapped.stderr
    check = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "check"],
                           capture_output=True, text=True, env=_env())
    assert check.returncode != 0 and "cuforge-tiny-ext" in check.stdout, check.stdout
    refused = subprocess.run([str(python), "-c", "import cuforge_tiny_ext"], capture_output=True,
                             text=True)
    line = (f"cuforge-tiny-ext 0.1+cu130torch2.14.1 was built for torch 2.14.1 (cu130), but "
            f"this environment has torch {swap} ({SWAPS[swap]}): install torch 2.14.1 (cu130), "
            f"or a build of it for torch {swap}")
    assert refused.returncode != 0 and refused.stderr.splitlines()[-1] == f"ImportError: {line}", \
        refused.stderr
    other = subprocess.run([str(python), "-c", "import json, torch; print(torch.__version__)"],
                           capture_output=True, text=True)
    assert other.returncode == 0 and other.stdout.strip() == swap, other.stderr


def test_the_guard_is_in_the_published_wheel(offers):
    import zipfile
    (wheel,) = offers["house"].parent.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        pth = zf.read("_cuforge_guard_cuforge_tiny_ext.pth").decode()
    assert pth == "import _cuforge_guard_cuforge_tiny_ext\n"
    assert "_cuforge_guard_cuforge_tiny_ext.py" in names
    assert wheelmeta.record_problems(wheel) == []       # listed in RECORD like every file
    assert importguard.top_level_names(names) == ["cuforge_tiny_ext"]
