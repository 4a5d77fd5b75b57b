"""The compiler cache (sccache) on real builds through the pipeline: a torch CUDAExtension
without torch headers (tests/fixtures/cache_ext, seconds to compile), in throw-away projects
that reuse the 3.11-cu130 combo env (slow).

- An identical rebuild after wiping the work dir is all hits; a changed arch list misses, and
  the wheel's fatbin holds the new arches (never an object built for the old list).
- Two clones (two project roots and state dirs) share results through a real redis server on
  loopback (the second clone's build is served from the first one's results); with the server
  gone, the build falls back to local storage with a warning.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from cuforge.verify.fatbin import read_fatbin

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "cache_ext"
COMBO_DIR = Path("linux-x86_64") / "cu130" / "torch2.14.1-cp311"
pytestmark = pytest.mark.slow

RECIPE = """\
kind = "setuptools"
modules = ["cachekern"]

[source]
path = "{path}"
"""


def _combo_env() -> Path:
    python = os.environ.get("CUFORGE_TEST_TORCH_PYTHON")
    env_dir = Path(python).parent.parent if python else None
    if env_dir is None or not env_dir.name.startswith("3.11-cu130-"):
        pytest.skip("needs the 3.11-cu130 combo env (CUFORGE_TEST_TORCH_PYTHON)")
    return env_dir


class Clone:
    """One checkout of a project: its own root, state dir and wheelhouse."""

    def __init__(self, where: Path, env_dir: Path, build_dir: Path | None = None,
                 package: str = "cachekern", recipe: str = "") -> None:
        self.root, self.state, self.house = where / "proj", where / "state", where / "wh"
        self.build_dir, self.package = build_dir, package
        shutil.copytree(ROOT / "envs", self.root / "envs")
        (self.root / "native").symlink_to(ROOT / "native")     # the CMake helpers
        (self.root / "recipes").mkdir()
        (self.root / "recipes" / f"{package}.toml").write_text(
            recipe or RECIPE.format(path=FIXTURE))
        (self.state / "envs").mkdir(parents=True)
        (self.state / "envs" / env_dir.name).symlink_to(env_dir)
        self.work = (build_dir or self.state / "work") / env_dir.name / package

    def build(self, *extra: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
        env = {**os.environ, "CUFORGE_ROOT": str(self.root), "CUFORGE_STATE": str(self.state),
               "CUFORGE_WHEELHOUSE": str(self.house), "COLUMNS": "200",
               "CUFORGE_BUILD_DIR": str(self.build_dir or ""), **(env_extra or {})}
        env.pop("CUFORGE_CACHE", None)
        proc = subprocess.run([sys.executable, "-m", "cuforge", "build", "--combo", "3.11-cu130",
                               "--only", self.package, "--rebuild", "--skip-smoke", *extra],
                              env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        return proc

    def wipe(self) -> None:
        """Sources and build dirs: the next build compiles everything (from the cache)."""
        shutil.rmtree(self.work, ignore_errors=True)

    def last(self) -> dict:
        lines = (self.house / COMBO_DIR / "manifest.jsonl").read_text().splitlines()
        return json.loads(lines[-1])

    def fatbin(self) -> tuple[list[str], list[str]]:
        """(sass, ptx) arch numbers read from the published wheel's extension."""
        import zipfile
        entry = self.last()
        with tempfile.TemporaryDirectory() as tmp, \
                zipfile.ZipFile(self.house / COMBO_DIR / entry["wheel"]) as zf:
            name = next(n for n in zf.namelist() if n.endswith(".so"))
            so = Path(zf.extract(name, tmp))
            containers = read_fatbin(so) or []
            sass = sorted({a.number for c in containers for a in c.sass})
            ptx = sorted({a.number for c in containers for a in c.ptx})
        return sass, ptx


def test_identical_rebuild_hits_and_new_arches_miss(tmp_path):
    clone = Clone(tmp_path, _combo_env())
    clone.build("--cuda-arch", "12.0", "--cache", "local")
    cold = clone.last()["compiler_cache"]
    assert cold["misses"] > 0 and cold["hits"] == 0, cold
    assert clone.fatbin() == (["120"], [])
    # the flag, not a missing script, is why the smoke did not run
    assert clone.last()["checks"]["smoke"] == {"status": "skipped", "detail": "skipped: --skip-smoke"}

    clone.wipe()
    clone.build("--cuda-arch", "12.0", "--cache", "local")
    warm = clone.last()["compiler_cache"]
    assert warm["hits"] > 0 and warm["misses"] == 0 and warm["hit_rate"] == 1.0, warm
    assert clone.fatbin() == (["120"], [])
    assert "compiler cache:" in Path(clone.last()["log"]).read_text()

    clone.wipe()
    clone.build("--cuda-arch", "12.0;12.1+PTX", "--cache", "local")
    changed = clone.last()["compiler_cache"]
    assert changed["misses"] > 0, changed
    assert clone.fatbin() == (["120", "121"], ["121"])
    assert clone.last()["arches_embedded"] == {"sass": ["120", "121"], "ptx": ["121"]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis_server(tmp_path):
    """A real redis on loopback, started and stopped here."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; .ci/run "
                    "installs it when it runs as root)")
    port = _free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "redis did not start"
            time.sleep(0.1)
    yield proc, f"redis://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=10)


def test_two_clones_share_through_redis_and_fall_back_without_it(tmp_path, redis_server):
    server, url = redis_server
    env_dir = _combo_env()
    # Two clones (own roots, state dirs, wheelhouses) with one shared build_dir: nvcc's
    # cudafe++ / cicc steps get the same source paths in both, so every step hits. (Built in
    # their own state dirs they hit on 3 of 5: sccache 0.16 rewrites base dirs in preprocessed
    # text, not in the source-path arguments nvcc gives those two steps.)
    shared = tmp_path / "build"
    first = Clone(tmp_path / "a", env_dir, build_dir=shared)
    second = Clone(tmp_path / "b", env_dir, build_dir=shared)

    first.build("--cuda-arch", "12.0", "--cache", url)
    one = first.last()["compiler_cache"]
    assert one["storage"] == url and one["misses"] > 0 and one["hits"] == 0, one
    assert (shared / env_dir.name / "cachekern" / "dist").is_dir()     # built there

    second.build("--cuda-arch", "12.0", "--cache", url)
    two = second.last()["compiler_cache"]
    assert two["storage"] == url and two["hits"] == one["misses"] and two["misses"] == 0, two
    assert second.fatbin() == (["120"], [])

    server.terminate()
    server.wait(timeout=10)
    second.wipe()
    proc = second.build("--cuda-arch", "12.0", "--cache", url)
    three = second.last()["compiler_cache"]
    assert "unreachable" in proc.stderr and "fell back to local storage" in proc.stderr
    assert three["storage"].startswith(str(second.state)) and "fell back" in three["note"]
    assert second.fatbin() == (["120"], [])


def test_two_clones_share_a_cmake_build_through_redis(tmp_path, redis_server):
    """The other build path: the demo (CMake through scikit-build-core, the launchers on
    CMake's command line), two clones, one build_dir, one redis."""
    _, url = redis_server
    env_dir = _combo_env()
    recipe = f'kind = "cmake"\nmodules = ["cuforge_demo"]\n[source]\npath = "{ROOT / "native" / "demo"}"\n'
    clones = [Clone(tmp_path / n, env_dir, build_dir=tmp_path / "build", package="cuforge-demo",
                    recipe=recipe) for n in "ab"]
    reports = []
    for clone in clones:
        clone.build("--cuda-arch", "12.0", "--cache", url)
        reports.append(clone.last()["compiler_cache"])
    one, two = reports
    assert one["storage"] == url and one["misses"] > 0 and one["hits"] == 0, one
    assert two["hits"] == one["misses"] and two["misses"] == 0 and two["hit_rate"] == 1.0, two
    log = Path(clones[1].last()["log"]).read_text()
    assert "compiler cache:" in log
    # the tree the first clone left was not resumed: its CMake cache names that clone's env
    assert str(clones[0].state) not in log
    assert clones[1].fatbin() == (["120"], [])


FAILING_SCCACHE = """#!/bin/sh
# sccache's own commands go to the real one; every compile fails the way sccache 0.16 once
# did in its cicc step: a panic in sccache, not a compiler error (fault injection).
case "$1" in --*) exec {real} "$@" ;; esac
echo "thread 'tokio-runtime-worker' panicked at src/compiler/cicc.rs:321:9: injected" \
    >> "$SCCACHE_ERROR_LOG"
exit 101
"""


def test_a_compile_that_fails_inside_sccache_is_built_again_without_it(tmp_path):
    from cuforge.pipeline.compiler_cache import find_sccache
    real = find_sccache()
    if real is None:
        pytest.skip("sccache is not installed")
    fake = tmp_path / "sccache"
    fake.write_text(FAILING_SCCACHE.format(real=real))
    fake.chmod(0o755)
    clone = Clone(tmp_path, _combo_env())
    proc = clone.build("--cuda-arch", "12.0", "--cache", "local",
                       env_extra={"CUFORGE_SCCACHE": str(fake)})
    assert "sccache failed (thread 'tokio-runtime-worker' panicked" in proc.stdout + proc.stderr
    assert "building again without the compiler cache" in proc.stdout + proc.stderr
    entry = clone.last()
    assert entry["status"] == "compiled"
    assert entry["compiler_cache"]["storage"] == "off", entry["compiler_cache"]
    assert "built without it" in entry["compiler_cache"]["note"]
    assert clone.fatbin() == (["120"], [])
