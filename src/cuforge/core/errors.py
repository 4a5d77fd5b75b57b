"""One error hierarchy: each kind has its own exit code and a message written for a person.

Errors are raised deep in the library and printed once, at the CLI boundary, without a traceback
(set ``CUFORGE_DEBUG=1`` to see one). Every exit code a command ends with comes from here: an
error kind's ``exit_code``, or one of the two signal codes below (a test greps for literals).
"""

from __future__ import annotations

import signal

# Not errors, yet codes a command ends with: the shell's convention, 128 + the signal
INTERRUPTED = 128 + signal.SIGINT    # 130: Ctrl-C or SIGTERM; nothing half-written published
CLOSED_PIPE = 128 + signal.SIGPIPE   # 141: the reader of our output is gone


class CuforgeError(Exception):
    """Base class: ``str(err)`` is the whole message shown to the user; ``summary`` is the
    same in one line, for a reason shown inside another line (a refused wheel): its first
    line unless the raiser says better (the runner names the cause from the output's tail)."""

    exit_code = 1
    label = "error"
    returncode: int | None = None   # the failed command's exit status, where one failed

    def __init__(self, message: str, *, hint: str | None = None,
                 summary: str | None = None) -> None:
        self.hint = hint
        self.summary = summary or message.strip().split("\n", 1)[0]
        super().__init__(message if hint is None else f"{message}\n  fix: {hint}")


class ConfigError(CuforgeError):
    """A combo, recipe, arch string or command-line option is wrong (a usage error too)."""

    exit_code = 2
    label = "configuration error"


class ToolchainError(CuforgeError):
    """A compiler, CUDA toolkit, interpreter or system library is missing or unusable."""

    exit_code = 3
    label = "toolchain error"


class SourceError(CuforgeError):
    """A source could not be fetched, or its checksum does not match."""

    exit_code = 4
    label = "source error"


class PatchError(CuforgeError):
    """A patch no longer matches the upstream file it targets."""

    exit_code = 5
    label = "patch error"


class BuildError(CuforgeError):
    """A package failed to compile (a build ends with it when any package failed)."""

    exit_code = 6
    label = "build error"


class VerifyError(CuforgeError):
    """A built or prebuilt wheel failed a verification check."""

    exit_code = 7
    label = "verification failed"


class NothingToDo(CuforgeError):
    """The request selects no package or combo."""

    exit_code = 8
    label = "nothing to do"


class WheelhouseError(CuforgeError):
    """The wheelhouse could not be written (read-only, not ours, a full disk, a file-size limit)."""

    exit_code = 9
    label = "wheelhouse error"


class EnvError(CuforgeError):
    """A virtual environment could not be created, or packages not installed into it."""

    exit_code = 10
    label = "environment error"


class MissingWheelError(CuforgeError):
    """A wheel the command needs is not in the wheelhouse (nothing builds it: --no-build)."""

    exit_code = 11
    label = "missing wheel"


def exit_code_table() -> list[tuple[int, str]]:
    """(exit code, what it means) for each error kind, in code order: the CLI's ``--help`` and
    docs/how-it-works.md show this table (a test compares the docs with it)."""
    kinds = [CuforgeError, *CuforgeError.__subclasses__()]
    rows = []
    for kind in kinds:
        first = " ".join(kind.__doc__.split("\n\n")[0].split()).rstrip(".")
        rows.append((kind.exit_code, "any other error" if kind is CuforgeError
                     else first[0].lower() + first[1:]))
    return sorted(rows)
