"""A package's build never sees an installed copy of itself, and build dependencies stay out of
the combo env (cuforge.env.builddeps). The H200 bug in small: cumm's setup.py appends its own dir
to sys.path and generates code from where ``import cumm`` found it; spconv's build had cumm
installed into the build interpreter, so a later ``--rebuild`` of cumm imported that copy and
made a broken wheel. Fixture: tests/fixtures/upstream/selfimport (gen: cumm's shape, genuser:
spconv's), built through the real pipeline in the 3.11-cu130 combo env (pure Python: seconds).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from cuforge.env.builddeps import require_not_installed
from cuforge.core.errors import BuildError

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "upstream" / "selfimport"
COMBO_DIR = Path("linux-x86_64") / "cu130" / "torch2.14.1-cp311"


@pytest.fixture
def project(tmp_path):
    envs = sorted(p for p in (ROOT / ".cuforge" / "envs").glob("3.11-cu130-*")
                  if (p / "bin" / "python").exists())
    if not envs:
        pytest.skip("the 3.11-cu130 combo env is not created yet (run the demo build first)")
    proj = tmp_path / "proj"
    shutil.copytree(ROOT / "envs", proj / "envs")
    (proj / "recipes").mkdir()
    for name, extra in (("gen", ""), ("genuser", 'depends = ["gen"]\n')):
        (proj / "recipes" / f"{name}.toml").write_text(
            f'kind = "setuptools"\n{extra}modules = ["{name}"]\n[source]\n'
            f'path = "{FIXTURE / name}"\n[arches]\ndevice_code = false\n')
    state_envs = proj / ".state" / "envs"   # reuse the real combo env: no second torch install
    state_envs.mkdir(parents=True)
    for env_dir in envs:
        (state_envs / env_dir.name).symlink_to(env_dir)
    return proj, envs[0] / "bin" / "python"


def _build(proj: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUFORGE_ROOT": str(proj), "CUFORGE_STATE": str(proj / ".state"),
           "CUFORGE_WHEELHOUSE": str(proj / "wh"), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "cuforge", "build", "--combo", "3.11-cu130",
                           "--cuda-arch", "9.0", *args], env=env, capture_output=True,
                          text=True, timeout=600)


def _generated(proj: Path) -> str:
    """gen/core.py as the newest gen wheel in the wheelhouse has it."""
    lines = [json.loads(line) for line in
             (proj / "wh" / COMBO_DIR / "manifest.jsonl").read_text().splitlines()]
    wheel = [e["wheel"] for e in lines if e["package"] == "gen" and e.get("wheel")][-1]
    with zipfile.ZipFile(proj / "wh" / COMBO_DIR / wheel) as zf:
        return zf.read("gen/core.py").decode()


@pytest.mark.slow   # ~35 s: five package builds through the pipeline
def test_rebuilding_a_build_dependency_never_imports_an_installed_copy(project):
    proj, python = project
    first = _build(proj, "--only", "genuser")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert _generated(proj) == "NAMESPACE = '.'\n"
    # what broke cumm on the H200: a rebuild of the dependency after its dependent was built
    again = _build(proj, "--only", "gen", "--rebuild")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert _generated(proj) == "NAMESPACE = '.'\n"
    # genuser's build had gen, from its own overlay: the combo env has no gen
    probe = subprocess.run([str(python), "-c", "import importlib.util as u; "
                            "print(u.find_spec('gen'))"], capture_output=True, text=True,
                           cwd=proj, env={k: v for k, v in os.environ.items()
                                          if k != "PYTHONPATH"})
    assert probe.stdout.strip() == "None", probe.stdout
    # and the dependent again, on the rebuilt wheel (its overlay replaced, not added to)
    last = _build(proj, "--only", "genuser", "--rebuild")
    assert last.returncode == 0, last.stdout[-3000:] + last.stderr[-3000:]
    overlay = proj / ".state" / "work"
    assert len(list(overlay.glob("*/genuser/build-deps/gen/gen-*.dist-info"))) == 1


def test_a_package_importable_from_the_build_interpreter_is_refused():
    """The guard for copies older cuforge versions left in site-packages: pytest stands in for
    one (it is installed in the interpreter running this test)."""
    with pytest.raises(BuildError) as err:
        require_not_installed(Path(sys.executable), ["pytest"], "pytest")
    assert "pip uninstall -y pytest" in str(err.value)
    require_not_installed(Path(sys.executable), ["surely_not_installed_here"], "x")
