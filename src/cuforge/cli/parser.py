"""The command line's definition: every ``cuforge`` command and its options (argparse), the
exit-code table every ``--help`` ends with, and ``command_options``: the options described for
another front end (tasks.py offers each of them)."""

from __future__ import annotations

import argparse
import keyword
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from cuforge.cli.commands import (DEFAULT_ACCEL, DEFAULT_PYTHON, cmd_build, cmd_ci, cmd_clean, cmd_doctor, cmd_emulation,
                                  cmd_index, cmd_matrix, cmd_mesh_convert, cmd_patch, cmd_resolve,
                                  cmd_setup, cmd_shell, cmd_stack, cmd_verify)
from cuforge.config.arches import ArchPolicy
from cuforge.core.errors import (CLOSED_PIPE, INTERRUPTED, MissingWheelError, WheelhouseError,
                                 exit_code_table)

DESCRIPTION = ("Build, verify and publish CUDA-extension wheels per combo (python x torch x "
               "CUDA x arches); set up MILo / Pointcept checkouts with them.")


# Error kinds only some commands can end with; every other kind, any command. A command's
# --help lists only the codes it has (`build --help` named 11, which only setup --no-build
# raises). tests/integration/test_exit_codes.py holds where each of these is raised.
ONLY_IN = {
    MissingWheelError: ("setup",),                             # --no-build, a wheel missing
    WheelhouseError: ("build", "setup", "index", "verify"),    # verify: a check's verdict
}


def command_exit_codes(command: str | None) -> list[tuple[int, str]]:
    """(exit code, what it means) for ``cuforge COMMAND`` (None: any command)."""
    skipped = {kind.exit_code for kind, commands in ONLY_IN.items()
               if command is not None and command not in commands}
    return [(0, "success"), *((c, w) for c, w in exit_code_table() if c not in skipped),
            (INTERRUPTED, "interrupted (Ctrl-C, SIGTERM); nothing half-written is published"),
            (CLOSED_PIPE, "the reader of the output went away (a closed pipe); nothing more said")]


def _epilog(command: str | None = None) -> str:
    return "exit codes:\n" + "\n".join(f"  {code:<4} {what}"
                                        for code, what in command_exit_codes(command))


def make_parser() -> argparse.ArgumentParser:
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
    b.add_argument("--only", default=None, help="comma-separated packages (dependencies "
                   "follow; case and -/_ do not matter); 'all' = every recipe")
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
    _stress_args(b)
    b.add_argument("--rebuild", action="store_true",
                   help="rebuild packages whose wheel in the wheelhouse is up to date")
    b.add_argument("--full-kernels", action="store_true",
                   help="upstream's build: every kernel a recipe's [kernels] rules would leave "
                        "out (spconv: the upstream kernel set, each ConvParams in a unit of its "
                        "own); the manifest says which set. Same as --kernels full")
    _kernels_arg(b)
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
    _json_arg(b, "build")
    b.set_defaults(func=cmd_build)

    m = sub.add_parser("matrix", parents=[common],
                       help="print every combo and its build plan")
    _json_arg(m, "matrix")
    m.set_defaults(func=cmd_matrix)

    s = sub.add_parser("shell", parents=[common],
                       help="open a shell in a combo env with the build env set")
    _combo_args(s)
    s.add_argument("--print-env", action="store_true", help="print the env instead of a shell")
    s.set_defaults(func=cmd_shell)

    v = sub.add_parser("verify", parents=[common],
                       help="re-run all checks on wheels or a wheelhouse directory")
    v.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                   help="wheel files or wheelhouse directories, e.g. "
                        "wheelhouse/linux-x86_64/cu130/torch2.14.1-cp311")
    _combo_args(v)
    v.add_argument("--cuda-arch", default=None, help="arches the wheels must cover")
    _json_arg(v, "verify")
    v.add_argument("--models", action="store_true",
                   help="also run each stack's miniature model with all the wheels together")
    v.add_argument("--upstream-tests", action="store_true",
                   help="also run each recipe's [upstream_tests] suite against its wheel")
    _stress_args(v)
    v.add_argument("--ptx-jit", action="store_true",
                   help="run --stress/--sanitize on the wheels' PTX: the SASS this GPU would "
                        "pick is hidden in a copy, so the driver JIT-compiles every kernel, as "
                        "on a GPU newer than the wheel's SASS (the DGX Spark with a 12.0+PTX "
                        "build)")
    v.add_argument("--tests-src", action="append", default=[], metavar="NAME=DIR",
                   help="take NAME's suite from DIR (the tree its `path` is relative to) "
                        "instead of fetching it")
    v.set_defaults(func=cmd_verify)

    d = sub.add_parser("doctor", parents=[common],
                       help="check the machine: pythons, uv, nvcc, compilers, libraries")
    d.add_argument("--gpu-arch", default="",
                   help="rate the wheelhouses for this GPU (e.g. 12.1) instead of the local one")
    d.add_argument("--combo", default="", help="judge this combo only (default: the combos with "
                   "an env or a wheelhouse here; the others are information)")
    _json_arg(d, "doctor")
    d.set_defaults(func=cmd_doctor)

    st = sub.add_parser("setup", parents=[common],
                        help="a working venv for a research checkout (MILo, Pointcept, or any "
                             "that vendors torch extensions): wheels, patches, env vars, checks")
    st.add_argument("stack", nargs="?", default="",
                    help="milo, pointcept (stacks/*.toml); default: the checkout decides (a "
                         "known stack's checkout gets it, any other is discovered)")
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
    _kernels_arg(st)
    st.add_argument("--pinned", action="store_true",
                    help="build upstream's pinned copy of every package, not the one your "
                         "checkout holds (default: a copy of the checkout's own folder)")
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
    _stress_args(st)
    st.add_argument("--dry-run", action="store_true", help="print what setup would do; change nothing")
    _wheelhouse_arg(st)
    _json_arg(st, "setup")
    st.set_defaults(func=cmd_setup)

    sk = sub.add_parser("stack", parents=[common],
                        help="write stacks/NAME.toml from what discovery finds in a checkout "
                             "(its extensions, field fixes, requirements, entry scripts)")
    sk.add_argument("action", choices=["new"], help="new: write the stack file")
    sk.add_argument("checkout", type=Path, help="the checkout to read")
    sk.add_argument("--name", default="", help="the stack's name (default: the checkout "
                    "folder's, as a package name)")
    sk.add_argument("--force", action="store_true", help="overwrite an existing stack file")
    sk.set_defaults(func=cmd_stack)

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
    mc.set_defaults(func=cmd_mesh_convert)

    pt = sub.add_parser("patch", parents=[common],
                       help="apply runtime patches to a checkout (milo, pointcept)")
    pt.add_argument("set_name", help="patch set: milo or pointcept")
    pt.add_argument("checkout", type=Path, help="the checkout to patch")
    pt.add_argument("--check", action="store_true",
                    help="print each patch's state, change nothing; exit 5 when one "
                         "no longer matches its file")
    pt.add_argument("--revert", action="store_true", help="undo the patches this applied")
    pt.add_argument("--dry-run", action="store_true", help="say what would change; change nothing")
    pt.set_defaults(func=cmd_patch)

    ix = sub.add_parser("index", parents=[common],
                        help="write a PEP 503/691 simple index into each wheelhouse dir")
    ix.add_argument("paths", nargs="*", type=Path,
                    help="wheelhouse dirs or a wheelhouse root (default: the wheelhouse)")
    ix.set_defaults(func=cmd_index)

    ci = sub.add_parser("ci", parents=[common],
                        help="the CI build matrix / GitHub Actions workflow from envs/")
    ci.add_argument("what", choices=["matrix", "workflow"],
                    help="matrix: the matrix as JSON, one entry per combo that takes part in "
                         "CI (stderr names those with ci = false, and why); workflow: write "
                         ".github/workflows/wheels.yml")
    ci.add_argument("--check", action="store_true",
                    help="workflow: fail unless the committed file is current")
    ci.set_defaults(func=cmd_ci)

    r = sub.add_parser("resolve", parents=[common], help="check that a combo's torch + toolkit "
                       "install on its platform (uv, nothing installed)")
    _combo_args(r)
    r.add_argument("--torch", default="", help="one torch version (default: each the combo lists)")
    r.set_defaults(func=cmd_resolve)

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
    em.set_defaults(func=cmd_emulation)

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
    cl.set_defaults(func=cmd_clean)

    for name, command in sub.choices.items():   # `cuforge build --help`: build's codes
        command.epilog = _epilog(name)
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
    metavar: str = ""   # the value's name in --help (NAME=PATH, DIR), where the CLI gives one

    @property
    def task_default(self):
        return False if self.switch else None

    def argv(self, value) -> list[str]:
        """The command-line words for ``value`` (none for an unset one; an empty one is
        passed on, for the CLI to judge: ``invoke build --only ''`` is refused as the CLI
        refuses it, not taken as "not given")."""
        if self.switch:
            return [self.flag] if value else []
        if self.many:
            return [w for v in value or () for w in (self.flag, str(v))]
        return [] if value is None else [self.flag, str(value)]


def _subcommand(command: str) -> argparse.ArgumentParser:
    sub = next(a for a in make_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


def _described(action: argparse.Action, flag: str) -> CommandOption:
    name = flag.lstrip("-").replace("-", "_")
    switch = action.nargs == 0
    many = isinstance(action, argparse._AppendAction) or action.nargs in ("+", "*")
    return CommandOption(flag, name + "_" if keyword.iskeyword(name) else name, switch, many,
                         bool(action.required) or action.nargs == "+", action.help or "",
                         "" if switch else str(action.metavar or ""))


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


def _json_arg(p: argparse.ArgumentParser, command: str) -> None:
    p.add_argument("--json", action="store_true",
                   help="one JSON document on stdout (docs/json.md), the text on stderr; an "
                        "error too, with the same exit code")
    p.set_defaults(json_command=command)


def _wheelhouse_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wheelhouse", type=Path, default=None, metavar="DIR",
                   help="the wheelhouse root (wheels land in DIR/<platform>/<accel>/"
                        "torch<V>-cp<XY>/); default: $CUFORGE_WHEELHOUSE, else wheelhouse/")


def _combo_args(p: argparse.ArgumentParser) -> None:
    # None: not given (the defaults are applied in commands._combo, where a --combo that
    # names another python or accel is refused)
    p.add_argument("--python", default=None, help="python version of the combo (default: "
                   f"{DEFAULT_PYTHON})")
    p.add_argument("--accel", default=None, help="accelerator tag (cu128, cu129, cu130; "
                   f"default: {DEFAULT_ACCEL})")
    p.add_argument("--combo", default="", help="a combo by name (e.g. 3.12-cu130, h200), "
                   "instead of --python and --accel")
    p.add_argument("--interpreter", default="",
                   help="use this existing Python (with torch) instead of a venv")


def _kernels_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernels", default=None, metavar="SET",
                   help="which kernel set a [kernels] recipe (spconv) builds: lean (its "
                        "default: without what its tuner never picks on the target arches), "
                        "full, or a narrower set the recipe names (spconv: 3d, the 3-D sparse "
                        "ops only, all Pointcept uses); the manifest says which")


def _stress_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stress", action="store_true",
                   help="also run each recipe's [stress]: its GPU path repeated with every result "
                        "checked (minutes; spconv's is sized to see a 1e-4 per-call fault)")
    p.add_argument("--sanitize", action="store_true",
                   help="also run each [stress] short under compute-sanitizer memcheck (0 errors "
                        "required; the toolkit's compute-sanitizer, else the accel's PyPI one, "
                        "unpacked once; CUFORGE_COMPUTE_SANITIZER names another)")
