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
    # numpy is in the combo env already: pip's resolver is not started for nothing
    assert "runtime requirements of tinyext" in text and "met already" in text
    assert "pip not run" in text and "pip install" not in text


def test_recipes_edited_while_it_compiles_do_not_change_the_build(tmp_path):
    """The build runs on the recipes it read when it started: an edit of recipes/ during the
    compile (a broken file, a changed recipe) neither fails it nor changes what the manifest says
    it was built from. Before, verification read recipes/ again and died on the broken file
    after the whole compile (flash-attn, 99 minutes here)."""
    import threading
    import time

    from cuforge.pipeline.keys import recipe_digest
    from cuforge.core.project import Project
    from cuforge.config.recipes import parse_recipe

    proj = make_project(tmp_path, requires=("numpy", "tinyext-helper>=0.1"))
    helper = proj / "recipes" / "tinyext-helper.toml"
    helper.write_text('[source]\npath = "nowhere"\n')
    link_combo_env(proj)
    recipe = proj / "recipes" / "tinyext.toml"
    planned = recipe_digest(Project(proj), parse_recipe(recipe))
    pidfile = tmp_path / "compiling.pid"
    result = {}
    runner = threading.Thread(target=lambda: result.update(run=build(
        proj, env={"TINYEXT_SLEEP": "3", "TINYEXT_PIDFILE": str(pidfile)}, timeout=600)))
    runner.start()
    while not pidfile.exists() and runner.is_alive():
        time.sleep(0.1)
    assert pidfile.exists(), result["run"].stderr[-3000:]
    helper.write_text('no_such_key = 1\n[source]\npath = "nowhere"\n')
    recipe.write_text(recipe.read_text() + "# edited while compiling\n")
    runner.join()
    run = result["run"]
    assert run.returncode == 0, run.stderr[-3000:]
    entry = manifest_lines(proj)[-1]
    assert entry["status"] == "compiled" and entry["runtime_installed"] == ["numpy"]
    assert entry["recipe_digest"] == planned
    assert recipe_digest(Project(proj), parse_recipe(recipe)) != planned
