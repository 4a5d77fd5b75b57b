"""Published wheels pin what they were built against (cuforge.publish.wheelmeta), so a resolver offered
a wrong torch takes the right one or refuses; it never installs a pair that fails at import.

Everything here is real but tiny: an "extension" wheel whose ``_ext.so`` (g++) needs
``libc10.so`` and a c10 symbol, and fake torch wheels we build: the right one (2.14.1) carries a
``libc10.so`` defining that symbol, a same-version CPU build and a newer version carry one
without it (the import fails with ``undefined symbol``, as a real extension does), and
2.13.0+cpu has no content at all. pip and uv install from ``cuforge index`` offline into fresh
venvs, with the wrong torches in ``--find-links`` (where this machine's pip config has its
2.13.0+cpu) and the right one in an extra index.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "verify"))
import verify_builders as vb  # noqa: E402

from cuforge.publish import rewrite, wheelmeta  # noqa: E402
from cuforge.publish.wheelhouse import write_indexes  # noqa: E402
from cuforge.env.programs import find_uv  # noqa: E402

TREE = Path("linux-x86_64") / "cu130" / "torch2.14.1-cp311"
TAG = "cp311-cp311-linux_x86_64"
EXT_CPP = """namespace helper { int add(int a, int b); }   // c10's part, in libc10.so
extern "C" int tiny_add(int a, int b) { return helper::add(a, b); }
"""
TORCH_INIT = """import ctypes, os
__version__ = {version!r}
# like torch: its libraries are loaded first, so extensions find libc10.so by soname
ctypes.CDLL(os.path.join(os.path.dirname(__file__), "lib", "libc10.so"), mode=ctypes.RTLD_GLOBAL)
"""
EXT_INIT = """import ctypes, os
import torch  # noqa: F401
_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "_ext.so"))
def add(a, b):
    return _lib.tiny_add(a, b)
"""


def wheel(dest: Path, name: str, version: str, files: dict[str, bytes | str], *,
          requires: tuple[str, ...] = (), tag: str = "py3-none-any") -> Path:
    return vb.make_wheel(dest, name, files, version=version, tag=tag, requires=requires,
                         description=f"{name}, built by the test")


def _gxx(out: Path, source: str, *flags: str) -> bytes:
    src = out.with_suffix(".cpp")
    src.write_text(source)
    subprocess.run(["g++", "-shared", "-fPIC", "-O1", str(src), "-o", str(out), *flags],
                   check=True, capture_output=True)
    return out.read_bytes()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    tmp = tmp_path_factory.mktemp("pins")
    libs = tmp / "libs"
    libs.mkdir()
    right_c10 = _gxx(libs / "libc10.so",
                     "namespace helper { int add(int a, int b) { return a + b; } }\n",
                     "-Wl,-soname,libc10.so")
    (libs / "other").mkdir()
    other_c10 = _gxx(libs / "other" / "libc10.so",
                     "namespace helper { int sub(int a, int b) { return a - b; } }\n",
                     "-Wl,-soname,libc10.so")
    ext_so = _gxx(libs / "_ext.so", EXT_CPP, f"-L{libs}", "-lc10")

    def torch(dest: Path, version: str, c10: bytes | None) -> Path:
        files = {} if c10 is None else {"torch/__init__.py": TORCH_INIT.format(version=version),
                                        "torch/lib/libc10.so": c10}
        return wheel(dest, "torch", version, files, tag=TAG)

    wrong = tmp / "wrong-torches"              # like this machine's find-links /opt/wheels
    torch(wrong, "2.13.0+cpu", None)           # "no content": import torch fails
    torch(wrong, "2.14.1+cpu", other_c10)      # same version, CPU build: matches ==2.14.1
    torch(wrong, "2.15.0", other_c10)          # another (newer) version
    right = tmp / "torch-index"                # torch's usual index, holding the right torch
    torch(right, "2.14.1", right_c10)
    write_indexes([right])

    house = tmp / "wheelhouse" / TREE
    dep = wheel(house, "cuforge-tiny-dep", "1.0", {"cuforge_tiny_dep.py": "X = 1\n"})
    upstream = wheel(tmp / "upstream", "cuforge-tiny-ext", "0.1",
                     {"cuforge_tiny_ext/__init__.py": EXT_INIT, "cuforge_tiny_ext/_ext.so": ext_so},
                     requires=("torch", "cuforge-tiny-dep>=0.5"), tag=TAG)
    pinned, result, _ = rewrite.for_wheelhouse(upstream, house, house, accel="cu130",
                                              torch="2.14.1", depends=())
    return {"tmp": tmp, "wrong": wrong, "right": right / "simple", "house": house, "dep": dep,
            "upstream": upstream, "pinned": pinned, "result": result}


def test_pinned_wheel_names_its_cuda_and_torch(built):
    pinned = built["pinned"]
    # its .so needs nothing newer than glibc 2.17 (libc10.so is torch's): tagged for it, and
    # for the legacy alias pip < 20.3 reads
    assert pinned.name == ("cuforge_tiny_ext-0.1+cu130torch2.14.1-cp311-cp311-"
                           "manylinux_2_17_x86_64.manylinux2014_x86_64.whl")
    version, requires = wheelmeta.metadata(pinned)
    assert version == "0.1+cu130torch2.14.1"
    assert requires == ["cuforge-tiny-dep==1.0",
                        wheelmeta.torch_requirement("2.14.1", own="cu130")]
    with zipfile.ZipFile(pinned) as zf:
        names = zf.namelist()
        meta = zf.read("cuforge_tiny_ext-0.1+cu130torch2.14.1.dist-info/METADATA").decode()
    assert not any(n.startswith("cuforge_tiny_ext-0.1.dist-info/") for n in names)
    assert meta.endswith("\ncuforge-tiny-ext, built by the test\n")   # the description stays
    assert wheelmeta.record_problems(pinned) == []
    assert built["result"].status == "pass"


def test_verify_flags_pins_that_do_not_match_the_directory(built, tmp_path):
    pinned = built["pinned"]
    assert wheelmeta.check(pinned).status == "pass"
    for where, why in [("cu128/torch2.14.1-cp311", "+cu130torch2.14.1 is not +cu128torch2.14.1"),
                       ("cu130/torch2.13.0-cp311", "but sits in torch2.13.0"),
                       ("cu130/torch2.14.1-cp312", "Python tag cp311, not cp312")]:
        d = tmp_path / "linux-x86_64" / where
        d.mkdir(parents=True)
        shutil.copy(pinned, d)
        result = wheelmeta.check(d / pinned.name)
        assert result.status == "fail" and why in result.detail, (where, result.detail)
    # the upstream wheel as built: no torch pin, no label
    d = tmp_path / "linux-x86_64" / "cu130" / "torch2.14.1-cp311"
    d.mkdir(parents=True)
    shutil.copy(built["upstream"], d)
    detail = wheelmeta.check(d / built["upstream"].name).detail
    assert "does not pin it" in detail and "label +" in detail, detail
    # a wheelhouse package required loosely, and a changed file that RECORD no longer matches
    shutil.copy(built["dep"], d)
    assert "requires cuforge-tiny-dep>=0.5, but the wheelhouse has" in wheelmeta.check(
        d / built["upstream"].name).detail
    tampered = d / pinned.name
    with zipfile.ZipFile(pinned) as src, zipfile.ZipFile(tampered, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, data + b"# changed\n" if info.filename.endswith(".py") else data)
    assert "does not match its RECORD hash" in wheelmeta.check(tampered).detail


# -- installs --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def indexes(built) -> dict[str, Path]:
    """Two wheelhouses with an index each: as built upstream (Requires-Dist: torch) and pinned."""
    out = {}
    for kind in ("upstream", "pinned"):
        d = built["tmp"] / f"wh-{kind}" / TREE
        d.mkdir(parents=True)
        shutil.copy(built["dep"], d)
        shutil.copy(built[kind], d)
        write_indexes([d])
        out[kind] = d / "simple"
    return out


def _env() -> dict[str, str]:
    """No index settings or constraints from the machine: the test names every source."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("UV_", "PIP_")) and k != "VIRTUAL_ENV"}
    return {**env, "PIP_CONFIG_FILE": os.devnull}


def _install(tool: str, venv: Path, index: Path, *, wrong: Path, right: Path | None,
             best_match: bool = False) -> tuple[subprocess.CompletedProcess, Path]:
    subprocess.run([find_uv(), "venv", "-q", "--python", sys.executable, str(venv)], check=True,
                   env=_env())
    python = venv / "bin" / "python"
    sources = ["--index-url", index.as_uri(), "--find-links", str(wrong)]
    sources += ["--extra-index-url", right.as_uri()] if right else []
    if tool == "pip":
        argv = [sys.executable, "-m", "pip", "--python", str(python), "install",
                "--disable-pip-version-check", "--no-cache-dir", *sources]
    else:
        argv = [find_uv(), "pip", "install", "--no-config", "--no-cache", "--offline",
                "--python", str(python), *sources,
                *(["--index-strategy", "unsafe-best-match"] if best_match else [])]
    proc = subprocess.run([*argv, "cuforge-tiny-ext"], capture_output=True, text=True,
                          env=_env(), timeout=300)
    return proc, python


def _imports(python: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-c", "import cuforge_tiny_ext as m, torch; "
                           "print(torch.__version__, m.add(2, 3))"], capture_output=True, text=True)


def _torch(python: Path) -> str | None:
    out = subprocess.run([str(python), "-c", "import importlib.metadata as m; "
                          "print(m.version('torch'))"], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


@pytest.mark.parametrize("tool", ["pip", "uv"])
def test_as_built_upstream_a_wrong_torch_is_installed_and_the_import_fails(built, indexes,
                                                                          tmp_path, tool):
    """The control: what the issue saw. ``Requires-Dist: torch`` takes the newest on offer."""
    proc, python = _install(tool, tmp_path / "venv", indexes["upstream"], wrong=built["wrong"],
                            right=built["right"], best_match=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _torch(python) == "2.15.0"
    failed = _imports(python)
    assert failed.returncode != 0 and "undefined symbol: _ZN6helper3addEii" in failed.stderr


@pytest.mark.parametrize("tool", ["pip", "uv"])
def test_pinned_takes_the_right_torch_among_wrong_ones(built, indexes, tmp_path, tool):
    proc, python = _install(tool, tmp_path / "venv", indexes["pinned"], wrong=built["wrong"],
                            right=built["right"], best_match=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _torch(python) == "2.14.1"          # not 2.14.1+cpu, not 2.15.0
    ok = _imports(python)
    assert ok.returncode == 0 and ok.stdout.split() == ["2.14.1", "5"], ok.stderr


def test_uv_first_index_takes_the_right_torch_or_refuses(built, indexes, tmp_path):
    """uv's default strategy takes torch from the first source that has it: the right one, or
    (when that source is the wrong one) a resolver error. Never a pair that fails to import."""
    proc, python = _install("uv", tmp_path / "venv", indexes["pinned"], wrong=built["wrong"],
                            right=built["right"])
    if proc.returncode == 0:
        assert _torch(python) == "2.14.1" and _imports(python).returncode == 0
    else:
        assert "No solution found" in proc.stderr and _torch(python) is None, proc.stderr


@pytest.mark.parametrize("tool", ["pip", "uv"])
def test_pinned_refuses_when_only_wrong_torches_are_on_offer(built, indexes, tmp_path, tool):
    proc, python = _install(tool, tmp_path / "venv", indexes["pinned"], wrong=built["wrong"],
                            right=None, best_match=True)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    said = proc.stdout + proc.stderr
    refusals = ("No matching distribution found for torch", "ResolutionImpossible") \
        if tool == "pip" else ("No solution found",)
    assert any(r in said for r in refusals), said
    assert tool == "uv" or "2.14.1+cpu" in said          # pip saw the CPU build and left it
    assert _torch(python) is None
