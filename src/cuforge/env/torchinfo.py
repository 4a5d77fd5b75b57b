"""What a combo's interpreter has: torch's version, CUDA, C++ ABI and where its files live."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from cuforge import data
from cuforge.core.errors import ToolchainError
from cuforge.core.runner import capture
from cuforge.core.atomic import write_atomic

PROBE_CACHE = "cuforge-probe.json"   # in a cuforge venv: its probe's answer and what it is for

_PROBE = r"""
import json, os, sys, sysconfig
info = {"python": sys.executable, "py_version": "%d.%d" % sys.version_info[:2],
        "site_packages": sysconfig.get_paths()["purelib"], "machine": sysconfig.get_platform().split("-", 1)[1]}
try:
    import torch
except Exception as err:  # report, do not crash: the caller decides what to install
    info["torch_error"] = f"{type(err).__name__}: {err}"
else:
    import torch.utils.cpp_extension as ext
    import torch.utils
    info.update(
        torch=torch.__version__.split("+")[0], torch_full=torch.__version__,
        cuda=torch.version.cuda, cxx11_abi=bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        torch_lib=os.path.join(os.path.dirname(torch.__file__), "lib"),
        include_paths=ext.include_paths(), cmake_prefix_path=torch.utils.cmake_prefix_path)
nv = os.path.join(info["site_packages"], "nvidia")
dirs = [os.path.join(nv, d) for d in sorted(os.listdir(nv))] if os.path.isdir(nv) else []
info["nvidia_include"] = [os.path.join(d, "include") for d in dirs if os.path.isdir(os.path.join(d, "include"))]
info["nvidia_lib"] = [os.path.join(d, "lib") for d in dirs if os.path.isdir(os.path.join(d, "lib"))]
print("CUFORGE-PROBE " + json.dumps(info))
"""


@dataclass(frozen=True)
class TorchInfo:
    python: Path
    py_version: str
    site_packages: Path
    machine: str
    torch: str = ""
    torch_full: str = ""
    cuda: str = ""
    cxx11_abi: bool = True
    torch_lib: Path | None = None
    include_paths: tuple[Path, ...] = ()
    cmake_prefix_path: str = ""
    nvidia_include: tuple[Path, ...] = ()
    nvidia_lib: tuple[Path, ...] = ()
    torch_error: str = ""

    @property
    def has_torch(self) -> bool:
        return bool(self.torch)


def expected(root: Path, py_version: str, torch: str, label: str, cuda: str, machine: str,
             nvidia_dirs: tuple[str, ...]) -> TorchInfo:
    """What ``probe`` will answer in a venv at ``root`` once torch ``torch`` (its build
    ``label``, e.g. ``cu130``) is installed there: torch's own layout, the ABI of its release
    (``data/torch_builds.toml``), and the ``site-packages/nvidia/<dir>s`` its CUDA wheels make
    (``nvidia_dirs``, envs/accels.toml). What a dry run shows for an env not made yet."""
    site = root / "lib" / f"python{py_version}" / "site-packages"
    nvidia = [site / "nvidia" / d for d in nvidia_dirs]
    include = site / "torch" / "include"
    since = Version(data.table("torch_builds")["cxx11_abi_since"])
    return TorchInfo(python=root / "bin" / "python", py_version=py_version, site_packages=site,
                     machine=machine, torch=torch, torch_full=f"{torch}+{label}", cuda=cuda,
                     cxx11_abi=Version(torch) >= since, torch_lib=site / "torch" / "lib",
                     include_paths=(include, include / "torch" / "csrc" / "api" / "include"),
                     cmake_prefix_path=str(site / "torch" / "share" / "cmake"),
                     nvidia_include=tuple(d / "include" for d in nvidia),
                     nvidia_lib=tuple(d / "lib" for d in nvidia))


def _asked(python: Path, env: tuple[tuple[str, str], ...]) -> dict:
    """``_ask``, once per interpreter path and ``env`` in a process: setup decides with the
    combo interpreter's torch and its build then checks that interpreter again (one ``import
    torch`` of ~5 s on the H100 for nothing). The path is kept as given, not resolved: every
    venv's ``bin/python`` leads to the same base interpreter."""
    with _ASKED_LOCK:
        answer = _ASKED.get(_memo_key(python, env))
    if answer is None:
        answer = _ask(python, env)
        with _ASKED_LOCK:
            _ASKED[_memo_key(python, env)] = answer
    return answer


def _memo_key(python: Path, env: tuple[tuple[str, str], ...]) -> tuple:
    return (str(Path(python).absolute()), tuple(env))


_ASKED: dict[tuple[str, tuple[tuple[str, str], ...]], dict] = {}
_ASKED_LOCK = threading.Lock()


def probe_venv(root: Path, env: tuple[tuple[str, str], ...] = (), *,
               remember: bool = True) -> TorchInfo:
    """``probe`` of the venv at ``root``, answered from ``root/PROBE_CACHE`` while the venv's
    installed distributions are the ones it was asked with: the answer depends only on them,
    and ``import torch`` cost 3 s of every build here (the env check of a no-op rerun)."""
    python = root / "bin" / "python"
    return _from_answer(_remembered(root / PROBE_CACHE, installed_key(root),
                                    lambda: _ask(python, env), remember))


def probe_interpreter(python: Path, cache_dir: Path | None = None,
                      env: tuple[tuple[str, str], ...] = (), *, remember: bool = True) -> TorchInfo:
    """Ask ``python`` about itself and its torch (one subprocess, ~2-6 s with torch); ``env``:
    what it needs on top of this process's environment to run (emulation's variables).

    With ``cache_dir`` (an interpreter cuforge did not make: a combo's ``interpreter``), the
    answer is kept there and reused while the distributions on its ``sys.path`` are the ones
    it was asked with, as ``probe_venv`` does for a venv: every setup and build with such a
    combo asked its torch first (3-5 s on the GPU machine); finding them costs one
    interpreter start. ``remember`` off: nothing is written (a dry run)."""
    with _ASKED_LOCK:   # asked already in this process: not even its sys.path again
        known = _memo_key(python, env) in _ASKED
    if cache_dir is None or known:
        return _from_answer(_asked(python, env))
    where = str(Path(python).absolute())
    paths = json.loads(capture([str(python), "-c", "import json, sys; print(json.dumps(sys.path))"],
                               error=ToolchainError, env=dict(env)))
    key = _distributions_key([where, os.path.realpath(python), repr(env)],
                             [Path(p) for p in paths if p])
    cache = cache_dir / f"{hashlib.sha256((where + repr(env)).encode()).hexdigest()[:16]}.json"
    answer = _remembered(cache, key, lambda: _asked(python, env), remember)
    with _ASKED_LOCK:   # a later question in this process starts no interpreter
        _ASKED.setdefault(_memo_key(python, env), answer)
    return _from_answer(answer)


def _remembered(cache: Path, key: str, ask: Callable[[], dict], remember: bool) -> dict:
    """The answer saved in ``cache`` for ``key``, else ``ask()``'s, saved unless ``remember``
    is off (a dry run writes nothing)."""
    try:
        saved = json.loads(cache.read_text())
        if saved["key"] == key:
            return saved["answer"]
    except (OSError, ValueError, KeyError, TypeError):
        pass   # none yet, or unreadable: ask
    answer = ask()
    if remember:   # a reader sees the old answer or the new one, never half of one
        write_atomic(cache, json.dumps({"key": key, "answer": answer}))
    return answer


def installed_key(root: Path) -> str:
    """What a venv's probe answer depends on: the venv's path and interpreter, and each
    distribution installed in it (``_distributions_key``)."""
    cfg = root / "pyvenv.cfg"
    # the answer's paths are as seen from ``root`` (a clone's envs/ may link to a shared venv):
    # the path asked through is part of the key, not only where it leads
    return _distributions_key([str(root.absolute()), os.path.realpath(root / "bin" / "python"),
                               cfg.read_text() if cfg.is_file() else ""],
                              sorted(root.glob("lib/python*/site-packages")))


def _distributions_key(parts: list[str], site_dirs: list[Path]) -> str:
    """``parts`` and each distribution installed in ``site_dirs``: a dist-info dir's name
    (local version included: ``torch-2.14.1+cu130``) with its RECORD's size and time (a
    reinstall rewrites it)."""
    parts = list(parts)
    for site in site_dirs:
        for info in sorted(site.glob("*.dist-info")) if site.is_dir() else ():
            record = info / "RECORD"
            stat = record.stat() if record.exists() else None
            parts.append(f"{info.name} {stat and (stat.st_size, stat.st_mtime_ns)}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _ask(python: Path, env: tuple[tuple[str, str], ...] = ()) -> dict:
    out = capture([str(python), "-c", _PROBE], error=ToolchainError, env=dict(env))
    line = next((ln for ln in out.splitlines() if ln.startswith("CUFORGE-PROBE ")), None)
    if line is None:
        raise ToolchainError(f"{python} did not answer the environment probe")
    return json.loads(line.removeprefix("CUFORGE-PROBE "))


def _from_answer(d: dict) -> TorchInfo:
    return TorchInfo(
        python=Path(d["python"]), py_version=d["py_version"],
        site_packages=Path(d["site_packages"]), machine=d["machine"],
        torch=d.get("torch", ""), torch_full=d.get("torch_full", ""), cuda=d.get("cuda") or "",
        cxx11_abi=d.get("cxx11_abi", True),
        torch_lib=Path(d["torch_lib"]) if d.get("torch_lib") else None,
        include_paths=tuple(map(Path, d.get("include_paths", ()))),
        cmake_prefix_path=d.get("cmake_prefix_path", ""),
        nvidia_include=tuple(map(Path, d["nvidia_include"])),
        nvidia_lib=tuple(map(Path, d["nvidia_lib"])),
        torch_error=d.get("torch_error", ""),
    )
