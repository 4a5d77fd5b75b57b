"""`cuforge clean` (issue 43, point 7): lists the state dir with sizes, removes only what it is
told, a dry run removes nothing, a wheelhouse only when named. Real process, real dirs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _clean(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUFORGE_STATE": str(tmp / "state"),
           "CUFORGE_WHEELHOUSE": str(tmp / "wh"), "COLUMNS": "250"}
    return subprocess.run([sys.executable, "-m", "cuforge", "clean", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def _state(tmp: Path) -> dict[str, Path]:
    paths = {
        "env": tmp / "state" / "envs" / "3.11-cu130-torch2.14.1",
        "stale": tmp / "state" / "envs" / "3.11-cu130-torch9.9",
        "work": tmp / "state" / "work" / "3.11-cu130-torch2.14.1",
        "other": tmp / "state" / "envs" / "3.12-cu130-torch2.14.1",
        "logs": tmp / "state" / "logs" / "3.11-cu130-torch2.14.1",
    }
    for p in paths.values():
        p.mkdir(parents=True)
        (p / "blob").write_bytes(b"x" * 300_000)
    house = tmp / "wh" / "linux-x86_64" / "cu130" / "torch2.14.1-cp311"
    house.mkdir(parents=True)
    (house / "manifest.jsonl").write_text("")
    paths["wh"] = tmp / "wh"
    return paths


def _left(paths: dict[str, Path]) -> set[str]:
    return {k for k, p in paths.items() if p.exists()}


def test_clean_lists_and_removes_only_what_it_is_told(tmp_path):
    paths = _state(tmp_path)
    listed = _clean(tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert str(paths["stale"]) in listed.stdout and "nothing removed" in listed.stdout
    assert "300K" in listed.stdout     # du -h's units, as `du -sh` shows that dir
    assert _left(paths) == set(paths)

    dry = _clean(tmp_path, "--stale", "--dry-run")
    assert f"would remove envs {paths['stale']}" in dry.stdout and _left(paths) == set(paths)

    assert _clean(tmp_path, "--stale").returncode == 0
    assert _left(paths) == set(paths) - {"stale"}

    one = _clean(tmp_path, "--combo", "3.11-cu130")
    assert one.returncode == 0, one.stderr
    assert _left(paths) == {"other", "wh"}

    _clean(tmp_path, "--all")
    assert _left(paths) == {"wh"}     # a wheelhouse stays unless named

    refused = _clean(tmp_path, "--wheelhouse", str(tmp_path / "state"))
    assert refused.returncode == 2 and "not a cuforge wheelhouse" in refused.stderr
    assert _clean(tmp_path, "--wheelhouse", str(paths["wh"])).returncode == 0
    assert not paths["wh"].exists()


def test_clean_counts_what_removal_frees_not_the_links_into_uvs_cache(tmp_path):
    """uv hard-links a combo env's files from its cache: the env was listed as 6.0 GB while
    `du` showed 23 MB unique. What removal frees counts links once and leaves the cache's
    apart; sizes are in du -h's units."""
    cache = tmp_path / "uv-cache" / "torch"
    cache.mkdir(parents=True)
    (cache / "libtorch.so").write_bytes(os.urandom(3 * 2**20))
    env = tmp_path / "state" / "envs" / "3.11-cu130-torch2.14.1"
    (env / "lib").mkdir(parents=True)
    os.link(cache / "libtorch.so", env / "lib" / "libtorch.so")        # uv's hard link
    os.link(cache / "libtorch.so", env / "lib" / "libtorch-again.so")  # counted once
    (env / "mine.py").write_bytes(os.urandom(40 * 1024))               # the env's own
    (tmp_path / "wh").mkdir()
    listed = _clean(tmp_path)
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if str(env) in line)
    on_disk, frees = row.split()[1:3]
    assert on_disk.endswith("M") and 3.0 <= float(on_disk[:-1]) <= 3.2, row   # not 6 MB
    assert frees.endswith("K") and 40 <= float(frees[:-1]) <= 52, row
    dry = _clean(tmp_path, "--combo", "3.11-cu130", "--dry-run")
    assert "removing it frees 4" in dry.stdout and "hard links into uv's cache" in dry.stdout, \
        dry.stdout
    assert (cache / "libtorch.so").stat().st_nlink == 3
