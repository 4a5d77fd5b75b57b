"""One function per ``cuforge`` command: the parsed arguments become the typed request of the
layer below (``BuildRequest``, ``SetupRequest``, a combo), which does the work."""

from __future__ import annotations

import sys
from pathlib import Path

from cuforge.config.arches import ArchPolicy
from cuforge.config.inputs import check_jobs
from cuforge.core import jsonout
from cuforge.core.console import make_console
from cuforge.core.errors import BuildError, ConfigError, ToolchainError

err_console = make_console(stderr=True)
DEFAULT_PYTHON, DEFAULT_ACCEL = "3.11", "cu130"   # the combo without --combo/--python/--accel


def _project(args):
    from dataclasses import replace

    from cuforge.core.project import find_project
    project = find_project(root=args.root)
    if getattr(args, "wheelhouse", None):   # build, setup: cibuildwheel's --output-dir
        project = replace(project, wheel_root=args.wheelhouse.expanduser().absolute())
    return project


def _arches(args) -> str:
    """``--cuda-arch``: absent means the combo's default; given but empty is a mistake (it used
    to build the default arches silently)."""
    if args.cuda_arch is not None and not args.cuda_arch.strip():
        raise ConfigError("--cuda-arch is empty",
                          hint='name the targets, e.g. --cuda-arch "12.0;12.1+PTX", or leave the '
                               "option out to build the combo's default arches")
    return args.cuda_arch or ""


def _combo(args, *, arches: str = "", torch: str = ""):
    from cuforge.config.combos import select_combo, with_overrides
    python, accel = args.python or DEFAULT_PYTHON, args.accel or DEFAULT_ACCEL
    combo = select_combo(_project(args), python=python, accel=accel, name=args.combo)
    if args.combo:
        _same_combo(combo, args.python, args.accel)
    return with_overrides(combo, torch=torch or None, arches=arches or None,
                          interpreter=args.interpreter or None,
                          emulate=getattr(args, "emulate", False))


def _same_combo(combo, python: str | None, accel: str | None) -> None:
    """``--combo h200 --python 3.11 --accel cu128``: the name and the pair disagree, and one
    of them would be ignored silently; refuse (a pair that agrees is fine)."""
    clash = [f"{flag} {given}" for flag, given, has in (
        ("--python", python, combo.python), ("--accel", accel, combo.accel.tag))
        if given is not None and given != has]
    if clash:
        raise ConfigError(f"--combo {combo.id} is python {combo.python} with "
                          f"{combo.accel.tag}, but {' '.join(clash)} was given too",
                          hint=f"pass --combo {combo.id} alone, or --python and --accel "
                               "without --combo")


def _only(given: str | None) -> tuple[str, ...]:
    """``--only``: absent means the combo's packages; given, at least one name (``--only ''``
    used to build the demo and exit 0)."""
    if given is None:
        return ()
    names = tuple(p.strip() for p in given.split(",") if p.strip())
    if not names:
        raise ConfigError(f"--only {given!r} names no package",
                          hint="name one, e.g. --only simple-knn (or 'all'), or leave --only "
                               "out to build the combo's packages")
    return names


def _src_overrides(items: list[str]) -> tuple[tuple[str, Path], ...]:
    """``--src NAME=PATH`` options, parsed once."""
    srcs = []
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"--src {item!r}: expected NAME=PATH",
                              hint="e.g. --src simple-knn=~/code/simple-knn")
        srcs.append((name, Path(path).expanduser().resolve()))
    return tuple(srcs)


def cmd_build(args) -> int:
    from cuforge.pipeline.executor import build
    from cuforge.pipeline.request import BuildRequest
    from cuforge.config.kernels import KernelSet
    from cuforge.pipeline.cache_config import decide
    from cuforge.env.toolchain import default_jobs
    check_jobs(args.jobs)
    combo = _combo(args, arches=_arches(args), torch=args.torch)
    if args.full_kernels and args.kernels not in (None, KernelSet.FULL):
        raise ConfigError(f"--full-kernels and --kernels {args.kernels} ask for two kernel sets",
                          hint="give one: --kernels full is --full-kernels")
    project = _project(args)
    req = BuildRequest(
        combo=combo,
        packages=_only(args.only),
        jobs=args.jobs or default_jobs(),   # None: the machine's default
        verbose=args.verbose, dry_run=args.dry_run,
        keep_going=args.keep_going, src_overrides=_src_overrides(args.src),
        prefer_prebuilt=args.prefer_prebuilt,
        arch_policy=ArchPolicy(args.arch_policy) if args.arch_policy else None,
        skip_smoke=args.skip_smoke, rebuild=args.rebuild, upstream_tests=args.upstream_tests,
        stress=args.stress, sanitize=args.sanitize,
        one_at_a_time=args.one_at_a_time, team_wheels=args.wheels,
        cache=decide(project.envs_dir, combo_spec=combo.cache, override=args.cache,
                     scheduler=args.scheduler, say=err_console.print),
        kernels=KernelSet.FULL.value if args.full_kernels else args.kernels)
    outcome = build(project, req, on_report=lambda r: jsonout.update(**r))
    if outcome.failed:
        names = ", ".join(e.package for e in outcome.failed)
        err_console.print(f"[bold red]cuforge: failed:[/] {names}")
        return BuildError.exit_code
    return 0


def cmd_clean(args) -> int:
    from rich.text import Text

    from cuforge.workstation import clean
    from cuforge.core.console import table
    from cuforge.core.project import find_project
    project = find_project(root=args.root)   # not _project: --wheelhouse here is a target
    items = clean.inventory(project)
    asked = bool(args.combo or args.stale or args.everything or args.wheelhouse)
    chosen = clean.select(project, items, combo=args.combo, stale=args.stale,
                          everything=args.everything)
    if args.wheelhouse:
        chosen.append(clean.wheelhouse_item(args.wheelhouse))
    out = make_console()
    t = table("kind", "on disk", "frees", "path", title=f"cuforge state in {project.state_dir}",
              wide=["path"])
    for item in items:   # du -h's units; "frees": less the links into uv's cache
        t.add_row(Text(item.kind), Text(clean.human(item.size)), Text(clean.human(item.frees)),
                  Text(str(item.path)))
    out.print(t)
    if not asked:
        out.print(Text(f"{clean.summary(items)}; nothing removed: pass --combo NAME, --stale or "
                       "--all (and --wheelhouse DIR for a wheelhouse), --dry-run to see first"))
        return 0
    verb = "would remove" if args.dry_run else "removed"
    for item in chosen:
        if not args.dry_run:
            clean.remove(item)
        out.print(Text(f"{verb} {item.kind} {item.path} (frees {clean.human(item.frees)})"),
                  soft_wrap=True)
    out.print(Text(f"{verb} {clean.summary(chosen)}" if chosen else "nothing to remove"))
    return 0


def cmd_matrix(args) -> int:
    from cuforge.config.matrix import print_matrix
    print_matrix(_project(args))
    return 0


def cmd_shell(args) -> int:
    from cuforge.workstation.shell import open_shell
    return open_shell(_project(args), _combo(args), print_only=args.print_env)


def cmd_verify(args) -> int:
    from cuforge.pipeline.verify_command import verify_paths
    if args.ptx_jit and not (args.stress or args.sanitize):
        raise ConfigError("--ptx-jit says how the stress runs, and no stress was asked for",
                          hint="add --stress (or --sanitize): cuforge verify --stress --ptx-jit PATH")
    return verify_paths(_project(args), _combo(args, arches=_arches(args)), args.paths,
                        arches_given=bool(_arches(args)),
                        models=args.models, upstream_tests=args.upstream_tests,
                        tests_src=dict(_src_overrides(args.tests_src)),
                        stress=args.stress, sanitize=args.sanitize, ptx_jit=args.ptx_jit)


def cmd_doctor(args) -> int:
    from cuforge.workstation.doctor import run_doctor
    return run_doctor(_project(args), gpu_arch=args.gpu_arch, combo=args.combo)


def cmd_setup(args) -> int:
    from cuforge.env.toolchain import default_jobs
    check_jobs(args.jobs)
    from cuforge.env.checkoutreqs import IndexOptions
    from cuforge.workstation.setup import SetupRequest, setup
    checkout = args.checkout.expanduser().resolve()
    req = SetupRequest(stack=args.stack, checkout=checkout,
                       venv=(args.venv or checkout / ".venv").expanduser().absolute(),
                       combo=_combo(args, arches=_arches(args)), dry_run=args.dry_run,
                       jobs=args.jobs or default_jobs(), rebuild=args.rebuild,
                       no_build=args.no_build, src_overrides=_src_overrides(args.src),
                       requirements=not args.no_requirements, team_wheels=args.wheels,
                       pinned=args.pinned, stress=args.stress, sanitize=args.sanitize,
                       kernels=args.kernels,
                       index=IndexOptions(tuple(d.expanduser().resolve() for d in args.find_links),
                                          args.no_index))
    return setup(_project(args), req)


def cmd_stack(args) -> int:
    from cuforge.workstation.which_stack import write_stack
    project = _project(args)
    checkout = args.checkout.expanduser().resolve()
    path = write_stack(project, checkout, args.name, force=args.force)
    print(f"wrote {path}: `cuforge setup {path.stem} --checkout {checkout}` builds from it",
          file=sys.stderr)
    return 0


def cmd_mesh_convert(args) -> int:
    from rich.text import Text

    from cuforge.workstation.mesh import MeshOptions, convert
    result = convert(args.mesh, args.out_dir,
                     MeshOptions(simplify=args.simplify, keep_components=args.keep_components,
                                 obj=not args.no_obj, glb=not args.no_glb))
    out = make_console()
    for note in result.notes:
        out.print(Text(note))
    colors = "with vertex colours" if result.has_colors else "no vertex colours"
    out.print(Text(f"{result.faces_in} -> {result.faces_out} faces, {colors}; wrote "
                   + ", ".join(str(p) for p in result.outputs)))
    return 0


def cmd_patch(args) -> int:
    from cuforge.patching.commands import run_patch_command
    return run_patch_command(args.set_name, args.checkout, check=args.check,
                             revert=args.revert, dry_run=args.dry_run,
                             patches_dir=_project(args).patches_dir)


def cmd_index(args) -> int:
    from cuforge.core.console import plural
    from cuforge.publish.wheelhouse import write_indexes
    from cuforge.publish.writable import ARGUMENT
    project = _project(args)
    for tree in write_indexes(args.paths or [project.wheelhouse],
                              ARGUMENT if args.paths else project.wheelhouse_named_by):
        print(f"{tree.url}  ({plural(len(tree.files), 'wheel')}, "
              f"{plural(len(tree.projects), 'project')})")
    return 0


def cmd_ci(args) -> int:
    from rich.text import Text

    from cuforge.config import ci
    project = _project(args)
    if args.what == "matrix":
        print(ci.matrix_json(project))
        note = ci.left_out(project)   # stdout stays the JSON a CI job reads
        if note:
            err_console.print(Text(note), soft_wrap=True)
    elif args.check:
        ci.check_workflow(project)
        print(f"{ci.WORKFLOW} is current")
    else:
        print(f"wrote {ci.write_workflow(project)}")
    return 0


def cmd_emulation(args) -> int:
    from cuforge.env import emulation, emulation_setup
    project = _project(args)
    emu = emulation.for_platform(project, args.platform)
    if args.what == "run":
        from cuforge.env import rootrun
        argv = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not argv:
            raise ConfigError("cuforge emulation run: no command",
                              hint="e.g. `sudo cuforge emulation run -- uname -m`")
        return rootrun.run(project.state_dir, emu, project.root, argv)
    if args.what == "setup":
        log = project.state_dir / "logs" / f"emulation-{emu.platform}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        for line in emulation_setup.provision(project.state_dir, emu, log=log,
                                              verbose=args.verbose):
            print(line)
    findings = emulation_setup.check(project.state_dir, emu)
    for f in findings:
        print(f"{emulation_setup.verdict(f.ok):7} {f.what}"
              + ("" if f.ok else f"\n        fix: {f.fix}"))
    return 0 if all(f.ok for f in findings) else ToolchainError.exit_code


def cmd_resolve(args) -> int:
    from dataclasses import replace

    from cuforge.env.resolve import resolve
    combo = _combo(args)
    for torch in [args.torch] if args.torch else combo.torch_versions:
        found = resolve(replace(combo, torch=torch))
        nvcc = found.pins.get("nvidia-cuda-nvcc") or found.pins.get("nvidia-cuda-nvcc-cu12", "-")
        print(f"{found.combo} torch {found.pins['torch']} on {found.platform}: resolves "
              f"({len(found.pins)} packages, nvcc {nvcc})")
    return 0
