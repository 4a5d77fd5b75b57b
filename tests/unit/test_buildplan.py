"""The build plan as data (cuforge.pipeline.plan): keys, the source key that decides resume, job shares.
Pure planning: nothing is fetched or built."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from cuforge.config.combos import select_combo, with_overrides
from cuforge.pipeline.cache_config import decide
from cuforge.pipeline.request import BuildRequest
from cuforge.pipeline.plan import job_shares, make_plan
from cuforge.env.target import resolve
from cuforge.core.project import Project, find_project
from cuforge.config.recipes import load_recipes, build_order
from cuforge.env.toolchain import Toolkit
from cuforge.env.torchinfo import TorchInfo
from cuforge.env.venv import ComboEnv

ROOT = Path(__file__).resolve().parents[2]
LOGS = Path("/nonexistent/logs")   # planning writes nothing there


def _setup(tmp_path: Path, arches: str = "12.0;12.1+PTX"):
    proj = tmp_path / "proj"
    shutil.copytree(ROOT / "envs", proj / "envs")
    (proj / "recipes").mkdir()
    (proj / "src" / "a").mkdir(parents=True)
    (proj / "src" / "a" / "k.cu").write_text("// a\n")
    (proj / "src" / "a" / "build").mkdir()                   # build outputs: not content
    (proj / "src" / "b").mkdir()
    (proj / "src" / "b" / "k.cu").write_text("// b\n")
    (proj / "recipes" / "a.toml").write_text('[source]\npath = "src/a"\n')
    (proj / "recipes" / "b.toml").write_text(
        'depends = ["a"]\npatches = ["p"]\n[source]\npath = "src/b"\n'
        '[extra_sources.UP]\ngit = "file:///x"\ncommit = "' + "1" * 40 + '"\n')
    (proj / "patches" / "p").mkdir(parents=True)
    (proj / "patches" / "p" / "patch.toml").write_text("# v1\n")
    combo = with_overrides(select_combo(find_project(ROOT), name="3.11-cu130"), arches=arches)
    info = TorchInfo(python=Path("/x/bin/python"), py_version="3.11", site_packages=Path("/x"),
                     machine="x86_64", torch="2.14.1", cuda="13.0")
    combo_env = ComboEnv(combo, info, Toolkit(Path("/x/cuda"), combo.accel.cuda), None, True,
                   resolve(find_project(ROOT), combo))
    return Project(proj), combo, combo_env


def _plan(project, combo, combo_env, jobs=2):
    # the cache as the CLI decides it (envs/cache.toml, $CUFORGE_CACHE, $CUFORGE_BUILD_DIR)
    req = BuildRequest(combo=combo, jobs=jobs, packages=("b",),
                       cache=decide(project.envs_dir, combo_spec=combo.cache))
    return make_plan(project, req, combo_env, build_order(load_recipes(project), ["b"]),
                     log_dir=LOGS)


def test_plan_is_deterministic_and_jobs_are_not_an_input(tmp_path):
    project, combo, combo_env = _setup(tmp_path)
    one = _plan(project, combo, combo_env)
    assert [p.name for p in one.packages] == ["a", "b"]
    assert one == _plan(project, combo, combo_env)
    four = _plan(project, combo, combo_env, jobs=4)
    assert [p.key for p in four.packages] == [p.key for p in one.packages]
    assert dict(four.package("a").env)["MAX_JOBS"] == "4"


def test_each_input_moves_exactly_the_keys_it_touches(tmp_path):
    project, combo, combo_env = _setup(tmp_path)
    before = {p.name: p for p in _plan(project, combo, combo_env).packages}

    (project.root / "src" / "a" / "build" / "x.o").write_text("an object")
    same = {p.name: p.key for p in _plan(project, combo, combo_env).packages}
    assert same == {n: p.key for n, p in before.items()}     # build outputs are not content

    (project.root / "patches" / "p" / "patch.toml").write_text("# v2\n")
    after = {p.name: p for p in _plan(project, combo, combo_env).packages}
    assert after["a"].key == before["a"].key
    assert after["b"].key != before["b"].key
    assert after["b"].source_key != before["b"].source_key   # new patches: a fresh tree

    (project.root / "src" / "a" / "k.cu").write_text("// a, edited\n")
    edited = {p.name: p for p in _plan(project, combo, combo_env).packages}
    assert edited["a"].key != after["a"].key                  # content, not the path
    assert edited["a"].source_key == after["a"].source_key    # same tree: the build resumes
    assert edited["b"].key != after["b"].key                  # b is built against a


def test_an_extra_source_moves_the_source_key(tmp_path):
    project, combo, combo_env = _setup(tmp_path)
    recipe = project.root / "recipes" / "b.toml"
    before = _plan(project, combo, combo_env).package("b")
    recipe.write_text(recipe.read_text().replace("1" * 40, "2" * 40))
    after = _plan(project, combo, combo_env).package("b")
    assert after.source_key != before.source_key and after.key != before.key


def test_arches_are_an_input(tmp_path):
    project, combo, combo_env = _setup(tmp_path)
    before = _plan(project, combo, combo_env).package("a")
    other = replace(combo_env, combo=with_overrides(combo, arches="12.0"))
    after = _plan(project, other.combo, other).package("a")
    assert after.key != before.key and after.source_key == before.source_key


def test_dry_run_commands_are_the_plan_commands(tmp_path):
    project, combo, combo_env = _setup(tmp_path)
    pkg = _plan(project, combo, combo_env).package("a")
    (cmd,) = pkg.commands()
    assert cmd.argv[-1] == str(pkg.src) and "cuforge.pipeline.builders.pep517" in cmd.argv
    assert dict(cmd.env)["TORCH_CUDA_ARCH_LIST"] == "12.0;12.1+PTX"


def test_job_shares_split_a_level_and_never_exceed_the_budget():
    from cuforge.config.recipes import Recipe, Source
    r = lambda n, *d: Recipe(n, "setuptools", Source(path="x"), depends=d)  # noqa: E731
    milo = [r(f"m{i}") for i in range(6)]
    # 16 jobs: four packages at a time with four jobs each (one job each starved pointops)
    assert job_shares(milo, 16) == {f"m{i}": 4 for i in range(6)}
    assert job_shares(milo[:3], 16) == {"m0": 6, "m1": 5, "m2": 5}   # fewer packages: all jobs
    assert job_shares(milo, 2) == {f"m{i}": 2 for i in range(6)}     # too few to split
    chain = [r("pccm"), r("cumm", "pccm"), r("spconv", "cumm")]
    assert job_shares(chain, 8) == {"pccm": 8, "cumm": 8, "spconv": 8}


def test_a_prebuilt_package_gets_its_dependencies_before_verification(tmp_path):
    """pccm's import needs ccimport: a prebuilt recipe's `depends` are installed into the env
    before its wheel is verified, as a compiled recipe's are before its build."""
    project, combo, combo_env = _setup(tmp_path)
    (project.root / "recipes" / "c.toml").write_text(
        'kind = "prebuilt"\ndepends = ["a"]\n[prebuilt]\nrequirements = ["c==1.0"]\n'
        'sha256 = ["' + "0" * 64 + '"]\n')
    req = BuildRequest(combo=combo, jobs=2, packages=("c",))
    c = make_plan(project, req, combo_env, build_order(load_recipes(project), ["c"]),
                  log_dir=LOGS).package("c")
    kinds = [a.kind for a in c.actions]
    assert "deps" in kinds and kinds.index("deps") < kinds.index("verify")


def test_a_shared_build_dir_moves_work_dirs_out_of_the_clone(tmp_path, monkeypatch):
    project, combo, combo_env = _setup(tmp_path)
    monkeypatch.setenv("CUFORGE_BUILD_DIR", str(tmp_path / "shared"))
    b = _plan(project, combo, combo_env).package("b")
    assert b.work == tmp_path / "shared" / combo.env_id / "b"
    assert b.src == b.work / "src"


def test_a_work_dir_takes_one_build_at_a_time(tmp_path):
    """Two runs (or two clones sharing a build_dir) wait for each other's work dir."""
    import threading

    from cuforge.pipeline.executor import work_lock
    said, order = [], []
    work = tmp_path / "w" / "pkg"
    with work_lock(work, said.append):
        other = threading.Thread(target=lambda: _enter(work, said, order))
        other.start()
        other.join(timeout=1.0)
        assert other.is_alive() and order == []            # blocked while we hold it
        order.append("first")
    other.join(timeout=10)
    assert order == ["first", "second"]
    assert said == [f"waiting for another build in {work} (or for the compilers of a killed "
                    "one to end)"]


def _enter(work, said, order):
    from cuforge.pipeline.executor import work_lock
    with work_lock(work, said.append):
        order.append("second")


def test_packages_built_together_share_compile_slots_and_keep_their_keys(tmp_path):
    project, combo, combo_env = _setup(tmp_path)
    pooled = _plan(project, combo, combo_env, jobs=8)
    req = BuildRequest(combo=combo, jobs=8, packages=("b",), one_at_a_time=True)
    serial = make_plan(project, req, combo_env, build_order(load_recipes(project), ["b"]),
                       log_dir=LOGS)
    assert pooled.pooled and not serial.pooled
    # each may start the whole budget of compilers: the slots, not shares, hold the budget
    assert [p.jobs for p in pooled.packages] == [8, 8]
    assert [p.key for p in pooled.packages] == [p.key for p in serial.packages]
    slot = project.state_dir / "slots" / "take-slot"
    assert not slot.exists()   # a plan names its scripts; the build writes them (slots.pool)
    (build,) = [a.step for a in pooled.package("a").actions
                if a.step and "cuforge.pipeline.builders.pep517" in a.step.argv]
    step_env = dict(build.env)
    assert step_env["PYTORCH_NVCC"].startswith(f"{slot} ")
    assert dict(build.scripts)[Path(step_env["CXX"])].count(f"exec {slot} ") == 1
    (alone,) = [a.step for a in serial.package("a").actions
                if a.step and "cuforge.pipeline.builders.pep517" in a.step.argv]
    assert str(slot) not in dict(alone.env).get("PYTORCH_NVCC", "")


def _memory_hungry(tmp_path, arches: str):
    """The fixture project with package a's one device compilation at ~7 GB (flash-attn's)."""
    project, combo, combo_env = _setup(tmp_path, arches=arches)
    recipe = project.recipes_dir / "a.toml"
    recipe.write_text("compile_memory_gb = 7\n" + recipe.read_text())
    return project, combo, combo_env


def _plan_alone(project, combo, combo_env, jobs: int):
    """Package a alone, planned with ``jobs``."""
    return make_plan(project, BuildRequest(combo=combo, jobs=jobs, packages=("a",)), combo_env,
                     build_order(load_recipes(project), ["a"]), log_dir=LOGS).package("a")


def test_a_memory_hungry_package_gets_the_jobs_that_fit(tmp_path, monkeypatch):
    """flash-attn's cicc peaks at ~7 GB: 16 jobs on a 30 GB box would need 112 GB."""
    import cuforge.pipeline.plan as plan_module
    project, combo, combo_env = _memory_hungry(tmp_path, "12.0")
    monkeypatch.setattr(plan_module, "mem_available", lambda: 30 * 2**30)
    alone = _plan_alone(project, combo, combo_env, 16)
    assert alone.jobs == 4 and dict(alone.env)["MAX_JOBS"] == "4"
    assert "4 of 16 jobs" in alone.jobs_note and "7 GB" in alone.jobs_note
    from cuforge.pipeline.dryrun import package_lines
    assert f"# {alone.jobs_note}" in package_lines(project, alone)
    # beside b, whose compilers may hold the rest of the budget at 2.5 GB each: what is left
    both = _plan(project, combo, combo_env, jobs=8)
    assert both.package("a").jobs == 2 and both.package("b").jobs == 8
    assert "other packages' compilers" in both.package("a").jobs_note
    # the key does not see the jobs
    monkeypatch.setattr(plan_module, "mem_available", lambda: 512 * 2**30)
    roomy = _plan(project, combo, combo_env, jobs=8)
    assert roomy.package("a").jobs == 8 and not roomy.package("a").jobs_note
    assert [p.key for p in roomy.packages] == [p.key for p in both.packages]


def test_jobs_that_memory_takes_away_leave_their_cores_to_the_arches_of_the_one_left(
        tmp_path, monkeypatch):
    """flash-attn for 12.1+PTX;12.0 on 2 cores and 23 GB: two jobs of two arches at once would
    hold 28 GB, but one job with `-t 2` (14 GB) keeps both cores busy, not one cicc at a time."""
    import cuforge.pipeline.plan as plan_module
    project, combo, combo_env = _memory_hungry(tmp_path, "12.0;12.1+PTX")
    monkeypatch.setattr(plan_module, "mem_available", lambda: 23 * 2**30)
    pkg = _plan_alone(project, combo, combo_env, 2)
    step_env = dict(pkg.env)
    assert pkg.jobs == 1 and step_env["MAX_JOBS"] == "1"
    assert step_env["NVCC_APPEND_FLAGS"].split()[:2] == ["-t", "2"]
    assert "1 of 2 jobs (nvcc -t 2: 2 arches at once)" in pkg.jobs_note
    monkeypatch.setattr(plan_module, "mem_available", lambda: 512 * 2**30)
    roomy = _plan_alone(project, combo, combo_env, 2)
    assert dict(roomy.env)["NVCC_APPEND_FLAGS"].split()[:2] == ["-t", "2"] and roomy.jobs == 2
