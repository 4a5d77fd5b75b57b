"""``invoke doctor``: the machine the wheels are built and run on — GPU and driver, memory and
the parallel jobs it allows, tools, combos, system headers, and for every wheelhouse whether
this GPU runs each package natively, only through PTX JIT, or not at all.

Only what is in use decides the exit status: the combo ``--combo`` names, else every combo
that has an env (``.cuforge/envs``) or a wheelhouse directory here, and the system headers of
the packages those combos build. Other combos and headers are listed as information: a
machine that is fine for the combo it runs must not fail because another combo's Python is
missing there."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rich.console import Console
from rich.text import Text

from cuforge.env import emulation, emulation_setup, hostcxx, programs, venv
from cuforge.workstation import gpu
from cuforge.config import platforms
from cuforge.config.arches import Arch, parse_target
from cuforge.config.combos import Combo, load_combos, select_combo
from cuforge.core import jsonout
from cuforge.workstation.verdict import PROBLEMS, verdict
from cuforge.core.console import make_console, plural, table, timed
from cuforge.core.errors import ConfigError, CuforgeError, ToolchainError
from cuforge.core.project import Project
from cuforge.config.recipes import load_recipes
from cuforge.env.syslibs import missing_headers
from cuforge.env.target import resolve
from cuforge.env.toolchain import NVCC_MEM_PER_JOB, default_jobs, mem_available
from cuforge.publish.wheelhouse import MANIFEST, Status, Wheelhouse

Runs = Literal["native", "compatible", "ptx", "none", "no device code"]
_STYLE = {"ok": "green", "missing": "red", "old": "red", "info": "cyan", "not yet": "yellow",
          "left out": "yellow",
          "native": "green", "compatible": "magenta", "ptx": "yellow", "none": "bold red",
          "no device code": "green", "?": "yellow"}


@dataclass(frozen=True)
class WheelRun:
    """How one wheel's kernels run on one device: the worst kernel group decides."""

    package: str
    runs: Runs
    detail: str


def wheel_runs_on(wheel: Path, device: Arch) -> WheelRun:
    """Read every ``.so``'s fatbin and rate the wheel for ``device``: ``native`` (exact SASS
    for all kernel groups), ``compatible`` (same-major older SASS), ``ptx`` (some group only
    has PTX: the driver JIT-compiles it at first launch), ``none`` (some group cannot run)."""
    from cuforge.core.elf import shared_objects
    from cuforge.verify.fatbin import read_fatbin, runs_on
    from cuforge.verify.wheel import package_name, unpack
    counts: dict[str, int] = {}
    ptx_from: set[str] = set()
    sass: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="cuforge-doctor-") as tmp:
        for so in shared_objects(unpack(wheel, Path(tmp))):
            for container in read_fatbin(so) or []:
                if container.is_link_stub:
                    continue
                found = runs_on(container, device)
                kind = found[0] if found else "none"
                counts[kind] = counts.get(kind, 0) + 1
                if found and kind == "ptx":
                    ptx_from.add(f"compute_{found[1].number}")
                elif found:
                    sass.add(f"sm_{found[1].number}")
    name = package_name(wheel)
    groups = sum(counts.values())
    if not groups:
        return WheelRun(name, "no device code", "no kernels (C++/Python only)")
    for kind in ("none", "ptx", "compatible", "native"):
        if counts.get(kind):
            worst: Runs = kind   # type: ignore[assignment]
            break
    n = counts[worst]
    some, one = _share(n, groups), n == 1
    text = {
        "none": f"{some} {'has' if one else 'have'} no SASS or PTX for sm_{device.number}: "
                f"{'it fails' if one else 'they fail'} with 'no kernel image is available'",
        "ptx": f"{some} {'runs' if one else 'run'} only by PTX JIT from "
               f"{', '.join(sorted(ptx_from))}: the first launch is slow (the driver compiles "
               f"{'it' if one else 'them'}; cached afterwards)",
        "compatible": f"SASS {' '.join(sorted(sass))} (same major, older minor) for {some}: "
                      f"runs, but not tuned for sm_{device.number}",
        "native": f"native SASS {' '.join(sorted(sass))} for {_share(groups, groups)}",
    }[worst]
    return WheelRun(name, worst, text)


def _share(n: int, groups: int) -> str:
    """``its one kernel group``, ``all 3 kernel groups``, ``2 of 3 kernel groups``."""
    if n == groups:
        return "its one kernel group" if n == 1 else f"all {n} kernel groups"
    return f"{n} of {plural(groups, 'kernel group')}"


def wheelhouses(root: Path) -> list[Path]:
    """Every directory under ``root`` with a cuforge manifest."""
    return sorted(p.parent for p in root.rglob(MANIFEST)) if root.is_dir() else []


def combos_in_use(project: Project, combos: list[Combo]) -> list[Combo]:
    """The combos this machine uses: those with an env or a wheelhouse directory here."""
    return [c for c in combos if venv.env_dir(project.state_dir, c).is_dir()
            or c.wheel_dir(project.wheelhouse).is_dir()]


def run_doctor(project: Project, *, gpu_arch: str = "", combo: str = "",
               console: Console | None = None) -> int:
    """Print the report; exit 0 when nothing the judged combos need is missing and the device
    runs every wheel of their wheelhouses, 3 otherwise."""
    out = console or make_console()
    rows: list[tuple[str, str, str]] = []
    report = gpu.probe()
    device = _device(report, gpu_arch)
    combos = load_combos(project)
    judged = [select_combo(project, name=combo)] if combo else combos_in_use(project, combos)
    now = {"step": "the GPU, memory and tools"}
    # the table prints at the end; a probe (an emulated `import torch`: ~30 s) must not be
    # silence where no terminal shows the spinner
    with timed(lambda: f"doctor: {now['step']}"):
        rows += _machine(report)
        rows += _tools()
        now["step"] = "the host compilers"
        rows += _host_compilers(project, judged)
        now["step"] = "the combos"
        rows += _combos(project, report, combos, {c.id for c in judged})
        left_out = _left_out(project, judged)
        rows += _headers(project, _packages_in_use(project, judged) - set(left_out), left_out)
        now["step"] = "emulation"
        rows += _emulation(project)
    t = table("check", "status", "detail", title="cuforge doctor", wide=["detail"])
    for check, status, detail in rows:
        t.add_row(Text(check), Text(status, style=_STYLE.get(status, "")), Text(detail))
    out.print(t)
    judged_houses = {c.wheel_dir(project.wheelhouse) for c in judged}
    cannot_run: list[str] = []
    houses: list[dict] = []
    for house in wheelhouses(project.wheelhouse):
        rated: list[dict] = []
        shown, none = _wheelhouse_table(house, project.wheelhouse, device, left_out, rated)
        out.print(shown)
        houses.append({"path": str(house), "judged": house in judged_houses, "packages": rated})
        if house in judged_houses:
            cannot_run += none
    if cannot_run and device is not None:
        arch = device[0]
        out.print(Text(f"{plural(len(cannot_run), 'package')} cannot run on sm_{arch.number}: "
                       f"{', '.join(cannot_run)}; fix: cuforge build --cuda-arch {arch} "
                       "(with the combo's options) builds them for it", style="bold red"),
                  soft_wrap=True)
    if not wheelhouses(project.wheelhouse):
        out.print(Text(f"no wheelhouse under {project.wheelhouse} yet (cuforge build makes one)"))
    names = ", ".join(c.id for c in judged)
    out.print(Text(f"judged: {names} ({'--combo' if combo else 'an env or a wheelhouse here'})"
                   if judged else "judged: no combo has an env or a wheelhouse here yet "
                   "(--combo NAME judges one); the other combos are information"))
    problems = [(check, detail) for check, status, detail in rows if status in PROBLEMS]
    if cannot_run and device is not None:
        problems.append((f"{', '.join(cannot_run)} on sm_{device[0].number}",
                         f"cannot run there; fix: cuforge build --cuda-arch {device[0]}"))
    jsonout.update(device=device[1] if device else None, judged=[c.id for c in judged],
                   checks=[{"check": c, "status": st, "detail": d} for c, st, d in rows],
                   wheelhouses=houses, cannot_run=cannot_run, problems=len(problems))
    out.print(verdict(problems, names or "this machine"), soft_wrap=True)
    return 0 if not problems else ToolchainError.exit_code


def _as_info(row: tuple[str, str, str], judged: bool) -> tuple[str, str, str]:
    """A problem of something not in use is information (and says so)."""
    check, status, detail = row
    if judged or status not in ("missing", "old"):
        return row
    return check, "info", f"{status} (not in use here): {detail.splitlines()[0]}"


def optional_packages(project: Project) -> dict[str, str]:
    """Packages that a stack installs only when they build (``optional``) and no stack needs,
    each with the stack file that says so: a failure of one leaves it out, it is no fault of
    the wheelhouse (``setup`` exits 0 without it)."""
    from cuforge.config.stacks import available_stacks, load_stack
    stacks = [load_stack(project, name) for name in available_stacks(project)]
    needed = {n for s in stacks for n in s.packages}
    return {n: s.file.name for s in stacks for n in s.optional if n not in needed}


def _left_out(project: Project, judged: list[Combo]) -> dict[str, str]:
    """The optional packages that a judged wheelhouse records without a wheel (a FAILED line):
    name -> why, for the report."""
    optional = optional_packages(project)
    out: dict[str, str] = {}
    for c in judged:
        house = Wheelhouse(c.wheel_dir(project.wheelhouse))
        for name, entry in house.latest().items():
            if name in optional and not (entry.wheel and (house.dir / entry.wheel).is_file()):
                reason = (entry.reason or entry.status).splitlines()[0]
                out[name] = f"optional in stacks/{optional[name]}, left out: {reason}"
    return out


def _packages_in_use(project: Project, judged: list[Combo]) -> set[str]:
    """What the judged combos build: their packages and what their wheelhouses hold."""
    names = {p for c in judged for p in c.packages}
    for c in judged:
        names |= set(Wheelhouse(c.wheel_dir(project.wheelhouse)).latest())
    return names


def _device(report: gpu.GpuReport, gpu_arch: str) -> tuple[Arch, str] | None:
    """The device wheels are rated for: ``--gpu-arch`` (planning for another machine), else
    this machine's first GPU, else None."""
    if gpu_arch:
        target = parse_target(gpu_arch)
        if target.ptx:
            raise ConfigError(f"--gpu-arch {gpu_arch}: a GPU, not a build target",
                              hint="e.g. --gpu-arch 12.1 (no +PTX)")
        return target.arch, f"sm_{target.arch.number} (--gpu-arch)"
    if report.gpus:
        g = report.gpus[0]
        return g.arch, f"{g.name} (sm_{g.arch.number})"
    return None


def _machine(report: gpu.GpuReport) -> list[tuple[str, str, str]]:
    rows = [("GPU", "ok" if report.gpus else "info", report.summary)]
    if report.driver:
        rows.append(("driver", "ok", f"{report.driver} (runs CUDA <= {report.driver_cuda})"))
    avail = mem_available()
    mem = f"{avail / 2**30:.1f} GiB available" if avail else "available memory unknown"
    rows.append(("memory / jobs", "ok",
                 f"{mem}, {os.cpu_count()} cores → {default_jobs()} parallel compile "
                 f"jobs (nvcc needs ~{NVCC_MEM_PER_JOB / 2**30:.1f} GiB each; --jobs overrides)"))
    return rows


def _tools() -> list[tuple[str, str, str]]:
    rows = []
    try:
        rows.append(("uv", "ok", programs.find_uv()))
    except CuforgeError as err:
        rows.append(("uv", "missing", str(err)))
    for tool in ("g++", "git", "cmake", "ninja"):
        found = shutil.which(tool)
        optional = tool in ("cmake", "ninja")
        rows.append((tool, "ok" if found else "info" if optional else "missing",
                     found or "not on PATH (combo envs install it from PyPI)" if optional
                     else found or "not on PATH"))
    return rows


def _combos(project: Project, report: gpu.GpuReport, combos: list[Combo],
            judged: set[str]) -> list[tuple[str, str, str]]:
    rows = []
    for combo in combos:
        if combo.id in judged:
            rows += _combo_rows(project, report, combo, True)
        else:   # information: one row, naming only what would be wrong if it were used
            rows.append(_unused_combo(_combo_rows(project, report, combo), combo))
    return rows


def _unused_combo(rows: list[tuple[str, str, str]], combo: Combo) -> tuple[str, str, str]:
    """A combo not in use, in one row: what of it is missing, or that it is information."""
    if len(rows) == 1 and rows[0][0].endswith(": platform"):   # built elsewhere / emulated
        return f"combo {combo.id}", "info", rows[0][2]
    wrong = [f"{check.split(': ', 1)[1]} {status}: {detail.splitlines()[0]}"
             for check, status, detail in rows if status in PROBLEMS]
    return (f"combo {combo.id}", "info", "not in use here (--combo " + combo.id + " judges it)"
            + (f"; {'; '.join(wrong)}" if wrong else ""))


def _combo_rows(project: Project, report: gpu.GpuReport, combo: Combo, judged: bool = False
                ) -> list[tuple[str, str, str]]:
    rows = []
    name = f"combo {combo.id}"
    try:
        target = resolve(project, combo)
    except ConfigError as err:   # another machine's combo: nothing to find here
        rows.append((f"{name}: platform", "info",
                     f"{combo.target_platform.name}: built there only; "
                     f"`cuforge resolve --combo {combo.id}` checks it from here"
                     if not combo.emulate else str(err).splitlines()[0]))
        return rows
    if target.emulated:
        rows.append((f"{name}: platform", "info",
                     f"{combo.target_platform.name}: built here under "
                     "emulation (see the emulation rows)"))
        return rows
    if combo.interpreter and judged:   # as the build will find it (a probe: seconds)
        try:
            info = venv.check_interpreter(combo, target, remember=False)   # reads only
        except CuforgeError as err:
            rows.append((f"{name}: interpreter", "missing", str(err)))
        else:
            rows.append((f"{name}: interpreter", "ok", f"{info.python}: Python "
                         f"{info.py_version}, torch {info.torch_full} (CUDA {info.cuda})"))
    elif combo.interpreter:   # not in use: found, but not probed (an ok would claim torch)
        found = shutil.which(combo.interpreter)
        rows.append((f"{name}: interpreter", "info" if found else "missing",
                     f"{found}: torch not probed (--combo {combo.id} does)" if found
                     else combo.interpreter))
    else:
        rows.append((f"{name}: python", "missing", str(target.missing_python))
                    if target.missing_python else (f"{name}: python", "ok", target.base_python))
        ready = venv.is_ready(project.state_dir, combo)
        rows.append((f"{name}: env", "ok" if ready else "not yet",
                     "reused on next build" if ready else "created on first build"))
    ok, text = gpu.driver_verdict(report, combo.accel.cuda)
    status = "info" if report.driver is None else "ok" if ok else "old"
    rows.append((f"{name}: driver", status, text))
    return rows


def _headers(project: Project, in_use: set[str],
             left_out: dict[str, str] | None = None) -> list[tuple[str, str, str]]:
    rows = []
    left_out = left_out or {}
    for recipe in load_recipes(project).values():
        if not recipe.system_headers:
            continue
        missing = missing_headers(recipe)
        names = " ".join(f"<{h.header}>" for h in recipe.system_headers)
        row = (f"{recipe.name}: headers", "ok" if not missing else "missing",
               f"{names} found" if not missing else "apt-get install "
               + " ".join(sorted({h.debian for h in missing})))
        if missing and recipe.name in left_out:
            row = (row[0], "left out", f"{left_out[recipe.name]}; {row[2]} builds it")
        rows.append(_as_info(row, recipe.name in in_use))
    return rows


def _wheelhouse_table(house: Path, root: Path, device: tuple[Arch, str] | None,
                      left_out: dict[str, str] | None = None, rated: list | None = None):
    """The table of ``house`` rated for ``device``, and the packages it cannot run; each row
    is also appended to ``rated`` as data (``doctor --json``)."""
    where = house.relative_to(root) if house.is_relative_to(root) else house
    title = f"wheelhouse {where}: " + (f"on {device[1]}" if device else
                                       "no GPU here (--gpu-arch X.Y rates it for another one)")
    t = table("package", "runs", "detail", title=title, wide=["detail"])
    none: list[str] = []

    def row(package: str, runs: str, detail: str, style: str) -> None:
        t.add_row(Text(package), Text(runs, style=style), Text(detail))
        if rated is not None:
            rated.append({"package": package, "runs": runs, "detail": detail})

    for entry in Wheelhouse(house).latest().values():
        wheel = house / entry.wheel if entry.wheel else None
        if wheel is None or not wheel.is_file():   # a build that made no wheel: no verdict
            optional = entry.package in (left_out or {})
            row(entry.package, "left out" if optional else "no wheel",
                (left_out or {}).get(entry.package) or _no_wheel(entry), "yellow")
            continue
        if device is None:
            emb = entry.arches_embedded
            row(entry.package, "?", f"SASS {' '.join(emb.get('sass', [])) or '-'}; "
                f"PTX {' '.join(emb.get('ptx', [])) or '-'}", _STYLE["?"])
            continue
        runs_on = wheel_runs_on(wheel, device[0])
        row(entry.package, runs_on.runs, runs_on.detail, _STYLE[runs_on.runs])
        if runs_on.runs == "none":
            none.append(entry.package)
    return t, none


def _no_wheel(entry) -> str:
    """Why a package's newest manifest line has no wheel to rate."""
    if entry.wheel:
        return f"{entry.wheel} is no longer in the wheelhouse"
    said = "its last build failed" if entry.status is Status.FAILED else str(entry.status)
    return f"{said}: {entry.reason.splitlines()[0]}" if entry.reason else said


def _host_compilers(project: Project, judged: list[Combo]) -> list[tuple[str, str, str]]:
    """The host C++ compiler each distinct combo setting resolves to, probed as a build would
    (one that links libstdc++ statically is replaced by a fallback, or refused)."""
    rows, seen = [], set()
    used = {(c.host_cxx, c.host_cc, c.host_fallbacks) for c in judged}
    for combo in load_combos(project):
        # another platform's: its cross compiler is in the emulation rows
        if combo.target_platform != platforms.build_platform():
            continue
        key = (combo.host_cxx, combo.host_cc, combo.host_fallbacks)
        if key in seen:
            continue
        seen.add(key)
        label = f"host C++ ({combo.host_cxx or '$CXX, else g++'})"
        try:
            host_compiler, note = hostcxx.choose(*key)
        except CuforgeError as err:
            rows.append(_as_info((label, "missing", str(err)), key in used))
            continue
        rows.append((label, "ok", note or host_compiler.describe()))
    return rows


def _emulation(project: Project) -> list[tuple[str, str, str]]:
    """Can this machine build another platform's combos under QEMU (``emulate = true``)?
    binfmt_misc, the QEMU it runs and its version, the target's Python, the cross compiler,
    and ``import torch`` in an emulated combo env that exists already (~30 s)."""
    rows = []
    emulated = [c for c in load_combos(project)
                if c.emulate and platforms.is_foreign(c.target_platform)]
    for name, emu in emulation.load(project).items():
        if name == platforms.build_platform().name:
            continue
        envs = [venv.env_dir(project.state_dir, c) / "bin" / "python" for c in emulated
                if c.target_platform.name == name and venv.is_ready(project.state_dir, c)]
        findings = emulation_setup.check(project.state_dir, emu,
                                         torch_python=envs[0] if envs else None)
        rows += [(f"emulation {name}", emulation_setup.verdict(True), f.what)
                 for f in findings if f.ok]
        bad = [f for f in findings if not f.ok]
        if bad:   # optional: "not yet", never a failure; its fix once, not once per finding
            more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
            rows.append((f"emulation {name}", emulation_setup.verdict(False),
                         f"{bad[0].brief or bad[0].what}{more}; fix: `sudo cuforge emulation "
                         f"setup --platform {name}`"))
    return rows
