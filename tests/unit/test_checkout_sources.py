"""The user's checkout as a source (cuforge.config.checkout): which recipes it replaces (those
whose source is a folder of the stack's repository that the checkout has), and what that does
to the build plan: a copy of the checkout's folder is fetched (no clone of the pin), its
content is in the key, and ``--pinned`` (no checkout) gives the plan of the recipes as they are.
Pure planning: nothing is fetched or built."""

from __future__ import annotations

import doctest
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_buildplan import _setup

import cuforge.config.checkout
from cuforge.config.checkout import UserCheckout, checkout_sources, repo_id, with_checkout
from cuforge.config.recipes import Recipe, Source, build_order, load_recipes
from cuforge.pipeline.request import BuildRequest
from cuforge.config.stacks import load_stack
from cuforge.core.errors import PatchError
from cuforge.core.project import Project, find_project
from cuforge.pipeline import actions
from cuforge.pipeline.plan import Action, ActionKind, make_plan

ROOT = Path(__file__).resolve().parents[2]
MILO = ROOT / "tests" / "fixtures" / "upstream" / "milo"


def test_the_examples_hold():
    result = doctest.testmod(cuforge.config.checkout)
    assert result.attempted > 0 and result.failed == 0


def test_repo_urls_compare_as_repositories():
    assert repo_id("https://github.com/Pointcept/Pointcept") == repo_id(
        "https://github.com/Pointcept/Pointcept.git/")
    assert repo_id("ssh://git@github.com/Anttwo/MILo.git") == repo_id(
        "https://github.com/Anttwo/MILo")
    assert repo_id("https://github.com/Anttwo/MILo") != repo_id("https://github.com/Anttwo/MILo2")


def test_the_milo_checkout_replaces_exactly_the_folders_it_has(tmp_path):
    """The real recipes and stack: MILo's folders come from the checkout, nvdiffrast (another
    repository) and cuforge's own CMake project stay, a folder the checkout lacks stays pinned,
    and --src wins over the checkout."""
    project = find_project(ROOT)
    checkout = tmp_path / "MILo"
    shutil.copytree(MILO, checkout)
    shutil.rmtree(checkout / "submodules" / "diff-gaussian-rasterization_ms")
    mine = UserCheckout(load_stack(project, "milo").repo, checkout)
    recipes = load_recipes(project)
    order = build_order(recipes, ["simple-knn", "diff-gaussian-rasterization_ms", "nvdiffrast",
                                  "tetra-triangulation", "fused-ssim"])

    found = {s.label: s.path for s in checkout_sources(order, mine)}
    assert found == {"simple-knn": checkout / "submodules" / "simple-knn",
                     "diff-gaussian-rasterization_ms": None,
                     "tetra-triangulation (TETRA_SOURCE_DIR)":
                         checkout / "submodules" / "tetra_triangulation",
                     "fused-ssim": checkout / "submodules" / "fused-ssim"}

    got = {r.name: r for r in with_checkout(order, mine, keep=["fused-ssim"])}
    assert got["simple-knn"].source.path == str(checkout / "submodules" / "simple-knn")
    assert got["simple-knn"].source.checkout == "submodules/simple-knn"
    assert got["simple-knn"].patches == recipes["simple-knn"].patches   # still patched
    assert got["diff-gaussian-rasterization_ms"].source == \
        recipes["diff-gaussian-rasterization_ms"].source                 # the pin: lacking
    assert got["nvdiffrast"] == recipes["nvdiffrast"]                    # not MILo's code
    assert got["fused-ssim"] == recipes["fused-ssim"]                    # --src decides
    tetra = got["tetra-triangulation"]
    assert tetra.source == recipes["tetra-triangulation"].source         # native/, ours
    assert dict(tetra.extra_sources)["TETRA_SOURCE_DIR"].path == \
        str(checkout / "submodules" / "tetra_triangulation")
    assert with_checkout(order, None) == order                           # --pinned


def _checkout_plan(tmp_path: Path):
    """test_buildplan's project with b's source a folder (sub/b) of a repository, and a
    checkout of that repository holding the folder."""
    project, combo, combo_env = _setup(tmp_path)
    (project.root / "recipes" / "b.toml").write_text(
        'depends = ["a"]\npatches = ["p"]\n[source]\ngit = "https://example.org/up/Repo.git"\n'
        'commit = "' + "3" * 40 + '"\nsubdir = "sub/b"\n')
    checkout = tmp_path / "Repo"
    (checkout / "sub" / "b").mkdir(parents=True)
    (checkout / "sub" / "b" / "k.cu").write_text("// b, the user's\n")
    mine = UserCheckout("https://example.org/up/Repo", checkout)

    def plan(source: UserCheckout | None):
        req = BuildRequest(combo=combo, jobs=2, packages=("b",), checkout=source)
        order = with_checkout(build_order(load_recipes(project), ["b"]), source)
        return make_plan(project, req, combo_env, order, log_dir=tmp_path / "logs").package("b")
    return plan, mine, checkout


def test_a_checkout_package_is_copied_from_the_checkout_and_keyed_by_its_content(tmp_path):
    plan, mine, checkout = _checkout_plan(tmp_path)
    before = plan(mine)
    fetch = next(a for a in before.actions if a.kind is ActionKind.FETCH)
    assert str(checkout / "sub" / "b") in fetch.what and "example.org" not in fetch.what
    assert before.src == before.work / "src"                  # the copy, not the user's tree
    assert any(a.kind is ActionKind.PATCH and a.path == before.src for a in before.actions)

    assert plan(mine).key == before.key                        # nothing changed: up to date
    (checkout / "sub" / "b" / "k.cu").write_text("// b, edited by the user\n")
    edited = plan(mine)
    assert edited.key != before.key                            # the edit rebuilds
    assert edited.source_key == before.source_key              # same tree: the build resumes


def test_pinned_is_the_plan_of_the_recipe_as_it_is(tmp_path):
    plan, mine, _ = _checkout_plan(tmp_path)
    pinned, mine_plan = plan(None), plan(mine)
    fetch = next(a for a in pinned.actions if a.kind is ActionKind.FETCH)
    assert "https://example.org/up/Repo.git@" + "3" * 40 + ":sub/b" in fetch.what
    assert pinned.src == pinned.work / "src" / "sub" / "b"
    assert pinned.key != mine_plan.key


def test_a_build_whose_patch_does_not_apply_to_the_checkouts_copy_names_pinned(tmp_path):
    """The build's own patch step (an optional package setup did not refuse): the engine's
    drift message, with the package's folder of the checkout and --pinned as the fix; a
    pinned source keeps the engine's own words."""
    (tmp_path / "patches" / "b").mkdir(parents=True)
    (tmp_path / "patches" / "b" / "patch.toml").write_text(
        '[set]\nname = "b"\n[[patch]]\nid = "guard"\nkind = "replace_text"\nfile = "k.cu"\n'
        'find = "upstream line"\nreplace = "upstream line // cuforge: fixed"\nwhy = "a fixture"\n')
    tree = tmp_path / "work" / "src"
    tree.mkdir(parents=True)
    (tree / "k.cu").write_text("the user's own line\n")
    handlers = SimpleNamespace(project=Project(tmp_path))
    action = Action(ActionKind.PATCH, "apply patch set patches/b", arg="b", path=tree)

    def patch(source: Source) -> str:
        pkg = SimpleNamespace(name="b", recipe=Recipe("b", "setuptools", source))
        with pytest.raises(PatchError) as err:
            actions.do(handlers, pkg, action, tmp_path / "log")
        return str(err.value)

    mine = patch(Source(path=str(tmp_path / "Repo" / "sub" / "b"), checkout="sub/b"))
    assert mine.startswith("b from your checkout (sub/b): patch set 'b' does not match")
    assert "k.cu [guard]" in mine and "`cuforge setup STACK --pinned ...`" in mine
    pinned = patch(Source(git="https://example.org/up/Repo.git", commit="3" * 40))
    assert "k.cu [guard]" in pinned and "--pinned" not in pinned
    assert (tree / "k.cu").read_text() == "the user's own line\n"
