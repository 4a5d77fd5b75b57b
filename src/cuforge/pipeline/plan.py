"""The build plan as data: (combo env, recipes, request) -> per package, the ordered actions
with their exact commands and environment, the named inputs, and one key over them.

``--dry-run`` prints a plan, the executor (``pipeline.executor``) runs the same plan, and the
up-to-date and resume decisions compare its keys: there is no second code path that
re-derives a step.
Nothing here creates, fetches or builds anything.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import cache
from pathlib import Path


from cuforge.env import builddeps
from cuforge.pipeline import compiler_cache, slots
from cuforge.config.arches import ArchList, ArchPolicy, check_supported
from cuforge.pipeline.builders import BuildJob, KindModule, cmake_seed, kind_module
from cuforge.pipeline.builders.reproducible import path_maps
from cuforge.pipeline.compiler_cache import ActiveCache
from cuforge.config.combos import Combo
from cuforge.core.console import make_console
from cuforge.core.errors import ConfigError
from cuforge.pipeline.keys import package_keys
from cuforge.core.project import Project
from cuforge.config.recipes import BuildKind, Recipe, Source
from cuforge.pipeline.request import BuildRequest
from cuforge.core.runner import Step
from cuforge.env.toolchain import build_environment, jobs_within_memory, mem_available
from cuforge.env.venv import ComboEnv
from cuforge.verify.checklist import CHECKS, PREBUILT_MUST_PASS

console = make_console(stderr=True)


class ActionKind(StrEnum):
    """What an action does; the executor has one handler per kind (``actions.HANDLERS``)."""

    CHECK = "check"            # the system headers the recipe names are there
    GUARD = "guard"            # the build interpreter does not import an installed copy
    FETCH = "fetch"            # the source (or an extra source: ``arg``) into ``path``
    PATCH = "patch"            # patch set ``arg`` onto ``path``
    CLEAN = "clean"            # ``path`` emptied
    RUN = "run"                # ``step``, exactly as shown
    DEPS = "deps"              # the dependencies' wheels into the package's overlay
    SEED = "seed"              # CMake's kept compiler detection into a fresh build dir
    REMEMBER = "remember"      # CMake's compiler detection kept for the next fresh build dir
    VERIFY = "verify"          # the wheel's checks (the executor's own stage, after the build)
    ACCEPT = "accept"          # a prebuilt wheel's checks (decide: keep it, or compile)


@dataclass(frozen=True)
class Action:
    """One step of a package build. ``run`` actions carry the exact command; the others are
    done in-process and described for people. A kind outside ``ActionKind`` cannot be built."""

    kind: ActionKind
    what: str                  # one line for people (dry run, progress)
    step: Step | None = None   # kind "run": the command, exactly as it will run
    arg: str = ""              # fetch: the extra source's variable; patch: the patch set
    path: Path | None = None   # fetch/patch/clean/deps: the tree or directory it acts on
    shares_env: bool = False   # changes the combo env (pip install): one at a time

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", ActionKind(self.kind))   # ValueError: no such kind


@dataclass(frozen=True)
class PackagePlan:
    recipe: Recipe
    archs: ArchList            # after the recipe's arch rule
    policy: ArchPolicy
    skip: str                  # non-empty: not built, and why
    work: Path
    src: Path                  # the tree the build command compiles, once fetched
    jobs: int                  # this package's share of the plan's jobs budget
    env: tuple[tuple[str, str], ...]
    prebuilt: tuple[Action, ...]   # tried first when non-empty: download + checks
    actions: tuple[Action, ...]    # the build from source
    inputs: tuple[tuple[str, str], ...]   # named digests the key is made of
    key: str                   # equal key: the wheel in the wheelhouse is this build's output
    source_key: str            # equal: the fetched tree and its build dir are kept (resume)
    cache: ActiveCache | None = None   # the compiler cache its compile runs under
    cache_off: str = ""                # why it has none (manifest note)
    # each cached build command and the same command without the cache: the build runs the
    # second ones again when sccache itself failed (a cache must never fail a build)
    uncached: tuple[tuple[Step, Step], ...] = ()
    jobs_note: str = ""                # why it has fewer jobs than its share (memory)
    kernels: str = ""                  # [kernels]: "full" or "lean: without ..." (manifest)

    @property
    def name(self) -> str:
        return self.recipe.name

    def commands(self) -> list[Step]:
        """Every command of the source build, in order (what --dry-run shows and a build runs)."""
        return [a.step for a in self.actions if a.step is not None]


@dataclass(frozen=True)
class Plan:
    combo: Combo
    jobs: int                  # the whole budget: running shares, or the compile slots, hold it
    wheel_dir: Path
    packages: tuple[PackagePlan, ...]
    # True: packages build side by side, each may start ``jobs`` compilers, and a pool of
    # ``jobs`` compile slots (slots.py) keeps the machine at the budget
    pooled: bool = False

    def package(self, name: str) -> PackagePlan:
        return next(p for p in self.packages if p.name == name)


def up_to_date(house, pkg: PackagePlan):
    """The wheelhouse entry that already is this package's output: same plan key (recipe,
    patches, source content, arches, policy, torch, commands, dependencies) and the wheel
    still there, unmodified. A wheel published before wheels carried their pins
    (``upstream_wheel`` unset, cuforge.publish.wheelmeta), or with a torch pin that lets in other CUDA
    builds of its torch, is built again. The build and its dry run both ask this."""
    from cuforge.publish.wheelmeta import loosely_pinned
    entry = house.latest().get(pkg.name)
    if (entry is None or not entry.status.has_wheel or not entry.wheel
            or entry.plan_key != pkg.key or not entry.upstream_wheel
            or loosely_pinned(entry.requires)):
        return None
    return entry if house.intact(entry) else None


def wheel_dir(project: Project, combo: Combo) -> Path:
    return combo.wheel_dir(project.wheelhouse)


def work_dir(project: Project, req: BuildRequest, combo: Combo, recipe: Recipe) -> Path:
    """Where ``recipe`` is fetched, patched and compiled: under the state dir, or under the
    build's shared ``build_dir`` (one path for every clone: see cache_config)."""
    shared = req.cache.build_dir
    root = Path(shared) if shared else project.state_dir / "work"
    return root / combo.env_id / recipe.name


def make_plan(project: Project, req: BuildRequest, combo_env: ComboEnv, order: list[Recipe], *,
              log_dir: Path) -> Plan:
    """The plan for ``order`` (dependencies first) in ``combo_env``; ``log_dir``: where the
    build's logs go (the executor's choice: sccache's error log goes beside them)."""
    combo = combo_env.combo
    slot_script = slots_launcher(project, order, req)
    pooled = slot_script is not None
    shares = ({r.name: req.jobs for r in order} if req.one_at_a_time or pooled
              else job_shares(order, req.jobs))
    memory = MemoryBudget(req.jobs, mem_available(),
                          alone=req.one_at_a_time or sum(r.kind.compiles for r in order) < 2)
    planned: dict[str, PackagePlan] = {}
    for recipe in order:
        planned[recipe.name] = _package_plan(project, req, combo_env, recipe, shares[recipe.name],
                                             planned, log_dir, slot_script, memory)
    return Plan(combo, req.jobs, wheel_dir(project, combo), tuple(planned.values()), pooled)


def slots_launcher(project: Project, order: list[Recipe], req: BuildRequest) -> Path | None:
    """The compile slots' launcher script (``slots.pool`` writes it), when two or more packages
    compile in one build (they may run side by side) and the platform has FIFOs; None for
    ``--one-at-a-time`` and single packages, which do without."""
    compiling = sum(r.kind.compiles for r in order)
    if req.one_at_a_time or compiling < 2:
        return None
    return slots.launcher_path(project.state_dir)


# The fewest jobs a compiling package gets. On the H200 (16 jobs, 17 packages at one depth) an
# even split gave each package one job: pointops took 436 s instead of 113 s, its 19 files in a
# row. Fewer packages at a time, each with a few jobs, keeps both the packages and their files busy.
MIN_SHARE = 4


def job_shares(order: list[Recipe], budget: int) -> dict[str, int]:
    """Each package's share of ``budget`` jobs: packages at the same depth of the dependency
    graph may compile side by side, at most ``budget // MIN_SHARE`` at a time, so a depth splits
    the budget that many ways (remainder to the first); a lone package gets all of it. The
    executor starts a package only when its share is free, so running shares never add up to
    more than the budget.

    >>> from cuforge.config.recipes import Recipe, Source
    >>> r = lambda n, *d: Recipe(n, "setuptools", Source(path="x"), depends=d)
    >>> job_shares([r("a"), r("b"), r("c", "a")], 9)
    {'a': 5, 'b': 4, 'c': 9}
    >>> job_shares([r("a"), r("b")], 2)
    {'a': 2, 'b': 2}
    """
    names = {r.name for r in order}
    depth: dict[str, int] = {}
    for r in order:
        depth[r.name] = 1 + max((depth[d] for d in r.depends if d in names), default=-1)
    shares: dict[str, int] = {}
    at_once = max(1, budget // min(MIN_SHARE, budget))
    for level in set(depth.values()):
        members = [r.name for r in order if depth[r.name] == level and r.kind.compiles]
        width = max(1, min(len(members), at_once))
        for i, name in enumerate(members):
            shares[name] = budget // width + (1 if i % width < budget % width else 0)
    for r in order:
        shares.setdefault(r.name, 1)   # downloads: no compiler
    return shares


@dataclass(frozen=True)
class MemoryBudget:
    """What a memory-hungry recipe's jobs must fit in (see toolchain.jobs_within_memory)."""

    budget: int                # the plan's jobs
    avail: float | None        # bytes available now; None: unknown, no limit
    alone: bool                # no other package compiles beside it

    def jobs_for(self, recipe: Recipe, archs: ArchList, share: int
                 ) -> tuple[int, int | None, str]:
        """(jobs, nvcc threads or None for the default, why fewer jobs than ``share``)."""
        if not recipe.compile_memory_gb:
            return share, None, ""
        jobs, threads = jobs_within_memory(share, per_compile=recipe.compile_memory_gb * 2**30,
                                           arches=max(1, len(archs)), budget=self.budget,
                                           alone=self.alone, avail=self.avail)
        if jobs == share:
            return share, threads, ""
        beside = "" if self.alone else ", other packages' compilers beside it"
        each = f" (nvcc -t {threads}: {threads} arches at once)" if threads > 1 else ""
        return jobs, threads, (f"{jobs} of {share} jobs{each}: one compile of {recipe.name} "
                               f"peaks at ~{recipe.compile_memory_gb:g} GB (compile_memory_gb), "
                               f"{self.avail / 2**30:.0f} GB available{beside}")


def _package_plan(project: Project, req: BuildRequest, combo_env: ComboEnv, recipe: Recipe,
                  jobs: int, planned: dict[str, PackagePlan], log_dir: Path,
                  slot_script: Path | None = None,
                  memory: MemoryBudget | None = None) -> PackagePlan:
    combo = combo_env.combo
    mapped = package_arches(recipe, combo, req)
    archs = mapped if mapped is not None else combo.arches
    jobs, threads, jobs_note = (memory.jobs_for(recipe, archs, jobs) if memory
                                else (jobs, None, ""))
    policy = effective_policy(recipe, combo, req)
    work = work_dir(project, req, combo, recipe)
    skip = ""
    if mapped is not None and len(mapped) == 0:
        skip = (f"none of the requested arches {combo.arches} has kernels in {recipe.name} "
                f"(it has: {' '.join(recipe.arches.supported)})")
    src = source_root(recipe.source, work / "src")
    # an extra git source with a subdir (MILo's submodules/tetra_triangulation) is that subdir
    defines = tuple((var, str(source_root(extra, work / "extra" / var)))
                    for var, extra in recipe.extra_sources)
    builder = kind_module(recipe.kind)   # the kind's module, asked once per package
    defines += builder.torch_defines(combo_env.info)
    env_vars = {**dict(job_env(combo_env, recipe, archs, jobs, threads)), **dict(defines)}
    kernels = ""   # the kernel set, judged on the devices the combo targets (config/kernels.py)
    if recipe.kernels is not None and recipe.kind.compiles:
        env_vars.update(recipe.kernels.env(combo.arches, req.kernels, f"recipes/{recipe.name}.toml"))
        kernels = recipe.kernels.describe(combo.arches, req.kernels)
    if recipe.depends:   # the dependencies' overlays, this package's build only (builddeps)
        env_vars["PYTHONPATH"] = builddeps.overlay_pythonpath(
            work, recipe.depends, env_vars.get("PYTHONPATH") or os.environ.get("PYTHONPATH"))
    env_vars = tuple(sorted(env_vars.items()))
    patch_sets = recipe.patches + (recipe.arches.native_patches if policy is ArchPolicy.NATIVE
                                    else ())

    prebuilt: tuple[Action, ...] = ()
    cache, cache_off, uncached, bare = None, "", {}, {}
    if req.prefer_prebuilt and recipe.prebuilt and recipe.kind.compiles:
        prebuilt = (_clean(work / "prebuilt"),
                    *_run_all(download_steps(combo_env, recipe, archs, work / "prebuilt", env_vars,
                                             req.verbose)),
                    *_deps(recipe, work),   # its import check needs them too
                    Action(ActionKind.ACCEPT, f"verify the prebuilt wheel ({', '.join(CHECKS)}); "
                           f"keep it only if {', '.join(PREBUILT_MUST_PASS)} pass"))
    if not recipe.kind.compiles:
        actions = [_clean(work / "dist"),
                   *_run_all(download_steps(combo_env, recipe, archs, work / "dist", env_vars,
                                            req.verbose)),
                   *_deps(recipe, work)]   # verified importable: pccm imports ccimport
    else:
        actions = [Action(ActionKind.CHECK, "check the system headers the recipe names"),
                   Action(ActionKind.GUARD, "refuse if the build interpreter imports "
                          + ", ".join(own_modules(recipe)) + " from outside the source tree "
                          "(an installed copy would be built against instead)")]
        fresh = " (fresh, with a fresh build dir: --rebuild)" if req.rebuild else ""
        actions.append(Action(ActionKind.FETCH, f"fetch {recipe.source.describe()} into "
                              f"{work / 'src'}{fresh}", path=work / "src"))
        actions += [Action(ActionKind.PATCH, f"apply patch set patches/{p} to {src}", arg=p, path=src)
                    for p in patch_sets]
        for var, extra in recipe.extra_sources:
            dest = work / "extra" / var
            actions.append(Action(ActionKind.FETCH, f"fetch {extra.describe()} into {dest} ({var})",
                                  arg=var, path=dest))
            actions += [Action(ActionKind.PATCH, f"apply patch set patches/{p} to {dest}", arg=p,
                               path=dest) for p in recipe.patches]
        if recipe.build_requires:
            actions.append(Action(ActionKind.RUN, f"build requirements of {recipe.name}", Step(
                (str(combo_env.python), "-m", "pip", "install", "--disable-pip-version-check",
                 *recipe.build_requires), combo_env.target.step_env(),
                description=f"build requirements of {recipe.name}"), shares_env=True))
        actions += _deps(recipe, work)
        actions.append(_clean(work / "dist"))
        cache, cache_off = compiler_cache.plan_for(project, combo, req.cache, recipe, log_dir)
        job = BuildJob(recipe, combo_env.python, src, work / "dist", work / "build", archs,
                       env_vars, req.verbose, project.root / "native" / "cmake", defines, cache,
                       slot_script, None if cache and cache.across_clones or combo_env.target.emulated
                       else path_maps(work, recipe.mapped_name, project=project.root,
                                      site_packages=combo_env.info.site_packages,
                                      toolkit=combo_env.toolkit.root))
        built = builder.steps(job)
        actions += _with_cmake_seed(builder, job, _run_all(built))
        uncached = dict(zip(built, builder.steps(replace(job, cache=None)))) if cache else {}
        # the key sees the build as it runs without launchers: they change speed only
        bare = dict(zip(built, builder.steps(replace(job, cache=None, slots=None))))
    actions.append(Action(ActionKind.VERIFY, f"verify ({', '.join(CHECKS)}) "
                          "after installing the wheel's runtime requirements"))

    keys = package_keys(project, recipe, combo_env, patch_sets=patch_sets, archs=archs.torch(),
                        policy=policy, skip=skip,
                        commands={f"{i}": bare.get(a.step, a.step)
                                  for i, a in enumerate((*prebuilt, *actions)) if a.step},
                        depends={d: planned[d].key for d in recipe.depends if d in planned})
    return PackagePlan(recipe, archs, policy, skip, work, src, jobs, env_vars, prebuilt,
                       tuple(actions), keys.inputs, keys.key, keys.source_key, cache, cache_off,
                       tuple((a, b) for a, b in uncached.items() if a != b), jobs_note, kernels)


def _deps(recipe: Recipe, work: Path) -> list[Action]:
    """Install the wheels a package depends on into its own overlay (never the combo env):
    its build or its import needs them (cuforge.env.builddeps)."""
    if not recipe.depends:
        return []
    overlay = work / builddeps.OVERLAY
    return [Action(ActionKind.DEPS, "install the wheels of " + ", ".join(recipe.depends) + " from this "
                   f"combo's wheelhouse, each into its own {overlay}/<name> (pip install "
                   "--no-deps --target; a wheel whose files are all there already is skipped), "
                   "on PYTHONPATH for this package only", path=overlay)]


def own_modules(recipe: Recipe) -> list[str]:
    """The top-level import names a recipe's wheel provides: its modules' first parts, or its
    name as an import name (torch-scatter -> torch_scatter)."""
    names = {m.split(".")[0] for m in recipe.modules} or {recipe.name.replace("-", "_")}
    return sorted(names)


def _clean(path: Path) -> Action:
    return Action(ActionKind.CLEAN, f"empty {path} (the wheel lands there first)", path=path)


def _run_all(steps) -> list[Action]:
    return [Action(ActionKind.RUN, s.description, s) for s in steps]


def _with_cmake_seed(builder: KindModule, job: BuildJob, runs: list[Action]) -> list[Action]:
    """A CMake build with a compiler cache: CMake's compiler detection is seeded into a fresh
    build dir before, and kept after (builders/cmake_seed.py)."""
    if not builder.SEEDS_DETECTION or job.cache is None or not runs:
        return runs
    step = runs[0].step
    # beside the package's sccache store, not in it: sccache evicts what it finds there
    seeds = job.cache.local.with_name(f"{job.cache.local.name}.cmake-seeds")
    seed = seeds / cmake_seed.seed_key(step.argv, dict(step.env))[:16]
    return [Action(ActionKind.SEED, f"seed CMake's compiler detection from {seed} if {job.build_dir} "
                   "is fresh", arg=str(seed), path=job.build_dir),
            *runs,
            Action(ActionKind.REMEMBER, f"keep CMake's compiler detection as {seed}", arg=str(seed),
                   path=job.build_dir)]


def download_steps(combo_env: ComboEnv, recipe: Recipe, archs: ArchList, out: Path,
                   env_vars: tuple[tuple[str, str], ...], verbose: bool) -> list[Step]:
    """``pip download`` of the recipe's published wheel into ``out``."""
    pre = replace(recipe, kind=BuildKind.PREBUILT,
                  prebuilt_find_links=_fmt(recipe.prebuilt_find_links, combo_env, archs))
    return kind_module(BuildKind.PREBUILT).steps(
        BuildJob(pre, combo_env.python, out, out, out, archs, env_vars, verbose))


def _fmt(text: str, combo_env: ComboEnv, archs: ArchList) -> str:
    return text.format(torch=combo_env.info.torch, **placeholders(combo_env, archs))


def placeholders(combo_env: ComboEnv, archs: ArchList) -> dict[str, str]:
    """What a recipe's ``[arches].env``, ``[env]`` and find-links may name
    (docs/adding-a-package.md)."""
    return {"torch_list": archs.torch_env(), "cmake_list": archs.cmake(),
            "compact": ";".join(a.number for a in archs.sass),
            "compact_targets": archs.compact(), "cuda": str(combo_env.toolkit.version),
            "accel": combo_env.combo.accel.tag}


def source_root(source: Source, dest: Path) -> Path:
    """Where the buildable tree lies once ``source`` is fetched into ``dest``."""
    return dest / source.subdir if source.git and source.subdir else dest


@cache
def effective_policy(recipe: Recipe, combo: Combo, req: BuildRequest) -> ArchPolicy:
    """The arch policy this build uses: the command line's, else the recipe's; ``auto`` means
    ``native`` (the package patched to know every target, own SASS) when the recipe has such
    patches and the toolkit compiles every target, else ``ptx`` (nearest known arch + PTX)."""
    policy = req.arch_policy or recipe.arches.policy
    if policy is not ArchPolicy.AUTO:
        return policy
    unknown = [t.arch for t in combo.arches if t.arch.base not in recipe.arches.supported]
    if not unknown:
        return ArchPolicy.NATIVE
    try:
        check_supported(combo.arches, combo.accel.cuda)
    except ConfigError:
        can = False
    else:
        can = bool(recipe.arches.native_patches)
    if not can:
        console.print(f"[yellow]{recipe.name}[/]: arch policy auto -> ptx: "
                      f"{' '.join(map(str, unknown))} not in its table and no native patch / "
                      f"toolkit support; they run by PTX JIT")
        return ArchPolicy.PTX
    return ArchPolicy.NATIVE


def package_arches(recipe: Recipe, combo: Combo, req: BuildRequest) -> ArchList | None:
    """The combo's arches after the recipe's rule; None for a prebuilt without an arch table."""
    if not recipe.kind.compiles and not recipe.arches.supported:
        return None
    rule = replace(recipe.arches, policy=effective_policy(recipe, combo, req))
    return rule.map(combo.arches)


def job_env(combo_env: ComboEnv, recipe: Recipe, archs: ArchList, jobs: int,
            threads: int | None = None) -> tuple[tuple[str, str], ...]:
    """The variables a package build gets on top of the user's environment (``threads``:
    nvcc's -t where the memory budget chose it)."""
    base = build_environment(combo_env.toolkit, archs, jobs=jobs, threads=threads,
                             cxx11_abi=combo_env.info.cxx11_abi,
                             extra_include=list(combo_env.info.nvidia_include),
                             extra_lib=list(combo_env.info.nvidia_lib),
                             bin_dirs=[combo_env.bin_dir, *combo_env.target.bin_dirs])
    base.update(combo_env.target.env)   # emulation's variables: in the step, so in the key
    fmt = placeholders(combo_env, archs)
    if recipe.arches.append_gencode:
        # Arches change the output, and ccache does not hash NVCC_APPEND_FLAGS: keep torch's
        # automatic compiler cache off for such builds.
        base["NVCC_APPEND_FLAGS"] += " " + " ".join(archs.gencode_flags())
        base["TORCH_NO_COMPILER_WRAPPER"] = "1"
    base.update({k: v.format(**fmt) for k, v in recipe.arches.env})
    base.update({k: v.format(**fmt) for k, v in recipe.env})
    return tuple(sorted(base.items()))
