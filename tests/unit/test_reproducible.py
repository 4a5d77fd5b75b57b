"""Reproducible wheels, one mechanism each (docs/reliability.md, "Reproducible wheels"): the
published zip written the same for the same content, the build's paths mapped out of what
gcc writes (a real gcc here; nvcc's real compile is tests/integration/test_reproducible_wheels.py),
the nvcc launcher's per-file module id, the source's SOURCE_DATE_EPOCH, a --rebuild that starts
from a fresh tree and build dir."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from cuforge.config.recipes import Source
from cuforge.core.atomic import EXECUTABLE, write_atomic
from cuforge.pipeline import sources
from cuforge.pipeline.actions import reset_build_dir
from cuforge.pipeline.builders.reproducible import path_maps
from cuforge.publish.rewrite import pin


def _wheel(path: Path, order: list[str], when: tuple, mode: int) -> Path:
    files = {"demo/__init__.py": b"x = 1\n", "demo/data.txt": b"data\n",
             "demo-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n"
                                            b"Requires-Dist: torch\n\n",
             "demo-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\n",
             "demo-1.0.dist-info/RECORD": b""}
    with zipfile.ZipFile(path, "w") as zf:
        for name in order:
            info = zipfile.ZipInfo(name, when)
            info.external_attr = mode << 16
            zf.writestr(info, files[name], compress_type=zipfile.ZIP_STORED)
    return path


def test_the_same_content_gives_the_same_published_zip(tmp_path):
    """Two wheels of one content, written in another order, at other times, with another
    umask: the published copies are byte for byte the same, in name order, RECORD last, every
    entry dated by the source's time."""
    names = ["demo-1.0.dist-info/RECORD", "demo/data.txt", "demo-1.0.dist-info/WHEEL",
             "demo/__init__.py", "demo-1.0.dist-info/METADATA"]
    one = _wheel(tmp_path / "a" / "demo-1.0-py3-none-any.whl", names, (2026, 12, 6, 1, 2, 3),
                 0o100664) if (tmp_path / "a").mkdir() is None else None
    two = _wheel(tmp_path / "b" / "demo-1.0-py3-none-any.whl", sorted(names, reverse=True),
                 (2026, 12, 7, 4, 5, 6), 0o100600) if (tmp_path / "b").mkdir() is None else None
    kw = dict(accel="cu130", torch="2.14.1", house={}, epoch=1700000000)
    out_one, out_two = pin(one, tmp_path / "p1", **kw), pin(two, tmp_path / "p2", **kw)
    assert out_one.read_bytes() == out_two.read_bytes()
    with zipfile.ZipFile(out_one) as zf:
        infos = zf.infolist()
    assert [i.filename for i in infos] == [
        "demo/__init__.py", "demo/data.txt", "demo-1.0.dist-info/METADATA",
        "demo-1.0.dist-info/WHEEL", "demo-1.0.dist-info/RECORD"]
    assert {i.date_time for i in infos} == {(2023, 11, 14, 22, 13, 20)}   # 1700000000 UTC
    assert {i.external_attr >> 16 for i in infos} == {0o100644}
    assert {i.compress_type for i in infos} == {zipfile.ZIP_DEFLATED}
    # a prebuilt wheel (no source time) keeps its dates, still in order
    kept = pin(one, tmp_path / "p3", **{**kw, "epoch": None})
    with zipfile.ZipFile(kept) as zf:
        assert zf.getinfo("demo/data.txt").date_time == (2026, 12, 6, 1, 2, 2)


def _gcc_object(tree: Path, launcher: Path | None) -> bytes:
    src = tree / "src" / "ext.cpp"
    obj = tree / "build" / "ext.o"
    obj.parent.mkdir(parents=True, exist_ok=True)
    argv = ["g++", "-g", "-O1", "-c", str(src), "-o", str(obj)]
    subprocess.run([str(launcher), *argv] if launcher else argv, check=True)
    return obj.read_bytes()


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on this machine")
def test_the_cxx_launcher_maps_the_build_dir_out_of_gcc_output(tmp_path):
    """A real g++ compiles one source (``__FILE__`` and debug info) in two build dirs: with
    the launcher the objects are the same bytes and name /cuforge/<pkg>; without, they differ."""
    objects, bare = [], []
    for where in ("one", "two/deeper"):
        tree = tmp_path / where / "work"
        (tree / "src").mkdir(parents=True)
        (tree / "src" / "ext.cpp").write_text('const char* where() { return __FILE__; }\n')
        maps = path_maps(tree, "demo", project=tmp_path / where, site_packages=None,
                         toolkit=None)
        launcher = write_atomic(*maps.launcher("CXX"), EXECUTABLE)
        objects.append(_gcc_object(tree, launcher))
        bare.append(_gcc_object(tree, None))
    assert objects[0] == objects[1]
    assert b"/cuforge/demo/src/ext.cpp" in objects[0] and str(tmp_path).encode() not in objects[0]
    assert bare[0] != bare[1]      # the launcher is what makes them equal


def _stand_in(tmp_path: Path, name: str) -> Path:
    """A program that prints its arguments, one a line, where nvcc or sccache would run."""
    path = tmp_path / "bin" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    path.chmod(0o755)
    return path


def test_the_nvcc_launcher_names_each_source_by_its_mapped_path(tmp_path):
    work = tmp_path / "work" / "demo"
    (work / "src").mkdir(parents=True)
    maps = path_maps(work, "demo", project=tmp_path, site_packages=None, toolkit=None)
    launcher = write_atomic(*maps.launcher("CUDA"), EXECUTABLE)
    nvcc = _stand_in(tmp_path, "nvcc")

    def run(*argv: str, cwd: Path = work) -> list[str]:
        return subprocess.run([str(launcher), *argv], cwd=cwd, capture_output=True, text=True,
                              check=True).stdout.splitlines()

    args = run(str(nvcc), "-x", "cu", "-c", str(work / "src" / "k.cu"), "-o", "k.cu.o")
    assert args[:6] == ["-x", "cu", "-c", str(work / "src" / "k.cu"), "-o", "k.cu.o"]
    assert f"-Xcompiler=-ffile-prefix-map={work}=/cuforge/demo" in args
    assert args[-3:] == ["-objtemp", "-Xcudafe", "--orig_src_path_name=/cuforge/demo/src/k.cu"]
    # a relative source is named from the working directory, as nvcc names it
    assert run(str(nvcc), "-c", "k.cu", cwd=work / "src")[-1] == \
        "--orig_src_path_name=/cuforge/demo/src/k.cu"
    # behind sccache (it names nvcc's files itself and loses the object with -objtemp)
    behind = run(str(_stand_in(tmp_path, "sccache")), str(nvcc), "-c", "k.cu", cwd=work / "src")
    assert "-objtemp" not in behind and behind[-1].endswith("/cuforge/demo/src/k.cu")
    # a link or device-link step has no source: the host maps only
    assert run(str(nvcc), "-dlink", "a.o", "-o", "b.o")[-1] == "-objtemp"


def test_maps_most_specific_last_and_none_a_flag_cannot_carry(tmp_path):
    """nvcc passes -Xcompiler's value on split at commas and spaces: such a path is left out,
    never a broken compile."""
    maps = path_maps(tmp_path / "p" / ".cuforge" / "work" / "e" / "x", "x",
                     project=tmp_path / "p", site_packages=tmp_path / "a b",
                     toolkit=tmp_path / "p" / ".cuforge" / "envs" / "e" / "cuda")
    news = [new for _, new in maps.maps]
    # the project holds the other two: first, so their own maps (later) win in gcc
    assert news[0] == "/cuforge/project" and sorted(news[1:]) == ["/cuforge/cuda", "/cuforge/x"]


def _git(repo: Path, *args: str, date: str = "") -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": os.environ["PATH"],
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    if date:
        env.update(GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    return subprocess.run(["git", "-C", str(repo), *args], env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_source_date_epoch_is_the_sources_own_time(tmp_path):
    """A pinned commit: its committer time (not the fetch's, not the files'); a local tree:
    1980-01-01 whatever its files' times; both written beside the fetched tree."""
    repo = tmp_path / "up"
    repo.mkdir()
    (repo / "setup.py").write_text("# v1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "v1", date="1700000000 +0000")
    git = Source(git=f"file://{repo}", commit=_git(repo, "rev-parse", "HEAD"))
    dest = tmp_path / "w" / "src"
    sources.fetch(git, project_root=tmp_path, cache_dir=tmp_path / "cache", dest=dest, stamp="k")
    assert sources.epoch_file(dest).read_text() == "1700000000\n"
    local = tmp_path / "mine"
    local.mkdir()
    (local / "setup.py").write_text("# mine\n")
    os.utime(local / "setup.py", (1800000000, 1800000000))
    dest = tmp_path / "w2" / "src"
    sources.fetch(Source(path=str(local)), project_root=tmp_path, cache_dir=tmp_path / "cache",
                  dest=dest, stamp="k")
    assert sources.epoch_file(dest).read_text() == f"{sources.LOCAL_EPOCH}\n"


def test_a_rebuild_starts_from_a_fresh_tree_and_build_dir(tmp_path):
    """Same source key: kept (an interrupted build resumes); --rebuild (fresh): nothing kept."""
    local = tmp_path / "mine"
    local.mkdir()
    (local / "setup.py").write_text("# mine\n")
    work = tmp_path / "work"
    kw = dict(project_root=tmp_path, cache_dir=tmp_path / "cache", dest=work / "src", stamp="k")
    reset_build_dir(work, "k")
    sources.fetch(Source(path=str(local)), **kw)
    for leftover in (work / "src" / "build" / "obj.o", work / "build" / "CMakeCache.txt"):
        leftover.parent.mkdir(parents=True, exist_ok=True)
        leftover.write_text("from the last build")
    reset_build_dir(work, "k")
    sources.fetch(Source(path=str(local)), **kw)
    assert (work / "src" / "build" / "obj.o").exists() and (work / "build" / "CMakeCache.txt").exists()
    reset_build_dir(work, "k", fresh=True)
    sources.fetch(Source(path=str(local)), **kw, fresh=True)
    assert not (work / "src" / "build").exists() and not (work / "build").exists()
    assert (work / "src" / "setup.py").read_text() == "# mine\n"
    digest = hashlib.sha256((work / "src" / "setup.py").read_bytes()).hexdigest()
    assert digest == hashlib.sha256(b"# mine\n").hexdigest()
