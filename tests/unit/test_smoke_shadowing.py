"""A smoke script can never import itself instead of the package it tests.

Python puts a script's own directory first on ``sys.path``. Two runs hit that:
smoke/pointgroup_ops.py re-ran itself as a child process (``python <script> --child``), and a
person ran ``python smoke/milo_chunked_rasterization.py`` and got smoke/nvdiffrast.py instead of
nvdiffrast. The cure is in two parts, each tested here: scripts are named ``check_<pkg>.py``
(no name in smoke/ is an importable package's), and cuforge's runner keeps the directory last
and isolates the children (PYTHONSAFEPATH)."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cuforge.core.project import find_project
from cuforge.config.recipes import SMOKE_PREFIX, load_recipes
from cuforge.config.stress import STRESS_PREFIX
from cuforge.verify.smoke import run_smoke

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "smoke"

# A smoke script whose child process (as pointgroup_ops' does) imports the package by name,
# and which also uses a helper module that lives beside it.
SCRIPT = """\
import subprocess, sys
if sys.argv[1:] == ["--child"]:
    import fakepkg
    sys.exit(0 if getattr(fakepkg, "REAL", False) else 3)
import fakepkg
from _helper import ANSWER
assert getattr(fakepkg, "REAL", False), "imported the script itself"
assert ANSWER == 42
child = subprocess.run([sys.executable, __file__, "--child"])
assert child.returncode == 0, f"the child imported the script itself ({child.returncode})"
print("pass: real package in the script and in its child")
"""


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """(site dir holding the real ``fakepkg``, smoke dir holding a helper)."""
    site = tmp_path / "site"
    (site / "fakepkg").mkdir(parents=True)
    (site / "fakepkg" / "__init__.py").write_text("REAL = True\n")
    smoke = tmp_path / "smoke"
    smoke.mkdir()
    (smoke / "_helper.py").write_text("ANSWER = 42\n")
    return site, smoke


def _by_hand(script: Path, site: Path) -> subprocess.CompletedProcess:
    """What a person does: ``python smoke/<script>`` with the package installed."""
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("PYTHONSAFEPATH", None)
    return subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, cwd=script.parent.parent)


def test_a_script_named_like_its_package_would_shadow_it(layout):
    """The hazard itself (so the tests below can fail): by hand, ``fakepkg.py`` imports itself."""
    site, smoke = layout
    (smoke / "fakepkg.py").write_text(SCRIPT)
    proc = _by_hand(smoke / "fakepkg.py", site)
    assert proc.returncode != 0 and "imported the script itself" in proc.stderr


def test_the_runner_isolates_the_script_and_its_children_whatever_its_name(layout):
    site, smoke = layout
    (smoke / "fakepkg.py").write_text(SCRIPT)
    result = run_smoke(Path(sys.executable), smoke / "fakepkg.py", [site])
    assert result.status == "pass", result.detail


def test_a_check_named_script_gets_the_package_by_hand_and_in_its_child(layout):
    site, smoke = layout
    (smoke / f"{SMOKE_PREFIX}fakepkg.py").write_text(SCRIPT)
    proc = _by_hand(smoke / f"{SMOKE_PREFIX}fakepkg.py", site)
    assert proc.returncode == 0, proc.stderr
    result = run_smoke(Path(sys.executable), smoke / f"{SMOKE_PREFIX}fakepkg.py", [site])
    assert result.status == "pass", result.detail


def _smoke_modules() -> list[Path]:
    """Everything in smoke/ that ``import NAME`` could find when smoke/ is on sys.path."""
    return sorted(p for p in SMOKE.rglob("*") if "__pycache__" not in p.parts
                  and (p.suffix == ".py" or p.is_dir()))


def test_no_name_in_smoke_can_shadow_a_package():
    recipes = load_recipes(find_project(ROOT))
    ours = {m.split(".")[0] for r in recipes.values() for m in r.modules}
    ours |= {r.name.replace("-", "_") for r in recipes.values()}
    for path in _smoke_modules():
        name = path.stem if path.is_file() else path.name
        assert name not in ours, f"{path} has the name of a package that smoke tests import"
        assert importlib.util.find_spec(name) is None, f"{path} shadows the installed {name!r}"
        if path.parent == SMOKE and path.is_file():
            # recipe scripts are check_<recipe>.py and stress_<recipe>.py, helpers _<name>.py
            assert name.startswith((SMOKE_PREFIX, STRESS_PREFIX, "_")) \
                or name == "milo_chunked_rasterization", path


def test_every_recipe_finds_its_check_script():
    project = find_project(ROOT)
    for r in load_recipes(project).values():
        if r.kind != "prebuilt":
            assert r.smoke.path(project, r.name).name == f"{SMOKE_PREFIX}{r.name}.py", r.name


def test_exit_77_still_means_skipped(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("import sys\nprint('skipped: no GPU')\nsys.exit(77)\n")
    assert run_smoke(Path(sys.executable), script).status == "skipped"
