"""Stacks name two model checks: the checkout's own models (setup) and a miniature over the
wheels alone (verify --models, chosen by which wheels are there)."""

from __future__ import annotations

import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from cuforge.core.errors import ConfigError
from cuforge.core.project import Project
from cuforge.config.stacks import load_stack
from cuforge.pipeline.verify_command import model_reports

REPO = Path(__file__).resolve().parents[2]


def test_the_real_stacks_name_both_checks_and_the_files_exist():
    project = Project(REPO)
    for name, checkout, mini in (
            ("pointcept", "smoke/checkout_models/pointcept_ptv3.py", "smoke/models/ptv3_tiny.py"),
            ("milo", "smoke/checkout_models/milo_render.py", "smoke/stack_models/milo_tiny.py")):
        stack = load_stack(project, name)
        assert (stack.checkout_model, stack.miniature) == (checkout, mini)
        assert (REPO / checkout).is_file() and (REPO / mini).is_file()


def test_old_model_check_key_is_a_config_error(tmp_path):
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "s.toml").write_text(
        '[stack]\npackages = ["p"]\nmodel_check = "x.py"\n')
    with pytest.raises(ConfigError, match="split in two"):
        load_stack(Project(tmp_path), "s")


def wheel(tmp: Path, name: str) -> Path:
    path = tmp / f"{name.replace('-', '_')}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{name.replace('-', '_')}/__init__.py", "")
    return path


def test_verify_models_runs_only_the_miniatures_whose_stack_is_complete(tmp_path):
    """Pointcept's wheels without pointops: its miniature is skipped and says what is missing;
    the MILo miniature too (none of its wheels). Nothing runs, so no interpreter is needed."""
    wheels = [wheel(tmp_path, "spconv-cu130"), wheel(tmp_path, "torch-scatter")]
    reports = model_reports(Project(REPO), SimpleNamespace(python=Path("/nonexistent")), wheels)
    by_name = {r.package: r.results[0] for r in reports}
    assert set(by_name) == {"model:ptv3_tiny", "model:milo_tiny"}
    assert by_name["model:ptv3_tiny"].status == "skipped"
    assert "pointops not among the wheels" in by_name["model:ptv3_tiny"].detail
    assert "simple-knn" in by_name["model:milo_tiny"].detail
