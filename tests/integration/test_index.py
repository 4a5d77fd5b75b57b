"""The wheelhouse as a package index: `cuforge index` writes PEP 503/691 trees that pip and uv
install from offline (``--index-url file://``, ``--find-links``), and pypiserver serves the
wheelhouse over HTTP on loopback.

The wheels are tiny ones written here (real wheels: METADATA, WHEEL, RECORD), so installs take
seconds; torch's resolution from its usual index is shown with a dry run against the local
mirror of that index.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest
from loopback_index import pypiserver

from cuforge.core.errors import VerifyError
from cuforge.publish.wheelhouse import write_indexes
from cuforge.publish.wheelmeta import torch_requirement
from cuforge.env.programs import find_uv

TREE = Path("linux-x86_64") / "cu130" / "torch2.14.1-cp311"
PYPI = "https://pypi.org/simple/"   # torch's usual index for cu130
MIRRORS = [Path("/opt/pypi-more/simple"), Path("/opt/pypi/simple")]   # local mirrors of it, if any
WRONG_TORCH = Path("/opt/wheels")   # this machine's find-links: a real torch 2.13.0+cpu, if any


def make_wheel(dest: Path, name: str, version: str, *, requires_python: str = "",
               requires: tuple[str, ...] = (), tag: str = "py3-none-any") -> Path:
    """A minimal installable wheel with one module ``<name>_mod`` reporting its version."""
    dist = name.replace("-", "_").replace(".", "_").lower()
    info = f"{dist}-{version}.dist-info"
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += [f"Requires-Python: {requires_python}"] * bool(requires_python)
    meta += [f"Requires-Dist: {r}" for r in requires]
    purelib = "true" if tag.endswith("-any") else "false"
    files = {f"{dist}_mod.py": f"VERSION = {version!r}\n".encode(),
             f"{info}/METADATA": ("\n".join(meta) + "\n").encode(),
             f"{info}/WHEEL": f"Wheel-Version: 1.0\nRoot-Is-Purelib: {purelib}\nTag: {tag}\n".encode()}
    record = [f"{arc},sha256={_b64(data)},{len(data)}" for arc, data in files.items()]
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    wheel = dest / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for arc, data in files.items():
            zf.writestr(arc, data)
    return wheel


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@pytest.fixture(scope="module")
def house(tmp_path_factory) -> Path:
    """A wheelhouse dir: an app needing a dep, the dep in a usable version and in one whose
    Requires-Python no interpreter meets, and an extension-like wheel that needs torch."""
    root = tmp_path_factory.mktemp("wh")
    d = root / TREE
    d.mkdir(parents=True)
    make_wheel(d, "Cuforge.Tiny_App", "0.2", requires_python=">=3.9",
               requires=("cuforge-tiny-dep>=1",))
    make_wheel(d, "cuforge-tiny-dep", "1.0", requires_python=">=3.9")
    make_wheel(d, "cuforge-tiny-dep", "2.0", requires_python=">=3.99")   # must be skipped
    make_wheel(d, "cuforge-tiny-ext", "0.1", requires=(torch_requirement("2.14.1"),),
               tag="cp311-cp311-linux_x86_64")
    (d / "manifest.jsonl").write_text("")   # wheelhouse files besides wheels are left alone
    return root


@pytest.fixture(scope="module")
def indexed(house) -> Path:
    proc = subprocess.run([sys.executable, "-m", "cuforge", "index", str(house)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (house / TREE / "simple").as_uri() in proc.stdout
    return house / TREE


def _clean_env() -> dict[str, str]:
    """No index settings from the machine: the test names every index itself."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("UV_", "PIP_")) and k != "VIRTUAL_ENV"}


def _venv(path: Path) -> Path:
    subprocess.run([find_uv(), "venv", "-q", "--python", sys.executable, str(path)],
                   check=True, env=_clean_env())
    return path / "bin" / "python"


def _pip(python: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                           "--disable-pip-version-check", "--no-cache-dir", *args],
                          capture_output=True, text=True, env=_clean_env(), timeout=300)


def _uv(python: Path, *args: str, offline: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([find_uv(), "pip", "install", "--no-config", "--no-cache",
                           *["--offline"] * offline, "--python", str(python), *args],
                          capture_output=True, text=True, env=_clean_env(), timeout=300)


def _installed(python: Path) -> dict[str, str]:
    code = ("import importlib.metadata as m, json; print(json.dumps({d.metadata['Name'].lower()"
            ": d.version for d in m.distributions()}))")
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_index_pages_follow_pep_503_and_691(indexed):
    simple = indexed / "simple"
    root = (simple / "index.html").read_text()
    assert '<a href="cuforge-tiny-app/">' in root     # PEP 503 normalized project names
    assert json.loads((simple / "index.json").read_text())["projects"] == [
        {"name": "cuforge-tiny-app"}, {"name": "cuforge-tiny-dep"}, {"name": "cuforge-tiny-ext"}]
    dep = (simple / "cuforge-tiny-dep" / "index.html").read_text()
    wheel = indexed / "cuforge_tiny_dep-2.0-py3-none-any.whl"
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    # the page links the index's own copy of the wheel, stored by its hash: the same file
    assert f'href="../.files/{sha}/{wheel.name}#sha256={sha}"' in dep
    assert (simple / ".files" / sha / wheel.name).samefile(wheel)
    assert 'data-requires-python="&gt;=3.99"' in dep
    data = json.loads((simple / "cuforge-tiny-dep" / "index.json").read_text())
    assert data["meta"]["api-version"].startswith("1.")
    assert data["versions"] == ["1.0", "2.0"]
    two = next(f for f in data["files"] if f["filename"] == wheel.name)
    assert two["hashes"] == {"sha256": sha} and two["requires-python"] == ">=3.99"
    assert two["size"] == wheel.stat().st_size and two["url"] == f"../.files/{sha}/{wheel.name}"


def test_pip_installs_from_the_file_index_offline(indexed, tmp_path):
    py = _venv(tmp_path / "venv")
    proc = _pip(py, "--index-url", (indexed / "simple").as_uri(), "cuforge.tiny-app")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = _installed(py)
    assert got["cuforge.tiny_app"] == "0.2" or got.get("cuforge.tiny-app") == "0.2", got
    assert got["cuforge-tiny-dep"] == "1.0"   # 2.0 skipped: its data-requires-python


def test_uv_installs_from_the_file_index_offline(indexed, tmp_path):
    py = _venv(tmp_path / "venv")
    proc = _uv(py, "--index-url", (indexed / "simple").as_uri(), "cuforge-tiny-app")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _installed(py)["cuforge-tiny-dep"] == "1.0"
    out = subprocess.run([str(py), "-c", "import cuforge_tiny_app_mod as m; print(m.VERSION)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0.2"


@pytest.mark.parametrize("tool", ["pip", "uv"])
def test_find_links_installs_the_same_wheels(indexed, tmp_path, tool):
    py = _venv(tmp_path / "venv")
    run = _pip if tool == "pip" else _uv
    proc = run(py, "--no-index", "--find-links", str(indexed), "cuforge-tiny-app")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _installed(py)["cuforge-tiny-dep"] == "1.0"


# pip copies every wheel it resolves, even from a file:// mirror and in a dry run (~2.5 GB, 80 s)
@pytest.mark.parametrize("tool", [pytest.param("pip", marks=pytest.mark.slow), "uv"])
def test_torch_resolves_from_its_usual_index(indexed, tmp_path, tool):
    """The extension-like wheel pins torch: our index serves the wheel, torch's usual index
    (PyPI, after its local mirrors where the machine has them) serves torch and its CUDA
    libraries. A dry run: nothing of torch's ~3 GB is installed."""
    try:
        urllib.request.urlopen(PYPI + "cuda-bindings/", timeout=10).close()
    except OSError as err:
        pytest.skip(f"torch's usual index {PYPI} is unreachable ({err})")
    py = _venv(tmp_path / "venv")
    # the local mirrors first (torch itself from disk), then PyPI for what they lack
    indexes = [m.as_uri() for m in MIRRORS if m.is_dir()] + [PYPI]
    extra = [a for url in indexes for a in ("--extra-index-url", url)]
    # the real wrong torch on offer too, as this machine's pip config offers it: the pin
    # (cuforge.publish.wheelmeta) must leave it out
    extra += ["--find-links", str(WRONG_TORCH)] if WRONG_TORCH.is_dir() else []
    if tool == "pip":
        proc = _pip(py, "--dry-run", "--index-url", (indexed / "simple").as_uri(), *extra,
                    "cuforge-tiny-ext")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "Would install" in proc.stdout and "torch-2.14.1" in proc.stdout, proc.stdout
    else:
        proc = _uv(py, "--dry-run", "--index-strategy", "unsafe-best-match",
                   "--index-url", (indexed / "simple").as_uri(), *extra, "cuforge-tiny-ext",
                   offline=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "+ torch==2.14.1" in proc.stderr and "+ cuforge-tiny-ext==0.1" in proc.stderr
        assert "2.13.0" not in proc.stderr
    assert "cuforge-tiny-ext" not in _installed(py)


def test_a_wheel_in_the_wrong_platform_tree_is_refused(tmp_path):
    d = tmp_path / "linux-aarch64" / "cu130" / "torch2.14.1-cp312"
    d.mkdir(parents=True)
    make_wheel(d, "cuforge-tiny-ext", "0.1", tag="cp312-cp312-linux_x86_64")
    with pytest.raises(VerifyError, match="does not run on linux-aarch64"):
        write_indexes([tmp_path])
    assert not (d / "simple").exists()       # nothing written
    make_wheel(d, "cuforge-tiny-arm", "0.1", tag="cp312-cp312-linux_aarch64")
    (d / "cuforge_tiny_ext-0.1-cp312-cp312-linux_x86_64.whl").unlink()
    assert [f.project for f in write_indexes([tmp_path])[0].files] == ["cuforge-tiny-arm"]


def test_pip_installs_through_pypiserver_on_loopback(indexed, tmp_path):
    with pypiserver(indexed, "cuforge-tiny-dep/") as url:
        with urllib.request.urlopen(url + "cuforge-tiny-dep/", timeout=10) as r:
            page = r.read().decode()
        assert "cuforge_tiny_dep-1.0-py3-none-any.whl" in page and "sha256=" in page
        py = _venv(tmp_path / "venv")
        proc = _pip(py, "--index-url", url, "cuforge-tiny-app")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert _installed(py)["cuforge-tiny-dep"] == "1.0"


def test_reindexing_leaves_only_what_the_wheels_say(tmp_path):
    d = tmp_path / TREE
    d.mkdir(parents=True)
    make_wheel(d, "cuforge-tiny-dep", "1.0")
    gone = make_wheel(d, "cuforge-tiny-gone", "1.0")
    write_indexes([tmp_path])
    assert (d / "simple" / "cuforge-tiny-gone" / "index.html").is_file()
    gone.unlink()
    write_indexes([d])
    assert not (d / "simple" / "cuforge-tiny-gone").exists()
    assert (d / "simple" / "cuforge-tiny-dep" / "index.json").is_file()
    # the removed wheel's copy stays for one more rewrite (a reader of the old page), then goes
    assert sorted(c.name for c in (d / "simple" / ".files").glob("*/*")) == [
        "cuforge_tiny_dep-1.0-py3-none-any.whl", "cuforge_tiny_gone-1.0-py3-none-any.whl"]
    write_indexes([d])
    assert [c.name for c in (d / "simple" / ".files").glob("*/*")] == [
        "cuforge_tiny_dep-1.0-py3-none-any.whl"]
    assert not [p for p in (d / "simple").rglob(".tmp-*")]
