"""fused-ssim built end to end through the real recipe (slow, ~1-2 min on 2 cores).

MILo's vendored fused-ssim has a plain setup.py without arch flags of its own, so the recipe
applies no patch and torch's -gencode list from TORCH_CUDA_ARCH_LIST must be all the wheel
carries. The recipe is used as it is, with only its git URL and commit pointed at a local
repository made from the MILo-shaped fixture tree (tests/fixtures/upstream/milo); the fatbin of
the built extension is then read independently of cuforge's own check."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from gitrepo import git

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "upstream" / "milo"
RECIPE = ROOT / "recipes" / "fused-ssim.toml"
COMBO_DIR = Path("linux-x86_64") / "cu130" / "torch2.14.1-cp311"
STATE = ROOT / ".cuforge"
REQUEST = "12.0;12.1+PTX"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("git") is None, reason="no git on PATH for the fixture repo"),
]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fused-ssim")
    repo = tmp / "MILo"
    shutil.copytree(FIXTURE, repo, ignore=shutil.ignore_patterns("__pycache__"))
    git(repo, "init", "--quiet", "--initial-branch=main")
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", "fixture: MILo-shaped tree")
    commit, url = git(repo, "rev-parse", "HEAD"), repo.as_uri()

    text = RECIPE.read_text()
    upstream = tomllib.loads(text)["source"]
    assert "patches" not in tomllib.loads(text), "MILo's fused-ssim needs no patch"
    text = text.replace(f'"{upstream["git"]}"', f'"{url}"').replace(
        f'"{upstream["commit"]}"', f'"{commit}"')
    assert tomllib.loads(text)["source"] == {**upstream, "git": url, "commit": commit}
    proj = tmp / "proj"
    for name in ("envs", "smoke"):
        shutil.copytree(ROOT / name, proj / name, ignore=shutil.ignore_patterns("__pycache__"))
    (proj / "recipes").mkdir()
    (proj / "recipes" / RECIPE.name).write_text(text)

    wh = tmp / "wheelhouse"
    env = {**os.environ, "CUFORGE_ROOT": str(proj), "CUFORGE_STATE": str(STATE),
           "CUFORGE_WHEELHOUSE": str(wh), "COLUMNS": "200"}
    out = subprocess.run([sys.executable, "-m", "cuforge", "build", "--combo", "3.11-cu130",
                          "--only", "fused-ssim", "--cuda-arch", REQUEST, "--jobs", "2"],
                         env=env, capture_output=True, check=False, text=True)
    yield {"out": out, "wh": wh / COMBO_DIR}
    from cuforge.pipeline.sources import _mirror_path
    mirror = _mirror_path(STATE / "cache" / "git", url)
    shutil.rmtree(mirror, ignore_errors=True)
    Path(f"{mirror}.lock").unlink(missing_ok=True)


def _entry(built) -> dict:
    out = built["out"]
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-6000:])
    [line] = (built["wh"] / "manifest.jsonl").read_text().splitlines()
    return json.loads(line)


def test_compiled_for_exactly_the_requested_arches(built):
    entry = _entry(built)
    assert entry["status"] == "compiled" and entry["package"] == "fused-ssim"
    assert entry["source"].endswith(":submodules/fused-ssim")
    assert entry["arches_requested"] == REQUEST
    assert entry["arches_embedded"] == {"sass": ["120", "121"], "ptx": ["121"]}
    checks = entry["checks"]
    assert checks["fatbin"]["status"] == "pass", checks["fatbin"]
    assert checks["import"]["status"] == "pass" and "fused_ssim_cuda" in checks["import"]["detail"]


def test_fatbin_read_from_the_wheel_has_no_other_arch(built, tmp_path):
    """The .so read straight from the wheel file, outside the pipeline."""
    wheel = built["wh"] / _entry(built)["wheel"]
    with zipfile.ZipFile(wheel) as zf:
        [so] = [n for n in zf.namelist() if n.startswith("fused_ssim_cuda") and n.endswith(".so")]
        zf.extract(so, tmp_path)
    from cuforge.verify.fatbin import read_fatbin
    groups = [g for g in read_fatbin(tmp_path / so) if not g.is_link_stub]
    assert groups
    sass = {a.number for g in groups for a in g.sass}
    ptx = {a.number for g in groups for a in g.ptx}
    assert (sass, ptx) == ({"120", "121"}, {"121"})
