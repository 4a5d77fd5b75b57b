"""Exit codes mean what the table says (issue 43, point 5): each error kind its own code,
the table in every subcommand's --help, and doctor passing a wheelhouse whose only FAILED
line is a stack's optional package. Real processes: ``python -m cuforge`` with a tmp state."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cuforge.core import errors
from cuforge.cli.parser import ONLY_IN, make_parser
from cuforge.publish.wheelhouse import Entry, Wheelhouse

ROOT = Path(__file__).resolve().parents[2]


def _cli(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "CUFORGE_STATE": str(tmp / "state"),
            "CUFORGE_WHEELHOUSE": str(tmp / "wh"), **env}
    full.pop("CUFORGE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "cuforge", *args], capture_output=True,
                          text=True, cwd=ROOT, env=full, timeout=300)


def test_each_error_kind_has_its_own_code():
    codes = [k.exit_code for k in errors.CuforgeError.__subclasses__()]
    assert len(codes) == len(set(codes)), codes
    assert {"EnvError", "MissingWheelError"} <= {k.__name__ for k in
                                                 errors.CuforgeError.__subclasses__()}


def _subcommands() -> list[str]:
    sub = next(a for a in make_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    return list(sub.choices)


@pytest.mark.parametrize("command", _subcommands())
def test_every_subcommand_help_shows_the_table(tmp_path, command):
    """Each command's table: the codes it can end with, no other (issue 50 point 8: `build
    --help` named 11, which only `setup --no-build` raises)."""
    text = _cli(tmp_path, command, "--help").stdout
    assert "exit codes:" in text, text[-300:]
    table = text.split("exit codes:")[1]
    shown = {int(c) for c in re.findall(r"^  (\d+) ", table, re.M)}
    for code, what in errors.exit_code_table():
        only = next((cmds for kind, cmds in ONLY_IN.items() if kind.exit_code == code), None)
        if only is None or command in only:
            assert f"  {code:<4} {what}" in table
        else:
            assert code not in shown, (command, code)
    assert (11 in shown) == (command == "setup") and (9 in shown) == (command in (
        "build", "setup", "index", "verify"))


def test_the_narrowed_errors_are_raised_where_the_table_says():
    """Where each error kind of ONLY_IN is raised: a new place (reached from another command)
    must widen its row in cli/parser.py, or the table says what is not true."""
    src = ROOT / "src" / "cuforge"
    raisers = {kind: sorted(str(p.relative_to(src)) for p in src.rglob("*.py")
                            if f"{kind.__name__}(" in p.read_text() and p.name != "errors.py")
               for kind in ONLY_IN}
    assert raisers[errors.MissingWheelError] == ["workstation/decision.py"]   # setup's
    assert raisers[errors.WheelhouseError] == ["publish/wheelhouse.py", "publish/writable.py"]


def test_patch_on_a_file_is_a_usage_error_not_a_drifted_patch(tmp_path):
    afile = tmp_path / "checkout.txt"
    afile.write_text("not a checkout\n")
    proc = _cli(tmp_path, "patch", "milo", str(afile))
    assert proc.returncode == errors.ConfigError.exit_code, proc.stderr
    assert "is not a directory" in proc.stderr and "Traceback" not in proc.stderr
    quiet = _cli(tmp_path, "-q", "patch", "milo", str(afile))   # -q keeps the error
    assert quiet.returncode == 2 and quiet.stderr == proc.stderr


def test_an_env_that_cannot_be_made_is_an_env_error(tmp_path):
    """uv refuses (here: a broken uv config): exit 10, not a compile failure or a toolchain's."""
    bad = tmp_path / "uv.toml"
    bad.write_text("index = [\n")
    proc = _cli(tmp_path, "build", "--combo", "3.11-cu130", UV_CONFIG_FILE=str(bad))
    assert proc.returncode == errors.EnvError.exit_code == 10, proc.stderr
    # refused where the env is first resolved, before anything is made (issue 43 point 2)
    assert "environment error: uv could not resolve combo 3.11-cu130" in proc.stderr
    assert "uv.toml" in proc.stderr and "Traceback" not in proc.stderr


def _project_copy(tmp: Path) -> Path:
    proj = tmp / "proj"
    for d in ("envs", "recipes", "stacks", "patches", "smoke", "native"):
        shutil.copytree(ROOT / d, proj / d)
    recipe = proj / "recipes" / "tetra-triangulation.toml"
    # a header this machine surely lacks: what the GPU machine lacks (CGAL)
    recipe.write_text(recipe.read_text().replace('header = "gmp.h"',
                                                 'header = "cuforge_no_such_header.h"'))
    return proj


def test_doctor_reports_a_failed_optional_package_as_left_out(tmp_path):
    """`setup milo` exits 0 without tetra-triangulation (optional): doctor must not exit 3
    for its FAILED line and its missing headers."""
    proj = _project_copy(tmp_path)
    house = Wheelhouse(tmp_path / "wh" / "linux-x86_64" / "cu130" / "torch2.14.1-cp311")
    house.dir.mkdir(parents=True)
    house.publish(None, Entry(package="tetra-triangulation", status="FAILED", version="0.1",
                              reason="compile failed: CGAL/Delaunay_triangulation_3.h: no such "
                                     "file"))
    proc = _cli(tmp_path, "--root", str(proj), "doctor", "--combo", "3.11-cu130",
                COLUMNS="250")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert "left out" in proc.stdout and "optional in stacks/milo.toml" in proc.stdout
