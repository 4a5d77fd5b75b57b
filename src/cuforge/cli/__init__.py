"""Command line: ``cuforge build|matrix|shell|verify|doctor|patch|index|resolve|ci``. nox
sessions and invoke tasks call this; it is also what runs on machines without nox/invoke
(``python -m cuforge``).

Errors are printed once, here, as a message and an exit code; ``CUFORGE_DEBUG=1`` shows the
traceback. A reader that goes away (``cuforge matrix | head``) ends the command quietly.
"""

from __future__ import annotations

import argparse
import keyword
import os
import signal
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path


from cuforge.config.arches import ArchPolicy
from cuforge.core.console import QUIET, make_console, print_error
from cuforge.core.errors import BuildError, ConfigError, CuforgeError, exit_code_table
from cuforge.config.inputs import check_jobs

DESCRIPTION = ("Build, verify and publish CUDA-extension wheels per combo (python x torch x "
               "CUDA x arches); set up MILo / Pointcept checkouts with them.")
# what the shell sees when the reader of our output is gone: 128 + SIGPIPE, as if killed by it
CLOSED_PIPE = 128 + signal.SIGPIPE

err_console = make_console(stderr=True)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt   # SIGTERM unwinds like Ctrl-C: running compilers are stopped


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _interrupt)
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if args.quiet:
        os.environ[QUIET] = "1"   # read by every console made from here on (and children)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        return _closed_pipe()
    except CuforgeError as err:
        if os.environ.get("CUFORGE_DEBUG"):
            raise
        print_error(err_console, err.label, str(err))
        return err.exit_code
    except KeyboardInterrupt as err:   # runner.Interrupted says which command was stopped
        err_console.print(f"cuforge: interrupted{f' ({err})' if str(err) else ''}; nothing "
                          "half-written was published", markup=False, highlight=False)
        return 130


def _closed_pipe() -> int:
    """The reader of stdout is gone: say nothing more. stdout now points at /dev/null, so the
    interpreter's last flush at exit cannot raise again (Python's documented recipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return CLOSED_PIPE


def _epilog() -> str:
    rows = [(0, "success"), *exit_code_table(),
            (130, "interrupted (Ctrl-C, SIGTERM); nothing half-written is published"),
            (CLOSED_PIPE, "the reader of the output went away (a closed pipe); nothing more said")]
    return "exit codes:\n" + "\n".join(f"  {code:<4} {what}" for code, what in rows)


def _parser() -> argparse.ArgumentParser:
    from cuforge import __version__
    p = argparse.ArgumentParser(prog="cuforge", description=DESCRIPTION, epilog=_epilog(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"cuforge {__version__}")
    root_help = ("the cuforge project (envs/, recipes/, patches/); default: $CUFORGE_ROOT, "
                 "the current directory, or the one cuforge came from")
    p.add_argument("--root", type=Path, default=None, help=root_help)
    quiet_help = ("print errors and results only: no progress, heartbeats or notes "
                  "($CUFORGE_QUIET=1 does the same)")
    p.add_argument("-q", "--quiet", action="store_true", default=False, help=quiet_help)
    # accepted after the command too (`cuforge patch milo X --root R`); SUPPRESS keeps the
    # top-level value when it is not given there
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", type=Path, default=argparse.SUPPRESS, help=root_help)
    common.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                        help=quiet_help)
    sub = p.add_subparsers(metavar="COMMAND")

    b = sub.add_parser("build", parents=[common],
                       help="build, verify and publish wheels for one combo")
    _combo_args(b)
    b.add_argument("--only", default="", help="comma-separated packages (dependencies follow); 'all' = every recipe")
    b.add_argument("--cuda-arch", default=None, help='override arches, e.g. "12.0;12.1+PTX"')
    b.add_argument("--torch", default="", help="torch version (one the combo declares or any)")
    b.add_argument("--jobs", type=int, default=None, help="parallel compile jobs "
                   "(default: min(cores, free memory / 2.5 GB))")
    b.add_argument("-v", "--verbose", action="store_true", help="stream compiler output")
    b.add_argument("--dry-run", action="store_true", help="print commands and env; build nothing")
    b.add_argument("--keep-going", action="store_true", help="continue past failed packages")
    b.add_argument("--src", action="append", default=[], metavar="NAME=PATH",
                   help="build NAME from a local checkout")
    b.add_argument("--arch-policy", default="", choices=[p.value for p in ArchPolicy],
                   help="how targets a package does not know are handled (e.g. cumm); "
                        "default: each recipe's own")
    pre = b.add_mutually_exclusive_group()
    pre.add_argument("--force-source", dest="prefer_prebuilt", action="store_false",
                     help="never use prebuilt wheels")
    pre.add_argument("--prefer-prebuilt", dest="prefer_prebuilt", action="store_true",
                     default=True, help="use a recipe's prebuilt wheel when it passes checks "
                     "(the default)")
    b.add_argument("--skip-smoke", action="store_true", help="do not run kernel smoke tests")
    b.add_argument("--upstream-tests", action="store_true",
                   help="last stage: run each recipe's [upstream_tests] suite on its wheel")
    b.add_argument("--rebuild", action="store_true",
                   help="rebuild packages whose wheel in the wheelhouse is up to date")
    b.add_argument("--one-at-a-time", action="store_true",
                   help="build packages one after another (default: side by side when free)")
    b.add_argument("--cache", default="", metavar="off|local|dist|DIR|redis://HOST:PORT",
                   help="compiler cache storage (default: envs/cache.toml, $CUFORGE_CACHE); "
                        "dist: local storage, misses compiled on sccache-dist build servers")
    b.add_argument("--scheduler", default="", metavar="URL",
                   help="the sccache-dist scheduler for --cache dist (http://HOST:10600; "
                        "default: envs/cache.toml [cache.dist], $CUFORGE_DIST_SCHEDULER); the "
                        "client token comes from $CUFORGE_DIST_TOKEN or [cache.dist] token_file")
    b.add_argument("--emulate", action="store_true",
                   help="build a combo of another platform (linux-aarch64) here under QEMU "
                        "(`cuforge emulation setup` first; docs/dgx-spark.md)")
    b.add_argument("--wheels", default="", metavar="URL|DIR",
                   help="a team's wheels (what `cuforge index` or CI publish): a simple index "
                        "URL (http://host:8080/simple/, file:///.../simple/) or a directory; "
                        "each is checked as a wheel built here, a refused one is built here")
    _wheelhouse_arg(b)
    b.set_defaults(func=_cmd_build)

    m = sub.add_parser("matrix", parents=[common],
                       help="print every combo and its build plan")
    m.set_defaults(func=_cmd_matrix)

    s = sub.add_parser("shell", parents=[common],
                       help="open a shell in a combo env with the build env set")
    _combo_args(s)
    s.add_argument("--print-env", action="store_true", help="print the env instead of a shell")
    s.set_defaults(func=_cmd_shell)

    v = sub.add_parser("verify", parents=[common],
                       help="re-run all checks on wheels or a wheelhouse directory")
    v.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                   help="wheel files or wheelhouse directories, e.g. "
                        "wheelhouse/linux-x86_64/cu130/torch2.14.1-cp311")
    _combo_args(v)
    v.add_argument("--cuda-arch", default=None, help="arches the wheels must cover")
    v.add_argument("--json", action="store_true", help="machine-readable output")
    v.add_argument("--models", action="store_true",
                   help="also run each stack's miniature model with all the wheels together")
    v.add_argument("--upstream-tests", action="store_true",
                   help="also run each recipe's [upstream_tests] suite against its wheel")
    v.add_argument("--tests-src", action="append", default=[], metavar="NAME=DIR",
                   help="take NAME's suite from DIR (the tree its `path` is relative to) "
                        "instead of fetching it")
    v.set_defaults(func=_cmd_verify)

    d = sub.add_parser("doctor", parents=[common],
                       help="check the machine: pythons, uv, nvcc, compilers, libraries")
    d.add_argument("--gpu-arch", default="",
                   help="rate the wheelhouses for this GPU (e.g. 12.1) instead of the local one")
    d.add_argument("--combo", default="", help="judge this combo only (default: the combos with "
                   "an env or a wheelhouse here; the others are information)")
    d.set_defaults(func=_cmd_doctor)

    st = sub.add_parser("setup", parents=[common],
                        help="a working venv for a MILo / Pointcept checkout: wheels, patches, "
                             "env vars, model check")
    st.add_argument("stack", help="milo or pointcept (stacks/*.toml)")
    st.add_argument("--checkout", type=Path, required=True, help="your clone of the code base")
    st.add_argument("--venv", type=Path, default=None, help="default: CHECKOUT/.venv")
    _combo_args(st)
    st.add_argument("--cuda-arch", default=None, help="arches the wheels are built for")
    st.add_argument("--jobs", type=int, default=None, help="parallel compile jobs if a build is "
                    "needed (default: min(cores, free memory / 2.5 GB))")
    st.add_argument("--rebuild", action="store_true", help="rebuild the stack's wheels")
    st.add_argument("--no-build", action="store_true",
                    help="install what the wheelhouse has; build nothing (offline)")
    st.add_argument("--src", action="append", default=[], metavar="NAME=PATH",
                    help="build NAME from a local checkout (as for build)")
    st.add_argument("--wheels", default="", metavar="URL|DIR",
                    help="a team's wheels (what `cuforge index` or CI publish): a simple index "
                        "URL (http://host:8080/simple/, file:///.../simple/) or a directory; "
                        "each is checked as a wheel built here, a refused one is built here")
    st.add_argument("--no-requirements", action="store_true",
                    help="do not install the checkout's own requirements (requirements.txt, "
                         "or the stack's list)")
    st.add_argument("--find-links", action="append", default=[], type=Path, metavar="DIR",
                    help="also look for the requirements' wheels in DIR (a folder of carried "
                         "wheels); pip's and uv's own index settings apply as well")
    st.add_argument("--no-index", action="store_true",
                    help="look only in --find-links (and PIP_FIND_LINKS/UV_FIND_LINKS): offline")
    st.add_argument("--dry-run", action="store_true", help="print what setup would do; change nothing")
    _wheelhouse_arg(st)
    st.set_defaults(func=_cmd_setup)

    mc = sub.add_parser("mesh-convert", parents=[common],
                        help="MILo's PLY mesh -> cleaned PLY, OBJ and GLB (the mesh extra)")
    mc.add_argument("--in", dest="mesh", type=Path, required=True, help="the input mesh (.ply)")
    mc.add_argument("--out-dir", type=Path, default=None, help="default: next to the input")
    mc.add_argument("--simplify", type=int, default=0, metavar="N",
                    help="quadric-simplify to about N faces")
    mc.add_argument("--keep-components", type=float, default=0.0, metavar="FRACTION",
                    help="drop connected components whose bbox diagonal is below FRACTION of "
                         "the whole mesh's (floaters)")
    mc.add_argument("--no-obj", action="store_true", help="do not write the OBJ")
    mc.add_argument("--no-glb", action="store_true", help="do not write the GLB")
    mc.set_defaults(func=_cmd_mesh_convert)

    pt = sub.add_parser("patch", parents=[common],
                       help="apply runtime patches to a checkout (milo, pointcept)")
    pt.add_argument("set_name", help="patch set: milo or pointcept")
    pt.add_argument("checkout", type=Path, help="the checkout to patch")
    pt.add_argument("--check", action="store_true",
                    help="print each patch's state, change nothing; exit 5 when one "
                         "no longer matches its file")
    pt.add_argument("--revert", action="store_true", help="undo the patches this applied")
    pt.add_argument("--dry-run", action="store_true", help="say what would change; change nothing")
    pt.set_defaults(func=_cmd_patch)

    ix = sub.add_parser("index", parents=[common],
                        help="write a PEP 503/691 simple index into each wheelhouse dir")
    ix.add_argument("paths", nargs="*", type=Path,
                    help="wheelhouse dirs or a wheelhouse root (default: the wheelhouse)")
    ix.set_defaults(func=_cmd_index)

    ci = sub.add_parser("ci", parents=[common],
                        help="the CI build matrix / GitHub Actions workflow from envs/")
    ci.add_argument("what", choices=["matrix", "workflow"],
                    help="matrix: the matrix as JSON; workflow: write .github/workflows/wheels.yml")
    ci.add_argument("--check", action="store_true",
                    help="workflow: fail unless the committed file is current")
    ci.set_defaults(func=_cmd_ci)

    r = sub.add_parser("resolve", parents=[common], help="check that a combo's torch + toolkit "
                       "install on its platform (uv, nothing installed)")
    _combo_args(r)
    r.add_argument("--torch", default="", help="one torch version (default: each the combo lists)")
    r.set_defaults(func=_cmd_resolve)

    em = sub.add_parser("emulation", parents=[common],
                        help="provision (setup) or check (status) building another platform's "
                             "wheels here under QEMU (envs/emulation.toml)")
    em.add_argument("what", choices=["setup", "status", "run"],
                    help="setup: provision QEMU and the root (needs root); status: check them; "
                         "run -- CMD: CMD inside the root as the target machine (chroot, needs "
                         "root; the DGX Spark's own path, docs/dgx-spark.md)")
    em.add_argument("--platform", default="linux-aarch64", help="the platform to emulate")
    em.add_argument("-v", "--verbose", action="store_true", help="stream apt's output")
    em.add_argument("command", nargs=argparse.REMAINDER, help="run: the command (after --)")
    em.set_defaults(func=_cmd_emulation)

    cl = sub.add_parser("clean", parents=[common],
                        help="list what cuforge keeps (envs, build dirs, logs, caches) with "
                             "sizes; remove one combo's, the stale envs or all")
    cl.add_argument("--combo", default="", help="remove this combo's envs, build dirs, logs "
                    "and caches (every torch version of it)")
    cl.add_argument("--stale", action="store_true",
                    help="remove the per-combo dirs of combos envs/combos.toml no longer "
                         "declares (another torch, a removed combo)")
    cl.add_argument("--all", dest="everything", action="store_true",
                    help="remove everything under the state dir (.cuforge/); not the wheelhouse")
    cl.add_argument("--wheelhouse", type=Path, default=None, metavar="DIR",
                    help="also remove this wheelhouse (never removed unless named here)")
    cl.add_argument("--dry-run", action="store_true", help="list what would be removed; "
                    "remove nothing")
    cl.set_defaults(func=_cmd_clean)

    for command in sub.choices.values():   # `cuforge build --help` shows the table too
        command.epilog = p.epilog
        command.formatter_class = argparse.RawDescriptionHelpFormatter
    return p


@dataclass(frozen=True)
class CommandOption:
    """One argument of a command as another front end (tasks.py) offers it."""

    flag: str        # --cuda-arch (a positional: its dest)
    param: str       # cuda_arch: the Python name (``in_`` for --in)
    switch: bool     # takes no value
    many: bool       # may be given several times (or takes several values)
    required: bool
    help: str

    @property
    def task_default(self):
        return False if self.switch else None if self.many else ""

    def argv(self, value) -> list[str]:
        """The command-line words for ``value`` (none for an unset one)."""
        if self.switch:
            return [self.flag] if value else []
        if self.many:
            return [w for v in value or () for w in (self.flag, str(v))]
        return [] if value in (None, "") else [self.flag, str(value)]


def _subcommand(command: str) -> argparse.ArgumentParser:
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


def _described(action: argparse.Action, flag: str) -> CommandOption:
    name = flag.lstrip("-").replace("-", "_")
    switch = action.nargs == 0
    many = isinstance(action, argparse._AppendAction) or action.nargs in ("+", "*")
    return CommandOption(flag, name + "_" if keyword.iskeyword(name) else name, switch, many,
                         bool(action.required) or action.nargs == "+", action.help or "")


@cache
def command_options(command: str) -> tuple[CommandOption, ...]:
    """The options of ``cuforge COMMAND`` (each by its long flag), as tasks.py offers them."""
    return tuple(_described(a, max(a.option_strings, key=len))
                 for a in _subcommand(command)._actions
                 if a.option_strings and not isinstance(a, argparse._HelpAction))


@cache
def command_positionals(command: str) -> dict[str, CommandOption]:
    """The positional arguments of ``cuforge COMMAND``, by dest."""
    return {a.dest: _described(a, a.dest) for a in _subcommand(command)._actions
            if not a.option_strings}


def _wheelhouse_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wheelhouse", type=Path, default=None, metavar="DIR",
                   help="the wheelhouse root (wheels land in DIR/<platform>/<accel>/"
                        "torch<V>-cp<XY>/); default: $CUFORGE_WHEELHOUSE, else wheelhouse/")


def _combo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--python", default="3.11", help="python version of the combo")
    p.add_argument("--accel", default="cu130", help="accelerator tag (cu128, cu129, cu130)")
    p.add_argument("--combo", default="", help="a combo by name (e.g. 3.12-cu130, h200)")
    p.add_argument("--interpreter", default="",
                   help="use this existing Python (with torch) instead of a venv")


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
    combo = select_combo(_project(args), python=args.python, accel=args.accel, name=args.combo)
    return with_overrides(combo, torch=torch or None, arches=arches or None,
                          interpreter=args.interpreter or None,
                          emulate=getattr(args, "emulate", False))


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


def _cmd_build(args) -> int:
    from cuforge.pipeline.executor import build
    from cuforge.config.request import BuildRequest
    from cuforge.pipeline.compiler_cache import parse_spec
    from cuforge.env.toolchain import default_jobs
    check_jobs(args.jobs)
    combo = _combo(args, arches=_arches(args), torch=args.torch)
    req = BuildRequest(
        combo=combo,
        packages=tuple(p for p in args.only.split(",") if p),
        jobs=args.jobs or default_jobs(),   # None: the machine's default
        verbose=args.verbose, dry_run=args.dry_run,
        keep_going=args.keep_going, src_overrides=_src_overrides(args.src),
        prefer_prebuilt=args.prefer_prebuilt, arch_policy=ArchPolicy(args.arch_policy) if args.arch_policy else None,
        skip_smoke=args.skip_smoke, rebuild=args.rebuild, upstream_tests=args.upstream_tests,
        one_at_a_time=args.one_at_a_time, team_wheels=args.wheels,
        cache=parse_spec(args.cache, "--cache") if args.cache else "",
        scheduler=args.scheduler)
    outcome = build(_project(args), req)
    if outcome.failed:
        names = ", ".join(e.package for e in outcome.failed)
        err_console.print(f"[bold red]cuforge: failed:[/] {names}")
        return BuildError.exit_code
    return 0


def _cmd_clean(args) -> int:
    from rich.text import Text

    from cuforge.env import clean
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
    t = table("kind", "size", "path", title=f"cuforge state in {project.state_dir}",
              wide=["path"])
    for item in items:
        t.add_row(Text(item.kind), Text(clean.human(item.size)), Text(str(item.path)))
    out.print(t)
    if not asked:
        out.print(Text(f"{clean.summary(items)}; nothing removed: pass --combo NAME, --stale or "
                       "--all (and --wheelhouse DIR for a wheelhouse), --dry-run to see first"))
        return 0
    verb = "would remove" if args.dry_run else "removed"
    for item in chosen:
        if not args.dry_run:
            clean.remove(item)
        out.print(Text(f"{verb} {item.kind} {item.path} ({clean.human(item.size)})"),
                  soft_wrap=True)
    out.print(Text(f"{verb} {clean.summary(chosen)}" if chosen else "nothing to remove"))
    return 0


def _cmd_matrix(args) -> int:
    from cuforge.config.matrix import print_matrix
    print_matrix(_project(args))
    return 0


def _cmd_shell(args) -> int:
    from cuforge.workstation.shell import open_shell
    return open_shell(_project(args), _combo(args), print_only=args.print_env)


def _cmd_verify(args) -> int:
    from cuforge.verify.command import verify_paths
    return verify_paths(_project(args), _combo(args, arches=_arches(args)), args.paths,
                        as_json=args.json, arches_given=bool(_arches(args)),
                        models=args.models, upstream_tests=args.upstream_tests,
                        tests_src=dict(_src_overrides(args.tests_src)))


def _cmd_doctor(args) -> int:
    from cuforge.workstation.doctor import run_doctor
    return run_doctor(_project(args), gpu_arch=args.gpu_arch, combo=args.combo)


def _cmd_setup(args) -> int:
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
                       index=IndexOptions(tuple(d.expanduser().resolve() for d in args.find_links),
                                          args.no_index))
    return setup(_project(args), req)


def _cmd_mesh_convert(args) -> int:
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


def _cmd_patch(args) -> int:
    from cuforge.patching.commands import run_patch_command
    return run_patch_command(args.set_name, args.checkout, check=args.check,
                             revert=args.revert, dry_run=args.dry_run,
                             patches_dir=_project(args).patches_dir)


def _cmd_index(args) -> int:
    from cuforge.core.console import plural
    from cuforge.publish.wheelhouse import write_indexes
    for tree in write_indexes(args.paths or [_project(args).wheelhouse]):
        print(f"{tree.url}  ({plural(len(tree.files), 'wheel')}, "
              f"{plural(len(tree.projects), 'project')})")
    return 0


def _cmd_ci(args) -> int:
    from cuforge.config import ci
    project = _project(args)
    if args.what == "matrix":
        print(ci.matrix_json(project))
    elif args.check:
        ci.check_workflow(project)
        print(f"{ci.WORKFLOW} is current")
    else:
        print(f"wrote {ci.write_workflow(project)}")
    return 0


def _cmd_emulation(args) -> int:
    from cuforge.env import emulation
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
        for line in emulation.provision(project.state_dir, emu, log=log, verbose=args.verbose):
            print(line)
    findings = emulation.check(project.state_dir, emu)
    for f in findings:
        print(f"{emulation.verdict(f.ok):7} {f.what}" + ("" if f.ok else f"\n        fix: {f.fix}"))
    return 0 if all(f.ok for f in findings) else 3


def _cmd_resolve(args) -> int:
    from dataclasses import replace

    from cuforge.env.resolve import resolve
    combo = _combo(args)
    for torch in [args.torch] if args.torch else combo.torch_versions:
        found = resolve(replace(combo, torch=torch))
        nvcc = found.pins.get("nvidia-cuda-nvcc") or found.pins.get("nvidia-cuda-nvcc-cu12", "-")
        print(f"{found.combo} torch {found.pins['torch']} on {found.platform}: resolves "
              f"({len(found.pins)} packages, nvcc {nvcc})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
