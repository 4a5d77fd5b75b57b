"""Command line: ``cuforge build|matrix|shell|verify|doctor|setup|patch|index|ci|resolve|...``.
nox sessions and invoke tasks call this; it is also what runs on machines without nox/invoke
(``python -m cuforge``). ``parser`` defines the commands and their options (and describes them
to tasks.py), ``commands`` turns each parsed command into the typed request of the layer below.

Errors are printed once, here, as a message and an exit code; ``CUFORGE_DEBUG=1`` shows the
traceback. A reader that goes away (``cuforge matrix | head``) ends the command quietly.
"""

from __future__ import annotations

import os
import signal
import sys

from cuforge.cli.parser import make_parser
from cuforge.core import jsonout
from cuforge.core.console import QUIET, make_console, print_error
from cuforge.core.errors import CLOSED_PIPE, INTERRUPTED, ConfigError, CuforgeError

err_console = make_console(stderr=True)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt   # SIGTERM unwinds like Ctrl-C: running compilers are stopped


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _interrupt)
    parser = make_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return ConfigError.exit_code   # no command: a usage error
    if args.quiet:
        os.environ[QUIET] = "1"   # read by every console made from here on (and children)
    if getattr(args, "json", False):
        return _with_json(args)
    return _run(args)


def _run(args, failure: list[BaseException] | None = None) -> int:
    """The command's exit code; its error printed once, and kept in ``failure`` (--json)."""
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        return _closed_pipe()
    except CuforgeError as err:
        if os.environ.get("CUFORGE_DEBUG"):
            raise
        print_error(err_console, err.label, str(err))
        if failure is not None:
            failure.append(err)
        return err.exit_code
    except KeyboardInterrupt as err:   # runner.Interrupted says which command was stopped
        if failure is not None:
            failure.append(err)
        err_console.print(f"cuforge: interrupted{f' ({err})' if str(err) else ''}; nothing "
                          "half-written was published", markup=False, highlight=False)
        return INTERRUPTED


def _with_json(args) -> int:
    """``--json``: the command's text goes to stderr, and stdout gets one document, an error
    included (its object under ``error``; the exit code is the same as without --json)."""
    with jsonout.capture() as stdout:
        failure: list[BaseException] = []
        code = _run(args, failure)
        if code == CLOSED_PIPE:
            return code
        error = jsonout.error_object(failure[0], code) if failure else None
        try:
            jsonout.write(stdout, jsonout.document(args.json_command, jsonout.fields(),
                                                   exit_code=code, error=error))
        except BrokenPipeError:
            return _closed_pipe()
    return code


def _closed_pipe() -> int:
    """The reader of stdout is gone: say nothing more. stdout now points at /dev/null, so the
    interpreter's last flush at exit cannot raise again (Python's documented recipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return CLOSED_PIPE


if __name__ == "__main__":
    sys.exit(main())
