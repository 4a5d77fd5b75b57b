"""invoke tasks for the workstation: build, build-env, matrix, shell, verify, doctor, setup,
stack-new, mesh-convert, patch-milo, patch-pointcept, index, resolve, ci-matrix, ci-workflow.

Each task is a ``cuforge`` command, and its options are read from the CLI's own parser
(``cuforge.cli.parser.command_options``): a flag exists in both or in neither. ``invoke --help X``
shows the CLI's help text for each option, and the CLI's name for its value (``--src=NAME=PATH``).
"""

from __future__ import annotations

import subprocess
import sys
from inspect import Parameter, Signature

from invoke import Collection, Task
from invoke.exceptions import Exit
from invoke.parser import ParserContext

from cuforge.cli.parser import command_options, command_positionals


def _cuforge(*args: str) -> None:
    """Run the CLI on this terminal or pipe itself, not through invoke's output threads: a
    closed pipe (`invoke matrix | head`) is then cuforge's to handle quietly, and its exit
    code is the task's."""
    code = subprocess.call([sys.executable, "-m", "cuforge", *args])
    if code:
        raise Exit(code=code)


class CliTask(Task):
    """A task whose options take the CLI's value names into ``invoke --help X``."""

    def __init__(self, body, *, metavars: dict[str, str], **kw) -> None:
        super().__init__(body, **kw)
        self.metavars = metavars   # task parameter -> the value's name (NAME=PATH, DIR)

    def get_arguments(self, ignore_unknown_help=None):
        args = super().get_arguments(ignore_unknown_help)
        for arg in args:
            if arg.name in self.metavars:
                arg.metavar = self.metavars[arg.name]   # read by _help_for
        return args


_invoke_help_for = ParserContext.help_for


def _help_for(context: ParserContext, flag: str) -> tuple[str, str]:
    """invoke shows an iterable option as a bare flag (``--src``, as if it took no value) and
    every value as STRING; an option of ours shows the CLI's value name instead
    (``--src=NAME=PATH``). Options of other tasks are shown as invoke shows them."""
    names, text = _invoke_help_for(context, flag)
    metavar = getattr(context.flags[flag], "metavar", None)
    if metavar:
        names = ", ".join(n.split("=")[0] + f"={metavar}" for n in names.split(", "))
    return names, text


ParserContext.help_for = _help_for


def cli_task(name: str, command: str, doc: str, *, fixed: tuple[str, ...] = (),
             positional: dict[str, str] | None = None, leave_out: tuple[str, ...] = ()) -> Task:
    """The task ``name`` that runs ``cuforge COMMAND [FIXED...]``. ``positional``: the
    command's positional arguments by the task parameter that carries them (several values
    comma-separated); ``leave_out``: options the task sets itself (in ``fixed``)."""
    positional = positional or {}
    options = [o for o in command_options(command)
               if o.flag not in leave_out and o.flag not in fixed]

    def body(c, **given):
        argv = [*command.split(), *fixed]
        for dest, param in positional.items():
            value = given.get(param)
            if value:
                argv += value.split(",") if _variadic(command, dest) else [value]
        for option in options:
            argv += option.argv(given.get(option.param))
        _cuforge(*argv)

    params = [Parameter("c", Parameter.POSITIONAL_OR_KEYWORD)]
    params += [Parameter(p, Parameter.POSITIONAL_OR_KEYWORD,
                         default=Parameter.empty if _required(command, d) else "")
               for d, p in positional.items()]
    params += [Parameter(o.param, Parameter.POSITIONAL_OR_KEYWORD, default=o.task_default)
               for o in options]
    body.__signature__ = Signature(params)   # what invoke reads its options from
    body.__doc__ = doc
    body.__name__ = name.replace("-", "_")
    # long flags only: invoke's own short letters would differ from the CLI's
    return CliTask(body, name=name, positional=list(positional.values()), auto_shortflags=False,
                   iterable=[o.param for o in options if o.many],
                   help={o.param: _help(o) for o in options if o.help},
                   metavars={o.param: _metavar(o) for o in options
                             if not o.switch and (o.metavar or o.many)})


WIDE = 24   # a longer value name (--cache's) goes into the help text: the column stays narrow


def _metavar(option) -> str:
    return "SPEC" if len(option.metavar) > WIDE else option.metavar or "VALUE"


def _help(option) -> str:
    wide = f"{option.metavar}: " if len(option.metavar) > WIDE else ""
    return wide + option.help + (" (repeatable)" if option.many else "")


def _variadic(command: str, dest: str) -> bool:
    return command_positionals(command)[dest].many


def _required(command: str, dest: str) -> bool:
    return command_positionals(command)[dest].required


ns = Collection(
    cli_task("build", "build", "Build, verify and publish wheels for one combo (same as "
             "`nox -s build-<py>-<accel>`)."),
    cli_task("matrix", "matrix", "Print every combo: torch, CUDA toolkit, default arches, "
             "packages in build order."),
    cli_task("shell", "shell", "Open a shell in a combo's env with the build environment set."),
    cli_task("build-env", "shell", "Create (or reuse) a combo's build env without building "
             "anything; print its variables.", fixed=("--print-env",)),
    cli_task("verify", "verify", "Re-run all checks (ABI, symbols, fatbin, import, smoke) on "
             "wheels, against a combo.", positional={"paths": "paths"}),
    cli_task("doctor", "doctor", "Check the machine, and how this GPU runs each wheelhouse "
             "package (native, PTX, none).\n\nGPU + driver, memory/jobs, tools, combos, system "
             "headers; then per package whether this GPU runs it natively, by PTX JIT, or not "
             "at all."),
    cli_task("setup", "setup", "A working venv for a research checkout (`invoke setup "
             "--checkout ~/gaussian-splatting`, `invoke setup milo --checkout ~/MILo`).\n\n"
             "Builds/installs the stack's wheels (any other checkout: the torch extensions "
             "found in it), patches the checkout, writes its env vars into the venv's "
             "activation, and runs the model check.", positional={"stack": "stack"}),
    cli_task("stack-new", "stack", "Write stacks/NAME.toml from what discovery finds in a "
             "checkout (`invoke stack-new --checkout ~/gaussian-splatting`): its extensions, "
             "field fixes, requirements and entry scripts.", fixed=("new",),
             positional={"checkout": "checkout"}),
    cli_task("mesh-convert", "mesh-convert", "Clean a mesh and write PLY + OBJ + GLB (needs "
             "the mesh extra: pip install 'cuforge[mesh]')."),
    cli_task("patch-milo", "patch", "Apply cuforge's runtime patches to a MILo checkout "
             "(idempotent; --check, --revert).", fixed=("milo",),
             positional={"checkout": "milo"}),
    cli_task("patch-pointcept", "patch", "Apply cuforge's runtime patches to a Pointcept "
             "checkout (NumPy 2, spconv algo switch).", fixed=("pointcept",),
             positional={"checkout": "pointcept"}),
    cli_task("index", "index", "Write a PEP 503/691 simple index into each wheelhouse dir "
             "(docs/package-index.md).", positional={"paths": "paths"}),
    cli_task("resolve", "resolve", "Check that a combo's torch + CUDA toolkit install on its "
             "platform (uv; installs nothing)."),
    cli_task("ci-matrix", "ci", "The CI matrix as JSON: one entry per combo that takes part "
             "in CI, with the stacks' packages in build order (combos with `ci = false` in "
             "envs/combos.toml are tied to one machine: stderr names them and why).",
             fixed=("matrix",), leave_out=("--check",)),
    cli_task("ci-workflow", "ci", "Regenerate .github/workflows/wheels.yml from envs/, stacks/, "
             "recipes/ and smoke/.", fixed=("workflow",)),
)
