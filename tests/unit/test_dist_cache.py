"""``--cache dist`` configuration (dist_cache.py, cache_config.load_config): where the
scheduler and the client token come from, what is refused before a build, and the client
config the package's sccache server reads. The real scheduler and build server are in
tests/integration/test_dist_cache_builds.py."""

from __future__ import annotations

import stat
import tomllib

import pytest

from cuforge.pipeline import cache_config as conf
from cuforge.pipeline import compiler_cache as cc
from cuforge.pipeline import dist_cache as dc
from cuforge.core.errors import ConfigError


@pytest.fixture(autouse=True)
def _no_outer_settings(monkeypatch):
    for var in ("CUFORGE_CACHE", "CUFORGE_DIST_TOKEN", "CUFORGE_DIST_SCHEDULER", "CUFORGE_BUILD_DIR"):
        monkeypatch.delenv(var, raising=False)


def test_scheduler_urls():
    assert dc.parse_scheduler("https://sched.lab:10600/", "x") == "https://sched.lab:10600"
    for bad in ("sched:10600", "redis://h:1", "http://"):
        with pytest.raises(ConfigError, match="not an http"):
            dc.parse_scheduler(bad, "--scheduler")


def test_dist_layers(tmp_path, monkeypatch):
    (tmp_path / "cache.toml").write_text(
        '[cache]\nstorage = "dist"\n[cache.dist]\nscheduler = "http://a:10600"\n'
        'token_env = "LAB_TOKEN"\n')
    with pytest.raises(ConfigError, match=r"no client token \(\$LAB_TOKEN is unset\)"):
        conf.load_config(tmp_path)
    monkeypatch.setenv("LAB_TOKEN", "t0")
    config = conf.load_config(tmp_path)
    assert config.kind == "dist" and config.dist.scheduler == "http://a:10600"
    monkeypatch.setenv("CUFORGE_DIST_SCHEDULER", "http://b:10600")
    assert conf.load_config(tmp_path).dist.scheduler == "http://b:10600"
    assert conf.load_config(tmp_path, scheduler="http://c:1").dist.scheduler == "http://c:1"


def test_dist_needs_a_scheduler_and_scheduler_needs_dist(tmp_path, monkeypatch):
    monkeypatch.setenv("CUFORGE_DIST_TOKEN", "t")
    with pytest.raises(ConfigError, match="no sccache-dist scheduler") as err:
        conf.load_config(tmp_path, override="dist")
    assert "--scheduler" in str(err.value)
    with pytest.raises(ConfigError, match="not dist"):
        conf.load_config(tmp_path, override="local", scheduler="http://a:10600")
    assert conf.load_config(tmp_path, override="dist", scheduler="http://a:10600").kind == "dist"


def test_unknown_dist_keys_are_refused(tmp_path):
    (tmp_path / "cache.toml").write_text('[cache.dist]\ntoken = "inline"\n')
    with pytest.raises(ConfigError, match=r"unknown key\(s\) token in \[cache.dist\]"):
        conf.load_config(tmp_path)


def test_token_file(tmp_path):
    settings = dc.DistSettings("http://a:1", token_file=str(tmp_path / "tok"))
    with pytest.raises(ConfigError, match="token_file"):
        dc.token(settings)
    (tmp_path / "tok").write_text("from-file\n")
    assert dc.token(settings) == "from-file"


def test_client_config_is_owner_only_and_names_the_scheduler(tmp_path, monkeypatch):
    monkeypatch.setenv("CUFORGE_DIST_TOKEN", 'se"cret')
    path = dc.client_config(dc.DistSettings("http://a:10600"), tmp_path / "pkg")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    conf = tomllib.loads(path.read_text())["dist"]
    assert conf["scheduler_url"] == "http://a:10600" and conf["auth"] == {
        "type": "token", "token": 'se"cret'}
    assert conf["cache_dir"] == str(tmp_path / "pkg" / "toolchains")
    assert conf["toolchain_cache_size"] == 5 << 30
    dc.remove_client_config(path)
    assert not path.exists()


def test_a_scheduler_nobody_runs_is_down():
    got = dc.probe("http://127.0.0.1:9", "t", timeout=1)
    assert got.state == "down"


def test_the_report_says_where_compiles_ran():
    report = cc.CacheReport(storage="/s", misses=5, scheduler="http://a:1", compilations=6,
                            remote={"10.0.0.2:10501": 4}, remote_errors=1)
    assert "4 of 6 compiles on build servers of http://a:1, 1 failed there and ran here" \
        in report.line()
    assert report.as_dict()["dist"] == {"scheduler": "http://a:1", "compilations": 6,
                                        "remote": {"10.0.0.2:10501": 4}, "remote_errors": 1}
    assert "dist" not in cc.CacheReport(storage="/s").as_dict()
