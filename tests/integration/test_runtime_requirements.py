"""The Requires-Dist that verification installs never replaces torch or a package the
wheelhouse builds, and the manifest records what it installed. Real build of the tiny
extension, the real combo env (numpy there already satisfies; nothing is downloaded)."""

from __future__ import annotations

import pytest

from reliability_project import build, link_combo_env, make_project, manifest_lines

pytestmark = pytest.mark.slow


def test_torch_and_wheelhouse_packages_are_left_out_and_the_rest_recorded(tmp_path):
    # tinyext-helper has a recipe: pip must not look for it (it is on no index: pip would fail)
    proj = make_project(tmp_path, requires=("numpy", "torch>=1.0", "tinyext-helper>=0.1"))
    (proj / "recipes" / "tinyext-helper.toml").write_text('[source]\npath = "nowhere"\n')
    link_combo_env(proj)
    run = build(proj, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    entry = manifest_lines(proj)[-1]
    assert entry["status"] == "compiled"
    assert entry["runtime_installed"] == ["numpy"]
    log = (proj / ".state" / "logs").glob("*/tinyext.log")
    text = next(log).read_text()
    assert "runtime requirements of tinyext" in text and "torch==2.14.1" in text
