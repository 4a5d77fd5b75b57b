"""`cuforge setup STACK --checkout PATH` end to end on a fixture checkout: a real uv venv, real
installs from a small wheelhouse (one wheel already there, one built first by the pipeline), the
patch set applied, the env file sourced by a real bash through bin/activate, the model stage.

Marked slow: ~20-40 s (two venvs; torch is hard-linked from uv's cache or reused via .pth)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from cuforge.config.combos import select_combo
from cuforge.pipeline.plan import wheel_dir
from cuforge.core.project import Project
from cuforge.core.digest import sha256_of
from cuforge.publish.wheelhouse import Entry, Wheelhouse

from conftest import pure_python_project, torch_python

REPO = Path(__file__).resolve().parents[2]
# the pointcept set applies to our fixture as it is (milo's records upstream's code hash)
FIXTURE = REPO / "tests" / "fixtures" / "upstream" / "pointcept"
ADDED = Path("pointcept") / "utils" / "spconv_algo.py"

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(torch_python() is None, reason="needs CUFORGE_TEST_TORCH_PYTHON")]

STACK = """
[stack]
name = "tiny"
description = "two pure-Python packages standing in for a research stack"
packages = ["tiny-render"]
optional = ["tiny-broken"]
patch_set = "pointcept"
checkout_model = "smoke/stack_models/tiny.py"

# the checkout's own requirements: one in the --find-links dir, one that wants another torch,
# one that no index has (open3d on the GPU machine)
[[requirement]]
spec = "tiny-extra"
source = "README.md:1 `pip install tiny-extra`"

[[requirement]]
spec = "tiny-old-torch"
source = "README.md:2 `pip install tiny-old-torch`"

[[requirement]]
spec = "open3d==0.19.0"
source = "README.md:3 `pip install open3d==0.19.0`"

[[env]]
name = "TINY_CHUNK"
value = "2000000"
why = "a chunk size the model check reads"

[[env]]
name = "TINY_ALLOC"
value = "expandable_segments:True,max_split_size_mb:32"
why = "a value with commas and colons: quoted in the env file"
"""

MODEL_CHECK = """
import os, sys
import tiny_knn, tiny_render, torch
assert os.environ["TINY_CHUNK"] == "2000000", "the stack's variables are not set"
assert os.path.isfile(os.path.join(sys.argv[1], "pointcept", "utils", "spconv_algo.py")), \
    "the model check did not get the patched checkout"
assert tiny_render.uses_knn() == "knn"
if not torch.cuda.is_available():
    print("skipped: no GPU (torch.cuda.is_available() is False)")
    sys.exit(77)
print("pass: tiny forward")
"""


def make_project(tmp: Path, combo_row: str) -> Project:
    proj = tmp / "proj"
    (proj / "envs").mkdir(parents=True)
    shutil.copy(REPO / "envs" / "accels.toml", proj / "envs")
    (proj / "envs" / "combos.toml").write_text(combo_row)
    shutil.copytree(REPO / "patches", proj / "patches")
    (proj / "stacks").mkdir()
    (proj / "stacks" / "tiny.toml").write_text(STACK)
    (proj / "smoke" / "stack_models").mkdir(parents=True)
    (proj / "smoke" / "stack_models" / "tiny.py").write_text(MODEL_CHECK)
    knn = pure_python_project(tmp / "src" / "knn", "tiny-knn", 'def knn():\n    return "knn"\n')
    render = pure_python_project(tmp / "src" / "render", "tiny-render",
                     "import tiny_knn\ndef uses_knn():\n    return tiny_knn.knn()\n")
    # a recipe of another stack that this checkout requires (Pointcept's torch-geometric):
    # the installer takes it from the index, so it does not hold the requirements back
    extra = pure_python_project(tmp / "src" / "extra", "tiny-extra", "")
    broken = pure_python_project(tmp / "src" / "broken", "tiny-broken", "")
    (broken / "setup.py").write_text("raise SystemExit('this package does not build here')\n")
    (proj / "recipes").mkdir()
    for name, src, deps in (("tiny-knn", knn, []), ("tiny-render", render, ["tiny-knn"]),
                            ("tiny-broken", broken, []), ("tiny-extra", extra, [])):
        (proj / "recipes" / f"{name}.toml").write_text(
            f'name = "{name}"\nkind = "setuptools"\ndepends = {deps!r}\n'
            f'modules = ["{name.replace("-", "_")}"]\n[source]\npath = "{src}"\n'.replace("'", '"'))
    links = tmp / "links"    # what the user carried: setup's --find-links DIR --no-index
    for name, requires in (("tiny-extra", "torch"), ("tiny-old-torch", "torch==2.13.0")):
        _tiny_wheel(links, name, requires)
    return Project(proj)


def _tiny_wheel(links: Path, name: str, requires: str) -> None:
    import base64
    import hashlib
    import zipfile
    mod, info = name.replace("-", "_"), f"{name.replace('-', '_')}-1.0.dist-info"
    files = {f"{mod}.py": b"", f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\n"
             f"Version: 1.0\nRequires-Dist: {requires}\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{k},sha256={base64.urlsafe_b64encode(hashlib.sha256(v).digest()).rstrip(b'=').decode()},"
              f"{len(v)}" for k, v in files.items()]
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    links.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(links / f"{mod}-1.0-py3-none-any.whl", "w") as zf:
        for k, v in files.items():
            zf.writestr(k, v)


def prebuild(project: Project, name: str, python: Path) -> None:
    """Put ``name``'s wheel into the combo's wheelhouse, as an earlier `cuforge build` would."""
    combo = select_combo(project, name="tiny-combo")
    combo = replace(combo, torch="2.14.1")
    dist = project.root.parent / "dist"
    subprocess.run([str(python), "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
                    "-w", str(dist), str(project.root.parent / "src" / "knn")], check=True)
    wheel = next(dist.glob("tiny_knn-*.whl"))
    Wheelhouse(wheel_dir(project, combo)).publish(
        wheel, Entry(package=name, status="compiled", version="0.1", wheel=wheel.name,
                     wheel_sha256=sha256_of(wheel), torch="2.14.1", python="3.11"))


def setup(project: Project, checkout: Path, venv: Path, *extra: str
          ) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "COLUMNS": "100"}
    env.pop("CUFORGE_ROOT", None)
    env.pop("CUFORGE_STATE", None)
    env.pop("CUFORGE_WHEELHOUSE", None)
    return subprocess.run([sys.executable, "-m", "cuforge", "--root", str(project.root), "setup",
                           "tiny", "--checkout", str(checkout), "--venv", str(venv), "--combo",
                           "tiny-combo", "--find-links", str(project.root.parent / "links"),
                           "--no-index", *extra], capture_output=True, text=True, env=env,
                          cwd=project.root.parent)


def activated(venv: Path, code: str) -> str:
    """Run ``code`` in a real bash that sources the venv's activate script."""
    out = subprocess.run(["bash", "-c", f'. "{venv}/bin/activate" && python -c "$0"', code],
                         capture_output=True, text=True, env={"PATH": "/usr/bin:/bin",
                                                              "HOME": os.environ["HOME"]})
    assert out.returncode == 0, out.stderr
    return out.stdout


def check_result(project: Project, checkout: Path, venv: Path) -> None:
    assert (checkout / ADDED).is_file()
    env_file = (venv / "cuforge-tiny.env").read_text()
    assert "# a chunk size the model check reads\nexport TINY_CHUNK=2000000\n" in env_file
    assert "export TINY_ALLOC=expandable_segments:True,max_split_size_mb:32" in env_file
    # torch's version from its metadata: importing it costs ~3-20 s per process
    printed = activated(venv, "import os, sys, tiny_render; from importlib.metadata import "
                              "version; print(os.environ['TINY_CHUNK'], os.environ['TINY_ALLOC'], "
                              "tiny_render.uses_knn(), version('torch').split('+')[0], "
                              "sys.prefix)")
    chunk, alloc, knn, torch_version, prefix = printed.split()
    assert (chunk, knn, torch_version) == ("2000000", "knn", "2.14.1")
    assert alloc == "expandable_segments:True,max_split_size_mb:32"
    assert Path(prefix) == venv
    assert (venv / "bin" / "activate").read_text().count("# >>> cuforge setup tiny >>>") == 1
    # the checkout's requirements: the one that can be had is in, torch stayed (above)
    activated(venv, "import tiny_extra")


def check_requirements_reported(stderr: str) -> None:
    said = " ".join(stderr.split())
    assert "not installed: tiny-old-torch (from README.md:2 `pip install tiny-old-torch`): it " \
           "needs another torch than the one held (torch==2.14.1" in said, said
    assert "not installed: open3d==0.19.0 (from README.md:3" in said
    assert "not installed (see above): tiny-old-torch, open3d==0.19.0" in said


def test_setup_with_the_combo_interpreter_builds_what_is_missing(tmp_path: Path) -> None:
    """Combo with its own interpreter (the GPU machine's shape): torch comes through a .pth;
    tiny-render is missing from the wheelhouse, so the pipeline builds it first (and rebuilds
    tiny-knn, whose entry predates plan keys); a second run finds everything up to date."""
    python = torch_python()
    project = make_project(tmp_path, f'[[combo]]\npython = "3.11"\naccel = "cu130"\n'
                                     f'torch = "2.14.1"\nname = "tiny-combo"\n'
                                     f'interpreter = "{python}"\n')
    prebuild(project, "tiny-knn", python)
    checkout, venv = tmp_path / "Pointcept", tmp_path / "venv"
    shutil.copytree(FIXTURE, checkout)

    dry = setup(project, checkout, venv, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    plan = " ".join(dry.stdout.split())   # the plan is the output, on stdout (issue 43)
    assert "missing now: tiny-broken, tiny-render" in plan or \
           "missing now: tiny-render, tiny-broken" in plan, plan
    assert not venv.exists()
    assert not (checkout / ADDED).exists()

    first = setup(project, checkout, venv)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "wheels: building what is missing or out of date" in first.stderr
    assert "left out: tiny-broken (optional:" in first.stderr     # failed, reported, not fatal
    # the build shows its verification: one line of verdicts for the package it built
    assert "tiny-render: abi pass · symbols pass · cudart pass · fatbin pass · glibc pass (" \
           in first.stderr and " · import pass · smoke skipped (" in first.stderr, first.stderr
    assert "model stage (tiny): import pass · checkout model skipped (no GPU" in first.stderr \
        or "checkout model pass" in first.stderr
    # the summary says where the time went, the checks counted inside the wheels' time
    assert "where the time went:" in first.stderr and "model stage" in first.stderr, first.stderr
    # the venv and the checkout's requirements went in beside the build (issue 44), then the
    # wheels: the requirements put in first still hold, so they are not installed again
    went = next(ln for ln in first.stderr.splitlines() if ln.startswith("where the time went:"))
    assert re.search(r"venv [\d.]+ s \(beside the wheels\)", went), went
    assert re.search(r"requirements [\d.]+ s \(beside the wheels\)", went), went
    assert re.search(r", other [\d.]+ s$", went), went   # the parts add up to the wait
    # deciding (the stack read, the combo interpreter's torch asked) is a phase of its own
    assert re.match(r"where the time went: deciding [\d.]+ s, ", went), went
    assert "installing the checkout's requirements again" not in first.stderr
    # pip (torch through the interpreter's .pth) writes no bytecode, as uv does not: compiling
    # every module of a large requirement one by one was most of its install time
    assert sorted(venv.rglob("tiny_extra.py")) and not sorted(venv.rglob("tiny_extra*.pyc"))
    assert first.stderr.index("the checkout's requirements (3)") < \
        first.stderr.index("installed 2 wheels from"), first.stderr
    check_result(project, checkout, venv)
    check_requirements_reported(first.stderr)

    # idempotent: nothing to build, nothing to patch; --json: the text below goes to stderr
    # as without it, and stdout is one document (docs/json.md), the build's under "build"
    again = setup(project, checkout, venv, "--json")
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    assert doc["command"] == "setup" and doc["ok"] and doc["model_stage_ok"] is True, doc
    assert doc["dry_run"] is False and doc["activate"] == str(venv / "bin" / "activate")
    assert {p["result"] for p in doc["build"]["packages"]} <= {"up to date", "skipped"}, doc
    assert "tiny-old-torch" in doc["not_installed"] and "deciding" in doc["phases"]
    # the build step runs and finds every wheel up to date; the failed optional one is not retried
    assert "up to date" in again.stderr and "compiled " not in again.stderr, again.stderr
    assert "FAILED" not in again.stderr, again.stderr
    assert "venv reused" in again.stderr
    assert "left out: tiny-broken" in again.stderr
    assert "nothing changed" in again.stderr
    # each run ends with one line: how it ended, how long it took, what to source
    for run in (first, again):
        last = run.stderr.strip().splitlines()[-1]
        assert last.startswith("done in ") and last.endswith("/bin/activate"), last
    assert "failed" in first.stderr.split("wheels: building")[1]   # the build's summary counts
    check_result(project, checkout, venv)


def test_setup_installs_the_combos_torch_with_uv(tmp_path: Path) -> None:
    """A plain combo: uv puts torch 2.14.1 into the new venv (hard-linked from uv's cache)."""
    project = make_project(tmp_path, '[[combo]]\npython = "3.11"\naccel = "cu130"\n'
                                     'torch = "2.14.1"\nname = "tiny-combo"\n')
    prebuild(project, "tiny-knn", torch_python())
    combo = select_combo(project, name="tiny-combo")
    render_src = tmp_path / "src" / "render"
    dist = tmp_path / "dist2"
    subprocess.run([str(torch_python()), "-m", "pip", "wheel", "-q", "--no-build-isolation",
                    "--no-deps", "-w", str(dist), str(render_src)], check=True)
    wheel = next(dist.glob("tiny_render-*.whl"))
    Wheelhouse(wheel_dir(project, combo)).publish(
        wheel, Entry(package="tiny-render", status="compiled", wheel=wheel.name,
                     wheel_sha256=sha256_of(wheel), torch="2.14.1", python="3.11"))
    Wheelhouse(wheel_dir(project, combo)).publish(   # an optional package that failed before
        None, Entry(package="tiny-broken", status="FAILED", reason="does not build here"))
    checkout, venv = tmp_path / "Pointcept", tmp_path / "venv"
    shutil.copytree(FIXTURE, checkout)
    out = setup(project, checkout, venv, "--no-build")   # the wheelhouse has what is needed
    assert out.returncode == 0, out.stdout + out.stderr
    assert "wheels: building" not in out.stderr
    assert "beside the wheels" not in out.stderr     # nothing to build: one step after another
    assert "venv created" in out.stderr and "(torch 2.14.1)" in out.stderr
    check_result(project, checkout, venv)
    check_requirements_reported(out.stderr)
