"""Names a person types (issue 50 point 5): ``--only simple_knn`` and ``setup Pointcept`` are
taken as meant (case and ``-``/``_`` do not matter, as pip and uv match names); a typo gets a
"did you mean"; ``--only ''`` and a ``--combo`` that disagrees with ``--python``/``--accel``
are refused; ``setup --no-build`` names every missing wheel with one command that builds
them; the nox sessions end with cuforge's exit code. Each refusal is the same for the dry run
and the run, and leaves nothing on disk."""

from __future__ import annotations

import doctest
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cuforge.config import names
from cuforge.core.errors import ConfigError, MissingWheelError

from reliability_project import ROOT, cuforge

BIN = Path(sys.executable).parent


def _tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
            for p in sorted(root.rglob("*")) if not p.is_symlink()}


def _repo(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    """``cuforge ARGS`` on the repo's own recipes and stacks, state and wheels under ``tmp``."""
    return cuforge(tmp, *args, env={"CUFORGE_ROOT": str(ROOT),
                                    "CUFORGE_STATE": str(tmp / "state"),
                                    "CUFORGE_WHEELHOUSE": str(tmp / "wh")}, timeout=300)


def _pointcept(tmp: Path) -> Path:
    checkout = tmp / "Pointcept"
    shutil.copytree(ROOT / "tests" / "fixtures" / "upstream" / "pointcept", checkout)
    return checkout


def _refused(tmp: Path, args: list[str], error: type, *says: str) -> str:
    """The run and its dry run: the same one line, ``error``'s exit code, nothing written."""
    before = _tree(tmp)
    runs = [_repo(tmp, *args, *dry) for dry in (["--dry-run"], [])]
    for run in runs:
        assert run.returncode == error.exit_code, (run.returncode, run.stderr[-2000:])
        assert run.stderr.startswith(f"cuforge: {error.label}") and not run.stdout, run.stderr
        assert "Traceback" not in run.stderr and "fix:" in run.stderr, run.stderr
        for phrase in says:
            assert phrase in run.stderr, (phrase, run.stderr)
    assert runs[0].stderr == runs[1].stderr
    assert _tree(tmp) == before, sorted(set(_tree(tmp)) ^ set(before))
    return runs[1].stderr


def test_the_names_examples_hold():
    result = doctest.testmod(names)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("args,says", [
    (["build", "--only", "spconvv"], ["no recipe for spconvv (did you mean spconv?)",
                                      "known packages: "]),
    (["build", "--only", ""], ["--only '' names no package"]),
    (["build", "--only", " , "], ["names no package"]),
    (["build", "--combo", "h200", "--python", "3.11", "--accel", "cu128"],
     ["--combo h200 is python 3.12 with cu130, but --python 3.11 --accel cu128 was given",
      "fix: pass --combo h200 alone"]),
    (["build", "--combo", "3.12-cu130", "--accel", "cu128"], ["but --accel cu128 was given"]),
    (["setup", "pointcep", "--checkout", "CHECKOUT"],
     ["no stack named 'pointcep'", "(did you mean pointcept?)"]),
])
def test_a_mistyped_name_or_a_conflict_is_refused(tmp_path, args, says):
    checkout = _pointcept(tmp_path)
    _refused(tmp_path, [str(checkout) if a == "CHECKOUT" else a for a in args], ConfigError,
             *says)


@pytest.mark.parametrize("args,first", [
    (["build", "--only", "Simple_KNN"], "# build order: simple-knn"),
    (["build", "--combo", "3.12-cu130", "--python", "3.12"], "# dry run: combo 3.12-cu130"),
    (["setup", "Pointcept", "--checkout", "CHECKOUT"], "cuforge setup pointcept (dry run):"),
])
def test_a_name_in_another_case_or_spelling_is_taken(tmp_path, args, first):
    checkout = _pointcept(tmp_path)
    run = _repo(tmp_path, *[str(checkout) if a == "CHECKOUT" else a for a in args],
                "--dry-run")
    assert run.returncode == 0, run.stderr[-2000:]
    assert first in run.stdout, run.stdout[:1000]


def test_setup_no_build_names_every_missing_wheel_and_one_command(tmp_path):
    checkout = _pointcept(tmp_path)
    err = _refused(tmp_path, ["setup", "pointcept", "--checkout", str(checkout), "--no-build"],
                   MissingWheelError, "have no wheel in")
    missing = err.split("cuforge: missing wheel: ")[1].split(" have no wheel")[0].split(", ")
    assert {"spconv", "cumm", "pccm", "pointops"} <= set(missing), missing
    fix = err.split("fix: ")[1].strip()
    assert fix == f"build them: cuforge build --combo 3.11-cu130 --only {','.join(missing)}"


def test_a_nox_session_keeps_cuforges_exit_code(tmp_path):
    """``nox -s build-... -- --only spconvv``: 2, as cuforge says, not nox's 1."""
    run = subprocess.run([str(BIN / "nox"), "--envdir", str(tmp_path / "nox"), "-s",
                          "build-3.11-cu130", "--", "--only", "spconvv", "--dry-run"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={**_env_without_cuforge(), "CUFORGE_STATE": str(tmp_path / "s")})
    out = run.stdout + run.stderr
    assert "did you mean spconv?" in out, out[-3000:]
    assert run.returncode == ConfigError.exit_code == 2, out[-3000:]


def _env_without_cuforge() -> dict[str, str]:
    import os
    return {k: v for k, v in os.environ.items() if not k.startswith("CUFORGE_")}
