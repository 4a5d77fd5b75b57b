from pathlib import Path

import pytest

from cuforge.core.errors import ConfigError
from cuforge.core.project import Project
from cuforge.config.recipes import load_recipes, build_order


def _project(tmp_path: Path, recipes: dict[str, str]) -> Project:
    (tmp_path / "recipes").mkdir()
    for name, body in recipes.items():
        (tmp_path / "recipes" / f"{name}.toml").write_text(body)
    return Project(tmp_path)


PRE = 'kind = "prebuilt"\n[prebuilt]\nrequirements = ["x==1"]\nsha256 = ["0000000000000000000000000000000000000000000000000000000000000000"]\n'
SRC = '[source]\npath = "native/x"\n'


def test_only_pulls_dependencies_first(tmp_path):
    project = _project(tmp_path, {
        "pccm": PRE,
        "cumm": 'depends = ["pccm"]\n' + SRC,
        "spconv": 'depends = ["cumm", "pccm"]\n' + SRC,
        "flash-attn": SRC,
    })
    order = [r.name for r in build_order(load_recipes(project), ["spconv"])]
    assert order == ["pccm", "cumm", "spconv"]
    order = [r.name for r in build_order(load_recipes(project), ["flash-attn", "spconv"])]
    assert order.index("pccm") < order.index("cumm") < order.index("spconv")
    assert set(order) == {"flash-attn", "pccm", "cumm", "spconv"}


def test_cycle_and_unknown_are_config_errors(tmp_path):
    project = _project(tmp_path, {"a": 'depends = ["b"]\n' + SRC, "b": 'depends = ["a"]\n' + SRC})
    with pytest.raises(ConfigError, match="cycle"):
        build_order(load_recipes(project), ["a"])
    with pytest.raises(ConfigError, match="no recipe for nope"):
        build_order(load_recipes(project), ["nope"])


def test_git_source_must_pin_a_commit(tmp_path):
    project = _project(tmp_path, {"a": '[source]\ngit = "https://x/y.git"\ncommit = "main"\n'})
    with pytest.raises(ConfigError, match="40-hex"):
        load_recipes(project)
