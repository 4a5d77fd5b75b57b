"""The embedded default really built, end to end, for the 3.11-cu130 combo (slow: creates the
combo env on a fresh machine, ~30 s compile on 2 cores)."""

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

from cuforge.publish.wheelmeta import torch_requirement

ROOT = Path(__file__).resolve().parents[2]
COMBO_DIR = Path("linux-x86_64") / "cu130" / "torch2.14.1-cp311"
pytestmark = pytest.mark.slow


def cuforge(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cuforge", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    wh = tmp_path_factory.mktemp("wheelhouse")
    env = {**os.environ, "CUFORGE_WHEELHOUSE": str(wh), "COLUMNS": "200"}
    first = cuforge("build", "--combo", "3.11-cu130", env=env)
    assert first.returncode == 0, first.stderr[-4000:]
    return wh, env, first


def test_wheel_lands_in_the_combo_directory_with_a_manifest(built):
    wh, _, _ = built
    wheels = list((wh / COMBO_DIR).glob("cuforge_demo-*.whl"))
    assert len(wheels) == 1
    entry = json.loads((wh / COMBO_DIR / "manifest.jsonl").read_text().splitlines()[-1])
    assert entry["package"] == "cuforge-demo" and entry["status"] == "compiled"
    assert entry["arches_embedded"] == {"sass": ["120", "121"], "ptx": ["121"]}
    assert entry["arches_requested"] == "12.0;12.1+PTX"
    assert entry["torch"] == "2.14.1" and entry["python"] == "3.11" and entry["cuda"] == "13.0"
    assert entry["source"] == "native/demo" and Path(entry["log"]).is_file()
    assert entry["checks"]["import"]["status"] == "pass"
    assert entry["checks"]["smoke"]["status"] == "skipped"     # no GPU here: never "pass"
    assert "compiled" in (wh / COMBO_DIR / "manifest.txt").read_text()
    # what it was built against is pinned into the published wheel (cuforge.publish.wheelmeta)
    # tagged for the oldest glibc its files need (issue 63), which the manifest names
    floor = entry["floor"]
    assert floor["tag"].startswith("manylinux_2_") and floor["tag"].endswith("_x86_64"), floor
    assert floor["text"].startswith("glibc >= 2."), floor
    assert "libcudart.so.13" not in floor["left_out"]   # the CUDA runtime is linked statically
    assert wheels[0].name == f"cuforge_demo-0.1.0+cu130torch2.14.1-cp311-cp311-{floor['tag']}.whl"
    assert entry["version"] == "0.1.0+cu130torch2.14.1"
    assert entry["upstream_wheel"] == "cuforge_demo-0.1.0-cp311-cp311-linux_x86_64.whl"
    # the exact build: every other label excluded, and torch's own CUDA runtime line copied
    torch_line, runtime = entry["requires"]
    assert torch_line == torch_requirement("2.14.1", own="cu130")
    assert runtime.startswith("cuda-toolkit[") and "]==13.0.3" in runtime
    assert entry["checks"]["pins"]["status"] == "pass"
    assert entry["checks"]["pins"]["detail"].startswith("pins match cu130/torch2.14.1-cp311")


def test_so_holds_exactly_the_requested_sass_and_ptx(built, tmp_path):
    """Read independently of cuforge, with cuobjdump from the nvidia-cuda-cuobjdump wheel."""
    wh, _, _ = built
    wheel = next((wh / COMBO_DIR).glob("cuforge_demo-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        so = next(n for n in zf.namelist() if n.endswith(".so"))
        zf.extract(so, tmp_path)
    cuobjdump = next((ROOT / ".cuforge" / "envs").glob("3.11-cu130-*/cuda/bin/cuobjdump"))
    out = subprocess.run([str(cuobjdump), "--list-elf", "--list-ptx", str(tmp_path / so)],
                         capture_output=True, text=True, check=True).stdout
    sass = sorted(l.rsplit(".", 2)[-2] for l in out.splitlines() if l.startswith("ELF"))
    ptx = sorted(l.rsplit(".", 2)[-2] for l in out.splitlines() if l.startswith("PTX"))
    assert sass == ["sm_120", "sm_121"]
    assert ptx == ["sm_121"]


def test_wheel_imports_on_this_gpu_less_machine(built, tmp_path):
    wh, _, _ = built
    wheel = next((wh / COMBO_DIR).glob("cuforge_demo-*.whl"))
    python = next((ROOT / ".cuforge" / "envs").glob("3.11-cu130-*/bin/python"))
    target = tmp_path / "site"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(target), str(wheel)], check=True)
    out = subprocess.run([str(python), "-c", "import cuforge_demo; print(cuforge_demo.sumsq.__doc__)"],
                         env={**os.environ, "PYTHONPATH": str(target)}, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    assert "sum of squares" in out.stdout


def _site_snapshot() -> dict[str, float]:
    """Every installed distribution of the combo env and its install time."""
    site = next((ROOT / ".cuforge" / "envs").glob("3.11-cu130-*/lib/python3.11/site-packages"))
    return {p.name: p.stat().st_mtime for p in site.glob("*.dist-info")}


def test_second_build_reuses_the_env_and_installs_nothing(built):
    wh, env, _ = built
    before = _site_snapshot()
    piped = {k: v for k, v in env.items() if k != "COLUMNS"}   # a CI log: a pipe, no width
    second = cuforge("build", "--combo", "3.11-cu130", env=piped)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "env reused" in second.stderr
    # lines read whole through a pipe: the toolkit root stays on the line that names it
    reused = next(line for line in second.stderr.splitlines() if "env reused" in line)
    toolkit = re.search(r"CUDA [\d.]+ at (/\S+)\)$", reused)
    assert toolkit and Path(toolkit.group(1)).is_dir() and len(reused) > 80, second.stderr
    assert any(line.startswith("up to date ") and line.endswith("--rebuild to build again)")
               for line in second.stderr.splitlines()), second.stderr
    assert _site_snapshot() == before       # nothing installed, upgraded or reinstalled
    # the demo is a local path: its tree's content is unchanged, so the wheel is up to date
    assert "up to date" in second.stdout + second.stderr
    lines = (wh / COMBO_DIR / "manifest.jsonl").read_text().splitlines()
    assert len(lines) == 1 and len(list((wh / COMBO_DIR).glob("*.whl"))) == 1


def test_dry_run_prints_commands_and_env_and_builds_nothing(built, tmp_path):
    _, env, _ = built
    env = {**env, "CUFORGE_WHEELHOUSE": str(tmp_path / "wh")}
    out = cuforge("build", "--combo", "3.11-cu130", "--dry-run", "--cuda-arch", "9.0;12.0+PTX",
                  env=env)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "export TORCH_CUDA_ARCH_LIST='9.0;12.0+PTX'" in text
    assert "export CUDAARCHS='90-real;120'" in text
    assert "export CUDA_HOME=" in text and "export NVCC_APPEND_FLAGS='-t " in text
    assert "-m cuforge.pipeline.builders.pep517 --python " in text   # one build_wheel call, no pip
    assert "cmake.define.CMAKE_CUDA_ARCHITECTURES=90-real;120" in text
    assert not (tmp_path / "wh").exists()


def test_verify_command_on_the_wheelhouse(built, tmp_path):
    """`invoke verify` re-runs every check, as JSON too; a broken wheel makes it exit non-zero."""
    wh, env, _ = built
    out = cuforge("verify", str(wh / COMBO_DIR), "--combo", "3.11-cu130", "--json", "--models",
                  env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert report["ok"] is True
    by_package = {w["package"]: {r["check"]: r["status"] for r in w["results"]}
                  for w in report["wheels"]}
    assert by_package["cuforge-demo"]["fatbin"] == "pass"
    assert by_package["cuforge-demo"]["smoke"] == "skipped"          # never "pass" without GPU
    assert by_package["model:ptv3_tiny"]["smoke"] == "skipped"
    assert by_package["cuforge-demo"]["pins"] == "pass"
    good = next((wh / COMBO_DIR).glob("cuforge_demo-*.whl"))
    # the same wheel in a directory of another CUDA: its pins do not match, verify says so
    other = tmp_path / "linux-x86_64" / "cu128" / "torch2.14.1-cp311"
    other.mkdir(parents=True)
    shutil.copy(good, other)
    out = cuforge("verify", str(other), "--combo", "3.11-cu130", "--json", env=env)
    assert out.returncode == 7, out.stderr[-3000:]
    pins = {r["check"]: r for r in json.loads(out.stdout)["wheels"][0]["results"]}["pins"]
    assert pins["status"] == "fail" and "is not +cu128torch2.14.1" in pins["detail"], pins
    broken = tmp_path / good.name
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(broken, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename.endswith("__init__.py"):
                data = b"import torch\nfrom ._C import does_not_exist\n"
            dst.writestr(item, data)
    out = cuforge("verify", str(broken), "--combo", "3.11-cu130", "--cuda-arch", "12.0;12.1+PTX",
                  "--json", env=env)
    assert out.returncode == 7
    results = {r["check"]: r for r in json.loads(out.stdout)["wheels"][0]["results"]}
    assert results["import"]["status"] == "fail" and "does_not_exist" in results["import"]["detail"]
    assert results["fatbin"]["status"] == "pass"     # the .so itself is still fine


def test_an_indexed_wheelhouse_follows_build_rebuild(built):
    """`cuforge index`, then `build --rebuild` into the same directory: the publish rewrites
    the index, which lists the new wheel's sha256, and `cuforge verify` (which checks the index
    first) passes."""
    from cuforge.core.digest import sha256_of
    from cuforge.publish.index import problems
    wh, env, _ = built
    d = wh / COMBO_DIR
    assert cuforge("index", str(wh), env=env).returncode == 0
    again = cuforge("build", "--combo", "3.11-cu130", "--rebuild", env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    wheel = next(d.glob("cuforge_demo-*.whl"))
    page = json.loads((d / "simple" / "cuforge-demo" / "index.json").read_text())
    assert [f["hashes"]["sha256"] for f in page["files"]] == [sha256_of(wheel)]
    assert problems(d) == []
    out = cuforge("verify", str(d), "--combo", "3.11-cu130", env=env)
    assert out.returncode == 0, out.stderr[-3000:]


def test_the_wheel_was_compiled_against_the_cccl_overlay(built):
    """cu130 builds see CCCL 3.1 before CUDA 13.0's own 3.0.1 (its merge-sort race); the
    manifest says which CCCL the compiles saw, and verify reads it back."""
    wh, env, _ = built
    entries = [json.loads(ln) for ln in (wh / COMBO_DIR / "manifest.jsonl").read_text().splitlines()]
    assert [e["cccl"] for e in entries if e["status"] == "compiled"][0] == "3.1.4"
    out = cuforge("verify", str(wh / COMBO_DIR), "--combo", "3.11-cu130", "--json", env=env)
    results = {r["check"]: r for r in json.loads(out.stdout)["wheels"][0]["results"]}
    assert results["cccl"]["status"] == "pass" and "CCCL 3.1.4" in results["cccl"]["detail"]


def test_stress_without_a_gpu_is_skipped_and_sanitize_with_a_broken_sanitizer_is_one_error(
        built, tmp_path):
    """--stress runs the recipe's [stress] only where a GPU is: here it says skipped, never
    pass. --sanitize without a toolkit's compute-sanitizer takes the accel's PyPI one (unpacked
    under the state dir) and is skipped too; one named in CUFORGE_COMPUTE_SANITIZER that cannot
    launch a program stops before any check: exit 3, the fix named."""
    wh, env, _ = built
    out = cuforge("verify", str(wh / COMBO_DIR), "--combo", "3.11-cu130", "--json", "--stress",
                  env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    results = {r["check"]: r for r in json.loads(out.stdout)["wheels"][0]["results"]}
    assert results["stress"]["status"] == "skipped"
    assert results["stress"]["detail"].startswith("skipped: no GPU")
    if shutil.which("compute-sanitizer"):
        pytest.skip("this machine has a compute-sanitizer on PATH")
    bare = {k: v for k, v in env.items() if k != "CUFORGE_COMPUTE_SANITIZER"}
    out = cuforge("verify", str(wh / COMBO_DIR), "--combo", "3.11-cu130", "--json", "--sanitize",
                  env=bare)
    assert out.returncode == 0, out.stderr[-2000:]
    results = {r["check"]: r for r in json.loads(out.stdout)["wheels"][0]["results"]}
    assert results["sanitize"]["detail"].startswith("skipped: no GPU")
    state = Path(env.get("CUFORGE_STATE") or ROOT / ".cuforge")
    assert list(state.glob("tools/nvidia-cuda-sanitizer-api-*/nvidia/*/bin/compute-sanitizer"))
    lone = tmp_path / "bin" / "compute-sanitizer"          # PyPI 13.0's layout: no helper beside
    lone.parent.mkdir()
    lone.write_text("#!/bin/sh\nexit 0\n")
    lone.chmod(0o755)
    out = cuforge("verify", str(wh / COMBO_DIR), "--combo", "3.11-cu130", "--sanitize",
                  env={**bare, "CUFORGE_COMPUTE_SANITIZER": str(lone)})
    assert out.returncode == 3, out.stderr[-2000:]
    assert "cannot launch a program" in out.stderr and "nvidia-cuda-sanitizer-api" in out.stderr
    assert "Traceback" not in out.stderr


def test_only_a_compile_needs_the_cccl_overlay(built):
    """verify compiles nothing, so an overlay that cannot be had does not stop it (the GPU
    machine has no network: session 22's verify died installing it); a build that would
    compile stops with one toolchain error naming the fix, before anything is written."""
    wh, env, _ = built
    bad = {**env, "CUFORGE_CCCL_OVERLAY": "nvidia-cuda-cccl==0.0.0.404"}
    out = cuforge("verify", str(wh / COMBO_DIR), "--combo", "3.11-cu130", env=bad)
    assert out.returncode == 0, out.stderr[-2000:]
    out = cuforge("build", "--combo", "3.11-cu130", "--rebuild", env=bad)
    assert out.returncode == 3, out.stderr[-2000:]
    assert "could not install the CCCL overlay nvidia-cuda-cccl==0.0.0.404" in out.stderr
    assert "cccl_overlay" in out.stderr and "Traceback" not in out.stderr


def test_the_tag_is_what_the_symbols_need_and_a_231_floor_fails_it(built):
    """Issue 63: the published tag is the lowest manylinux level the wheel's ELF files hold,
    and the glibc check fails it against a combo floor of 2.31 when it was built on a newer
    glibc (the static CUDA runtime binds pthread_join & co. to GLIBC_2.34 there)."""
    from cuforge.verify.checklist import CheckStatus
    from cuforge.verify.floor import Ceiling, floor_of_wheel, machine_glibc
    from cuforge.verify.glibc import check_glibc
    wh, _, _ = built
    wheel, = (wh / COMBO_DIR).glob("cuforge_demo-*.whl")
    floor = floor_of_wheel(wheel)
    assert wheel.name.removesuffix(".whl").endswith(floor.tag())
    with zipfile.ZipFile(wheel) as zf:
        info = next(n for n in zf.namelist() if n.endswith(".dist-info/WHEEL"))
        tags = [ln.split(":", 1)[1].strip() for ln in zf.read(info).decode().splitlines()
                if ln.startswith("Tag:")]
    assert tags == [f"cp311-cp311-{t}" for t in floor.tag().split(".")]
    entry = json.loads((wh / COMBO_DIR / "manifest.jsonl").read_text().splitlines()[-1])
    assert entry["checks"]["glibc"]["status"] in ("pass", "warn")   # torch's floor: never fail
    if (machine_glibc() or (0,)) >= (2, 34):
        result = check_glibc(floor, Ceiling((2, 31), "glibc_floor", declared=True))
        assert result.status is CheckStatus.FAIL and "GLIBC_2.34 from libc.so.6" in result.detail
