"""A wheelhouse directory's index follows every publish into it (cuforge.publish.index.refresh, run by
Wheelhouse.publish under its lock): a rebuild (same file name, new bytes) installs from the index
at once, with pip and uv, from ``file://`` and over HTTP; a publish killed between the wheel's
rename and the index leaves an index that still installs (the bytes it lists) and that
``cuforge verify`` calls stale, naming the fix, until the next run's recovery brings it up to
date; two publishers at once never let a reader see a listed hash that its file lacks.

Tiny wheels (one module saying which build it is), real publishes, real installs, offline.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "verify"
sys.path.insert(0, str(FIXTURES))
import verify_builders as vb  # noqa: E402
from loopback_index import pypiserver  # noqa: E402

from cuforge.publish import index  # noqa: E402
from cuforge.core.digest import sha256_of  # noqa: E402
from cuforge.env.venv import find_uv  # noqa: E402
from cuforge.publish.wheelhouse import Wheelhouse, write_indexes  # noqa: E402

TREE = Path("linux-x86_64") / "cu130" / "torch2.14.1-cp311"
PUBLISH = r"""
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import verify_builders as vb
from cuforge.core.digest import sha256_of
from cuforge.publish.wheelhouse import Entry, Wheelhouse
directory, scratch, package, builds = Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4], sys.argv[5:]
for build in builds:
    w = vb.make_wheel(scratch / build, package, {package.replace("-", "_") + ".py":
                      f"BUILD = {build!r}\n"}, version="0.1")
    Wheelhouse(directory).publish(w, Entry(package=package, status="compiled", version="0.1",
                                           wheel=w.name, wheel_sha256=sha256_of(w)))
"""


def publish(directory: Path, package: str, *builds: str, env: dict | None = None,
            scratch: Path | None = None) -> subprocess.CompletedProcess:
    """Publish one wheel of ``package`` per build name, as a build does, in a process of its
    own (so it can be killed); each wheel's module says ``BUILD = <its build>``."""
    scratch = scratch or directory.parent / f".scratch-{package}"
    return subprocess.run([sys.executable, "-c", PUBLISH, str(FIXTURES), str(directory),
                           str(scratch), package, *builds], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("UV_", "PIP_", "CUFORGE_FAULT")) and k != "VIRTUAL_ENV"}
    return {**env, "PIP_CONFIG_FILE": os.devnull}


def install(tool: str, venv: Path, index_url: str, *packages: str) -> Path:
    """Install ``packages`` from ``index_url`` alone into a fresh venv; returns its python."""
    subprocess.run([find_uv(), "venv", "-q", "--python", sys.executable, str(venv)], check=True,
                   env=_clean_env())
    python = venv / "bin" / "python"
    if tool == "pip":
        argv = [sys.executable, "-m", "pip", "--python", str(python), "install",
                "--disable-pip-version-check", "--no-cache-dir"]
    else:
        argv = [find_uv(), "pip", "install", "--no-config", "--no-cache", "--python", str(python),
                *["--offline"] * index_url.startswith("file:")]
    proc = subprocess.run([*argv, "--index-url", index_url, *packages], capture_output=True,
                          text=True, env=_clean_env(), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return python


def build_of(python: Path, package: str = "cuforge-tiny-a") -> str:
    out = subprocess.run([str(python), "-c", f"import {package.replace('-', '_')} as m; "
                          "print(m.BUILD)"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _listed(directory: Path, package: str = "cuforge-tiny-a") -> dict:
    page = directory / "simple" / package / "index.json"
    return {f["filename"]: f for f in json.loads(page.read_text())["files"]}


@pytest.fixture
def house(tmp_path) -> Path:
    """A wheelhouse directory with one published wheel and an index (``cuforge index``)."""
    d = tmp_path / TREE
    d.mkdir(parents=True)
    assert publish(d, "cuforge-tiny-a", "first").returncode == 0
    cli = subprocess.run([sys.executable, "-m", "cuforge", "index", str(d)], capture_output=True,
                         text=True)
    assert cli.returncode == 0, cli.stderr
    return d


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory) -> Path:
    """Published, indexed, then rebuilt into the same directory: same file name, new bytes."""
    d = tmp_path_factory.mktemp("wh") / TREE
    d.mkdir(parents=True)
    assert publish(d, "cuforge-tiny-a", "first").returncode == 0
    write_indexes([d])
    first = sha256_of(next(d.glob("*.whl")))
    assert publish(d, "cuforge-tiny-a", "second").returncode == 0
    assert sha256_of(next(d.glob("*.whl"))) != first
    return d


def test_the_rebuild_is_listed_by_the_publish_itself(rebuilt):
    (wheel,) = rebuilt.glob("*.whl")
    listed = _listed(rebuilt)[wheel.name]
    assert listed["hashes"]["sha256"] == sha256_of(wheel)
    assert index.problems(rebuilt) == []
    # the old copy stays one rewrite longer, for a reader that read the old page
    assert len(list((rebuilt / "simple" / ".files").glob("*/*"))) == 2


@pytest.mark.parametrize("tool", ["pip", "uv"])
def test_the_rebuild_installs_from_the_file_index(rebuilt, tmp_path, tool):
    python = install(tool, tmp_path / "venv", (rebuilt / "simple").as_uri(), "cuforge-tiny-a")
    assert build_of(python) == "second"


def _wait_for(url: str, server: subprocess.Popen | None = None) -> None:
    for _ in range(150):
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except OSError:
            assert server is None or server.poll() is None, server.stdout.read()
            time.sleep(0.2)
    pytest.fail(f"nothing answered on {url}")


@pytest.mark.parametrize("tool", ["pip", "uv"])
def test_the_rebuild_installs_through_pypiserver(rebuilt, tmp_path, tool):
    """pypiserver serves the directory with its own index; it must not see the index's copies
    (a dot directory), or it would offer the old bytes under the same file name."""
    with pypiserver(rebuilt, "cuforge-tiny-a/") as url:
        with urllib.request.urlopen(url + "cuforge-tiny-a/", timeout=10) as r:
            page = r.read().decode()
        assert page.count(".whl#sha256=") == 1, page        # the wheel, not the old copy
        python = install(tool, tmp_path / "venv", url, "cuforge-tiny-a")
        assert build_of(python) == "second"


@pytest.mark.parametrize("tool", ["pip", "uv"])
def test_the_rebuild_installs_from_the_index_over_static_http(rebuilt, tmp_path, tool):
    """Our own pages, served as files by any web server (here the standard library's)."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(rebuilt))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/simple/"
        python = install(tool, tmp_path / "venv", url, "cuforge-tiny-a")
        assert build_of(python) == "second"
    finally:
        server.shutdown()
        server.server_close()


def test_a_publish_killed_before_the_index_leaves_one_that_installs(house, tmp_path):
    """Killed after the wheel's rename, before the index (``CUFORGE_FAULT=manifest``: the
    table, written between the two): the index still lists the previous bytes and serves
    them; verify calls it stale and names the fix; the next run's recovery mends it."""
    (wheel,) = house.glob("*.whl")
    before = sha256_of(wheel)
    killed = publish(house, "cuforge-tiny-a", "third", env={"CUFORGE_FAULT": "manifest"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert sha256_of(wheel) != before                     # the new wheel is in place...
    assert _listed(house)[wheel.name]["hashes"]["sha256"] == before   # ...the index not yet
    for tool in ("pip", "uv"):   # its hash and the bytes it links agree: installs, the old one
        python = install(tool, tmp_path / tool, (house / "simple").as_uri(), "cuforge-tiny-a")
        assert build_of(python) == "first"
    stale = index.problems(house)
    assert stale == [f"{wheel.name} is not the file the index lists (sha256 {before[:12]}…): "
                     "it was rebuilt or replaced after the index was written"], stale
    cli = subprocess.run([sys.executable, "-m", "cuforge", "verify", str(house), "--combo",
                          "3.11-cu130"], capture_output=True, text=True, env=_clean_env(),
                         timeout=120)
    assert cli.returncode == 7, cli.stdout + cli.stderr
    assert "is stale" in cli.stderr and f"cuforge index {house}" in cli.stderr, cli.stderr
    assert "Traceback" not in cli.stderr
    Wheelhouse(house).recover()           # what the next build (or publish) does first
    assert index.problems(house) == []
    python = install("uv", tmp_path / "after", (house / "simple").as_uri(), "cuforge-tiny-a")
    assert build_of(python) == "third"


def test_verify_names_each_way_an_index_can_disagree(house, tmp_path):
    (wheel,) = house.glob("*.whl")
    other = vb.make_wheel(tmp_path, "cuforge-tiny-b", {"cuforge_tiny_b.py": ""}, version="1.0")
    os.link(other, house / other.name)             # copied in by hand, not published
    assert index.problems(house) == [f"{other.name} is not listed"]
    (house / other.name).unlink()
    wheel.rename(tmp_path / wheel.name)            # deleted by hand
    assert index.problems(house) == [f"the index lists {wheel.name}, which is not in {house}"]
    (tmp_path / wheel.name).rename(wheel)
    assert index.problems(house) == []
    with open(wheel, "r+b") as f:                  # written in place: the copy is the same file
        first = f.read(1)
        f.seek(0)
        f.write(bytes([first[0] ^ 0xFF]))
    found = index.problems(house)
    assert any("its bytes were changed in place" in p for p in found), found


def test_two_publishers_at_once_never_show_a_hash_its_file_lacks(house):
    """Two builds publish rebuilds of two packages into one indexed directory while a reader
    checks every listed hash against the bytes of its link, as an installer would."""
    scratch = house.parent
    procs = [subprocess.Popen([sys.executable, "-c", PUBLISH, str(FIXTURES), str(house),
                               str(scratch / f".s-{p}"), p, *[f"{p}-{i}" for i in range(8)]],
                              stderr=subprocess.PIPE, text=True)
             for p in ("cuforge-tiny-a", "cuforge-tiny-b")]
    checked = gone = 0
    while any(p.poll() is None for p in procs):
        for page in (house / "simple").glob("*/index.json"):
            try:
                files = json.loads(page.read_text())["files"]
            except (OSError, ValueError) as err:   # pages are renamed in whole: never torn
                pytest.fail(f"{page}: {err}")
            for f in files:
                try:
                    assert sha256_of(page.parent / f["url"]) == f["hashes"]["sha256"], f
                    checked += 1
                except FileNotFoundError:
                    gone += 1      # removed two rewrites after its page: a retry, not a mismatch
    assert [p.wait() for p in procs] == [0, 0], [p.stderr.read() for p in procs]
    assert checked > 0
    assert index.problems(house) == []
    listed = {f["filename"] for pkg in ("cuforge-tiny-a", "cuforge-tiny-b")
              for f in json.loads((house / "simple" / pkg / "index.json").read_text())["files"]}
    assert listed == {w.name for w in house.glob("*.whl")}
