"""The build pipeline: plan -> environment -> per package: fetch, patch, compile, verify,
publish. Each package ends as one manifest line: compiled, prebuilt, skipped or FAILED."""

from __future__ import annotations

import shutil
import time
from functools import cache
from dataclasses import dataclass, field, replace
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from . import sources, syslibs, venv
from .arches import ArchList, check_supported
from .build import BuildJob, steps_for
from .combos import Combo
from .console import BuildProgress, verdict_line
from .errors import BuildError, ConfigError, CuforgeError, VerifyError
from .project import Project
from .recipes import Recipe, load_recipes, plan
from .runner import Step, listen, run
from .toolchain import build_environment
from .wheelhouse import Entry, Wheelhouse, sha256_of

console = Console(stderr=True, highlight=False)


@dataclass(frozen=True)
class BuildRequest:
    """A parsed ``build`` command: typed and validated at the CLI edge."""

    combo: Combo
    packages: tuple[str, ...] = ()
    jobs: int = 1
    verbose: bool = False
    dry_run: bool = False
    keep_going: bool = False
    src_overrides: tuple[tuple[str, Path], ...] = ()
    prefer_prebuilt: bool = True
    arch_policy: str = ""          # overrides every recipe's policy (e.g. cumm: ptx | native)
    skip_smoke: bool = False
    rebuild: bool = False          # rebuild packages whose wheel is up to date


@dataclass
class Outcome:
    entries: list[Entry] = field(default_factory=list)

    @property
    def failed(self) -> list[Entry]:
        return [e for e in self.entries if e.status == "FAILED"]


def wheel_dir(project: Project, combo: Combo) -> Path:
    return combo.wheel_dir(project.wheelhouse)


def resolve_plan(project: Project, req: BuildRequest) -> list[Recipe]:
    recipes = load_recipes(project)
    for name, path in req.src_overrides:
        if name not in recipes:
            raise ConfigError(f"--src {name}=...: no recipe called {name!r}",
                              hint=f"known packages: {', '.join(sorted(recipes))}")
        recipes[name] = replace(recipes[name], source=sources.Source(path=str(path)))
    wanted = list(req.packages or req.combo.packages)
    if wanted == ["all"]:
        wanted = sorted(recipes)
    return plan(recipes, wanted)


def build(project: Project, req: BuildRequest) -> Outcome:
    order = resolve_plan(project, req)
    if req.dry_run:
        from .dryrun import dry_run
        dry_run(project, req, order)
        return Outcome()
    log_dir = project.state_dir / "logs" / req.combo.env_id
    log_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with console.status(f"[bold]{req.combo.id}[/]: preparing the environment"):
        env = venv.prepare(project.state_dir, req.combo, log=log_dir / "env.log",
                           verbose=req.verbose)
    combo = replace(req.combo, torch=env.info.torch)
    how = "reused" if env.reused else "created"
    console.print(f"[bold]{combo.id}[/]: env {how} in {time.monotonic() - t0:.1f} s "
                  f"(torch {env.info.torch_full}, CUDA {env.toolkit.version} at "
                  f"{env.toolkit.root})")
    house = Wheelhouse(wheel_dir(project, combo))
    outcome = Outcome()
    broken: set[str] = set()
    for recipe in order:
        failed_deps = [d for d in recipe.depends if d in broken]
        if failed_deps:
            entry = _record_skip(house, combo, recipe, f"dependency {', '.join(failed_deps)} failed")
            broken.add(recipe.name)
            outcome.entries.append(entry)
            continue
        current = None if req.rebuild else up_to_date(project, house, combo, req, recipe)
        if current is not None:
            console.print(f"[green]up to date[/] {current.wheel} (same recipe, patches, sources, "
                          "arches and torch; --rebuild to build again)")
            outcome.entries.append(current)
            continue
        entry = _build_one(project, req, combo, env, recipe, house, log_dir)
        outcome.entries.append(entry)
        if entry.status == "FAILED":
            broken.add(recipe.name)
            if not req.keep_going:
                break
    return outcome


def recipe_digest(project: Project, recipe: Recipe) -> str:
    """sha256 over the recipe file and every file of its patch sets: edits to either make an
    existing wheel out of date."""
    from hashlib import sha256
    h = sha256()
    files = [recipe.file] if recipe.file else []
    for name in (*recipe.patches, *recipe.arches.native_patches):
        files += sorted(p for p in (project.patches_dir / name).rglob("*") if p.is_file())
    for f in files:
        h.update(str(f.relative_to(project.root) if f.is_relative_to(project.root) else f)
                 .encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def up_to_date(project: Project, house: Wheelhouse, combo: Combo, req: BuildRequest,
               recipe: Recipe) -> Entry | None:
    """The wheelhouse entry that already satisfies this build, if any. Local paths (our
    native/ projects, --src checkouts) change without a version, so they always rebuild (the
    persistent build dir makes that cheap)."""
    if recipe.source.path or recipe.kind == "prebuilt":
        return None
    entry = house.latest().get(recipe.name)
    if entry is None or entry.status not in ("compiled", "prebuilt") or not entry.wheel:
        return None
    archs = _package_arches(recipe, combo, req)
    wheel = house.dir / entry.wheel
    same = (entry.recipe_digest == recipe_digest(project, recipe)
            and entry.arches_requested == (archs or combo.arches).torch()
            and entry.arch_policy == effective_policy(recipe, combo, req)
            and entry.torch == combo.torch and entry.python == combo.python)
    return entry if same and wheel.exists() and sha256_of(wheel) == entry.wheel_sha256 else None


def _build_one(project: Project, req: BuildRequest, combo: Combo, env: venv.ComboEnv,
               recipe: Recipe, house: Wheelhouse, log_dir: Path) -> Entry:
    log = log_dir / f"{recipe.name}.log"
    log.write_text("")
    archs = _package_arches(recipe, combo, req)
    if archs is not None and len(archs) == 0:
        reason = (f"none of the requested arches {combo.arches} has kernels in {recipe.name} "
                  f"(it has: {' '.join(recipe.arches.supported)})")
        console.print(f"[yellow]skipped[/] {recipe.name}: {reason}")
        return _record_skip(house, combo, recipe, reason)
    started = time.monotonic()
    try:
        with BuildProgress(recipe.name, console, f"building for {archs or combo.arches} "
                           f"(log: {log})") as progress, listen(progress.on_line):
            wheel, how, checks, embedded, note = _wheel_for(
                project, req, combo, env, recipe, archs, log, progress.say)
    except CuforgeError as err:
        entry = house.publish(None, _failed_entry(combo, recipe, str(err), log, started))
        if not req.keep_going:
            raise   # printed once, by the CLI
        console.print(f"[red]FAILED[/] {escape(recipe.name)}: {escape(str(err))}")
        return entry
    seconds = round(time.monotonic() - started, 1)
    entry = Entry(
        package=recipe.name, status=how, version=_wheel_version(wheel),
        wheel=wheel.name, wheel_sha256=sha256_of(wheel),
        source=describe_sources(recipe) if how == "compiled" else " ".join(recipe.prebuilt),
        arches_requested=(archs or combo.arches).torch(), arches_embedded=embedded,
        arch_policy=effective_policy(recipe, combo, req), checks=checks, torch=combo.torch,
        python=combo.python, cuda=str(env.toolkit.version), build_seconds=seconds, log=str(log),
        reason=note, recipe_digest=recipe_digest(project, recipe))
    house.publish(wheel, entry)
    console.print(f"[green]{how}[/] {wheel.name} in {seconds:.1f} s "
                  f"(sass {' '.join(embedded.get('sass', [])) or '-'}; "
                  f"ptx {' '.join(embedded.get('ptx', [])) or '-'})")
    console.print(verdict_line(recipe.name, checks))
    return entry


def _wheel_for(project: Project, req: BuildRequest, combo: Combo, env: venv.ComboEnv,
               recipe: Recipe, archs: ArchList | None, log: Path, say
               ) -> tuple[Path, str, dict[str, str], dict[str, list[str]], str]:
    """A verified wheel for ``recipe``: an accepted prebuilt one, or one compiled here."""
    note = ""
    if req.prefer_prebuilt and recipe.prebuilt and recipe.kind != "prebuilt":
        say("trying the prebuilt wheel")
        got, note = _try_prebuilt(project, req, combo, env, recipe, archs or combo.arches, log)
        if got:
            wheel, checks, embedded = got
            return wheel, "prebuilt", checks, embedded, ""
        console.print(f"[yellow]{recipe.name}[/]: {escape(note)}; compiling instead")
    say(f"building for {archs or combo.arches}")
    wheel, how = _produce_wheel(project, req, combo, env, recipe, archs, log)
    say("verifying")
    checks, embedded = _verify(project, req, env, recipe, wheel, archs or combo.arches, log)
    return wheel, how, checks, embedded, note


# Checks a prebuilt wheel must pass to be used (the smoke test runs afterwards as for any wheel).
PREBUILT_GATE = ("abi", "symbols", "cudart", "fatbin", "import")


def _try_prebuilt(project: Project, req: BuildRequest, combo: Combo, env: venv.ComboEnv,
                  recipe: Recipe, archs: ArchList, log: Path):
    """Download the recipe's prebuilt wheel and keep it only if it covers ``archs`` and passes
    the ABI, symbol, CUDA-runtime, fatbin and import checks. Returns (result, why-not)."""
    from .verify import verify_wheel
    staging = project.state_dir / "work" / combo.env_id / recipe.name / "prebuilt"
    try:
        wheel = _download_prebuilt(req, env, recipe, archs, staging, log)
    except CuforgeError as err:
        return None, f"no usable prebuilt wheel ({str(err).splitlines()[0]})"
    smoke = None if req.skip_smoke else smoke_script(project, recipe)
    try:
        _install_runtime_requirements(env, wheel, log)
    except CuforgeError as err:
        return None, f"prebuilt {wheel.name}: its requirements do not install ({err})"
    report = verify_wheel(wheel, verify_context(env, archs), smoke=smoke,
                          modules=list(recipe.modules))
    bad = [r for r in report.results if r.check in PREBUILT_GATE and r.status == "fail"]
    bad += [r for r in report.results if r.check == "smoke" and r.status == "fail"]
    if bad:
        why = "; ".join(f"{r.check}: {r.summary}" for r in bad)
        return None, f"prebuilt {wheel.name} rejected ({why})"
    checks = check_summaries(report)
    return (wheel, checks, embedded_arches(wheel)), ""


def _download_prebuilt(req: BuildRequest, env: venv.ComboEnv, recipe: Recipe, archs: ArchList,
                       staging: Path, log: Path) -> Path:
    """The recipe's published wheel, downloaded into a fresh ``staging`` directory."""
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    pre = replace(recipe, kind="prebuilt",
                  prebuilt_find_links=_fmt(recipe.prebuilt_find_links, env, archs))
    job = BuildJob(pre, env.python, staging, staging, staging, archs,
                   _job_env(env, recipe, archs, req.jobs), req.verbose)
    for step in steps_for(job):
        run(step, log=log, stream=req.verbose)
    return _single_wheel(staging, recipe)


def _fmt(text: str, env: venv.ComboEnv, archs: ArchList) -> str:
    return text.format(torch=env.info.torch, accel=env.combo.accel.tag, cuda=str(env.toolkit.version),
                       torch_list=archs.torch(), cmake_list=archs.cmake(),
                       compact=";".join(a.number for a in archs.sass))


def _produce_wheel(project: Project, req: BuildRequest, combo: Combo, env: venv.ComboEnv,
                   recipe: Recipe, archs: ArchList | None, log: Path) -> tuple[Path, str]:
    work = project.state_dir / "work" / combo.env_id / recipe.name
    staging = work / "dist"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    job_env = _job_env(env, recipe, archs or combo.arches, req.jobs)
    if recipe.kind == "prebuilt":
        return _download_prebuilt(req, env, recipe, archs or combo.arches, staging, log), "prebuilt"
    syslibs.require_headers(recipe)
    _reset_build_dir_if_sources_changed(work, recipe)
    src = sources.fetch(recipe.source, project_root=project.root,
                        cache_dir=project.state_dir / "cache", dest=work / "src",
                        stamp=_source_stamp(recipe))
    _apply_patches(project, recipe, src)
    if effective_policy(recipe, combo, req) == "native":
        _apply_patches(project, replace(recipe, patches=recipe.arches.native_patches), src)
    defines = []
    for var, extra in recipe.extra_sources:   # e.g. upstream C++ sources for a native/ project
        root = sources.fetch(extra, project_root=project.root,
                             cache_dir=project.state_dir / "cache", dest=work / "extra" / var,
                             stamp=extra.describe())
        _apply_patches(project, recipe, root)
        defines.append((var, str(root)))
    job_env = tuple(sorted({**dict(job_env), **dict(defines)}.items()))
    _install_build_inputs(project, req, combo, env, recipe, log)
    job = BuildJob(recipe, env.python, src, staging, work / "build", archs or combo.arches,
                   job_env, req.verbose, project.root / "native" / "cmake", tuple(defines))
    for step in steps_for(job):
        run(step, log=log, stream=req.verbose)
    return _single_wheel(staging, recipe), "compiled"


def _install_build_inputs(project: Project, req: BuildRequest, combo: Combo,
                          env: venv.ComboEnv, recipe: Recipe, log: Path) -> None:
    """Install what the build imports: PyPI build requirements and the wheels of the recipe's
    dependencies from this combo's wheelhouse (cumm's setup.py imports pccm; spconv, cumm)."""
    if recipe.build_requires:
        run(Step((str(env.python), "-m", "pip", "install", "--disable-pip-version-check",
                  *recipe.build_requires), description=f"build requirements of {recipe.name}"),
            log=log, stream=req.verbose)
    latest = Wheelhouse(wheel_dir(project, combo)).latest()
    wheels = []
    for dep in recipe.depends:
        entry = latest.get(dep)
        if entry is None or not entry.wheel:
            raise BuildError(f"{recipe.name} needs {dep}, which has no wheel in the wheelhouse",
                             hint=f"build it first: --only {recipe.name} builds its dependencies")
        wheels.append(str(wheel_dir(project, combo) / entry.wheel))
    if wheels:
        run(Step((str(env.python), "-m", "pip", "install", "--no-deps", "--force-reinstall",
                  "--disable-pip-version-check", *wheels),
                 description=f"install the dependencies of {recipe.name}"),
            log=log, stream=req.verbose)


def _reset_build_dir_if_sources_changed(work: Path, recipe: Recipe) -> None:
    """A persistent build dir lets an interrupted build resume, but only for the same sources:
    files exported by ``git archive`` carry their commit's time, so after a move to an older
    commit ninja would call stale objects up to date. Any change of source: a fresh build dir."""
    stamp = _source_stamp(recipe) + "".join(f" {v}={e.describe()}" for v, e in recipe.extra_sources)
    marker = work / ".build.stamp"
    if not marker.exists() or marker.read_text() != stamp:
        shutil.rmtree(work / "build", ignore_errors=True)
        work.mkdir(parents=True, exist_ok=True)
        marker.write_text(stamp)


def describe_sources(recipe: Recipe) -> str:
    """The manifest's ``source``: the main source plus any extra ones (tetra's upstream tree)."""
    extra = "".join(f" {var}={src.describe()}" for var, src in recipe.extra_sources)
    return recipe.source.describe() + extra


def runtime_requirements(wheel: Path) -> list[str]:
    """The wheel's own ``Requires-Dist`` (extras left out): what ``pip install`` of it would
    bring, so the import check sees what a user's install sees (torch-sparse needs scipy)."""
    import zipfile

    from packaging.requirements import InvalidRequirement, Requirement
    with zipfile.ZipFile(wheel) as zf:
        meta = next((n for n in zf.namelist() if n.endswith(".dist-info/METADATA")), None)
        text = zf.read(meta).decode(errors="replace") if meta else ""
    reqs = []
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        try:
            req = Requirement(line.split(":", 1)[1].strip())
        except InvalidRequirement:
            continue
        if req.marker and "extra" in str(req.marker):
            continue
        if req.marker and not req.marker.evaluate():
            continue
        reqs.append(str(req))
    return reqs


def _install_runtime_requirements(env: venv.ComboEnv, wheel: Path, log: Path) -> None:
    from packaging.requirements import Requirement
    reqs = [r for r in runtime_requirements(wheel) if Requirement(r).name.lower() != "torch"]
    if reqs:   # already-satisfied ones cost nothing; the combo's torch is never touched
        run(Step((str(env.python), "-m", "pip", "install", "--disable-pip-version-check",
                  *reqs), description=f"runtime requirements of {wheel.name}"), log=log)


def _source_stamp(recipe: Recipe) -> str:
    """Identifies a source tree + patches: an unchanged stamp lets a build resume in place."""
    return f"{recipe.source.describe()} patches={','.join(recipe.patches)}"


def _apply_patches(project: Project, recipe: Recipe, src: Path) -> None:
    if not recipe.patches:
        return
    from . import patching   # imported lazily: only recipes with patches need the engine
    for name in recipe.patches:
        patch_set = patching.load_patch_set(name, patches_dir=project.patches_dir)
        patching.apply(patch_set, src)


def _verify(project: Project, req: BuildRequest, env: venv.ComboEnv, recipe: Recipe,
            wheel: Path, archs: ArchList, log: Path
            ) -> tuple[dict[str, str], dict[str, list[str]]]:
    from .verify import verify_wheel   # the verification layer
    _install_runtime_requirements(env, wheel, log)
    ctx = verify_context(env, archs if recipe.arches.device_code else None)
    smoke = None if req.skip_smoke else smoke_script(project, recipe)
    report = verify_wheel(wheel, ctx, smoke=smoke, modules=list(recipe.modules))
    checks = check_summaries(report)
    if not report.ok:
        bad = "; ".join(f"{r.check}: {r.detail}" for r in report.results if r.status == "fail")
        raise VerifyError(f"{wheel.name} failed verification: {bad}",
                          hint=f"the wheel stays in {wheel.parent} for inspection; it was not "
                          "added to the wheelhouse")
    return checks, embedded_arches(wheel)


def check_summaries(report) -> dict[str, str]:
    """``{check: "status: detail"}`` for the manifest (details that start with their status,
    like "skipped: no GPU", are not prefixed twice)."""
    return {r.check: r.detail if r.detail.startswith(r.status) else
            f"{r.status}: {r.detail}" if r.detail else r.status for r in report.results}


def verify_context(env: venv.ComboEnv, archs: ArchList | None):
    from .verify import context_from
    return context_from(env.info, archs)


def smoke_script(project: Project, recipe: Recipe):
    from .verify import SmokeScript
    path = recipe.smoke.path(project, recipe.name)
    return SmokeScript(path, recipe.smoke.gpu, recipe.smoke.requires) if path.is_file() else None


@cache
def effective_policy(recipe: Recipe, combo: Combo, req: BuildRequest) -> str:
    """The arch policy this build uses: the command line's, else the recipe's; ``auto`` means
    ``native`` (the package patched to know every target, own SASS) when the recipe has such
    patches and the toolkit compiles every target, else ``ptx`` (nearest known arch + PTX)."""
    policy = req.arch_policy or recipe.arches.policy
    if policy != "auto":
        return policy
    unknown = [t.arch for t in combo.arches if t.arch.base not in recipe.arches.supported]
    if not unknown:
        return "native"
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
        return "ptx"
    return "native"


def _package_arches(recipe: Recipe, combo: Combo, req: BuildRequest) -> ArchList | None:
    if recipe.kind == "prebuilt" and not recipe.arches.supported:
        return None
    rule = replace(recipe.arches, policy=effective_policy(recipe, combo, req))
    return rule.map(combo.arches)


def _job_env(env: venv.ComboEnv, recipe: Recipe, archs: ArchList, jobs: int
             ) -> tuple[tuple[str, str], ...]:
    base = build_environment(env.toolkit, archs, jobs=jobs, cxx11_abi=env.info.cxx11_abi,
                             extra_include=list(env.info.nvidia_include),
                             extra_lib=list(env.info.nvidia_lib), bin_dirs=[env.bin_dir])
    fmt = {"torch_list": archs.torch(), "cmake_list": archs.cmake(),
           "compact": ";".join(a.number for a in archs.sass), "cuda": str(env.toolkit.version),
           "accel": env.combo.accel.tag}
    if recipe.arches.append_gencode:
        # Arches change the output, and ccache does not hash NVCC_APPEND_FLAGS: keep torch's
        # automatic compiler cache off for such builds.
        base["NVCC_APPEND_FLAGS"] += " " + " ".join(archs.gencode_flags())
        base["TORCH_NO_COMPILER_WRAPPER"] = "1"
    base.update({k: v.format(**fmt) for k, v in recipe.arches.env})
    base.update({k: v.format(**fmt) for k, v in recipe.env})
    return tuple(sorted(base.items()))


def _single_wheel(staging: Path, recipe: Recipe) -> Path:
    wheels = sorted(staging.glob("*.whl"))
    if len(wheels) != 1:
        raise BuildError(f"{recipe.name}: expected one wheel in {staging}, found {len(wheels)}")
    return wheels[0]


def _wheel_version(wheel: Path) -> str:
    parts = wheel.name.split("-")
    return parts[1] if len(parts) > 1 else ""


def _record_skip(house: Wheelhouse, combo: Combo, recipe: Recipe, reason: str) -> Entry:
    return house.publish(None, Entry(package=recipe.name, status="skipped", reason=reason,
                                     source=recipe.source.describe(), torch=combo.torch,
                                     python=combo.python, arches_requested=combo.arches.torch()))


def _failed_entry(combo: Combo, recipe: Recipe, reason: str, log: Path, started: float) -> Entry:
    return Entry(package=recipe.name, status="FAILED", reason=reason.splitlines()[0],
                 source=recipe.source.describe(), torch=combo.torch, python=combo.python,
                 arches_requested=combo.arches.torch(), log=str(log),
                 build_seconds=round(time.monotonic() - started, 1))


def embedded_arches(wheel: Path) -> dict[str, list[str]]:
    """SASS and PTX arch numbers embedded in all ``.so`` files of ``wheel``, read from their
    ``.nv_fatbin`` sections (what is really there, not what was requested)."""
    import tempfile

    from .verify.elf import shared_objects
    from .verify.fatbin import read_fatbin
    from .verify.wheel import unpack
    sass: set = set()
    ptx: set = set()
    with tempfile.TemporaryDirectory() as tmp:
        root = unpack(wheel, Path(tmp))
        for so in shared_objects(root):
            for container in read_fatbin(so) or []:
                sass.update(container.sass)
                ptx.update(container.ptx)
    return {"sass": [a.number for a in sorted(sass)], "ptx": [a.number for a in sorted(ptx)]}
