"""Prebuilt wheels fail closed: a downloaded wheel is used only when its sha256 is one the
recipe pins. Run as a build step (``python -m cuforge.publish.pins DIR SHA256...``) right after the
download, so ``--dry-run`` shows it and nothing downstream ever sees an unpinned file."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from cuforge.core.digest import sha256_of
from cuforge.core.errors import SourceError


def check(directory: Path, pins: Sequence[str]) -> Path:
    """The one wheel in ``directory``, if its sha256 is in ``pins``; else SourceError (and the
    file is deleted, so no later step can pick it up)."""
    wheels = sorted(directory.glob("*.whl"))
    if len(wheels) != 1:
        raise SourceError(f"expected one downloaded wheel in {directory}, found {len(wheels)}")
    wheel = wheels[0]
    digest = sha256_of(wheel)
    if digest not in pins:
        wheel.unlink()
        raise SourceError(
            f"{wheel.name} has sha256 {digest}, which the recipe does not pin "
            f"(pinned: {', '.join(pins) or 'nothing'})",
            hint="if the index really publishes a new file for this version, check it and add "
            "its sha256 to the recipe's [prebuilt] sha256 list")
    return wheel


def main(argv: list[str]) -> int:
    directory, *pins = argv
    try:
        wheel = check(Path(directory), pins)
    except SourceError as err:
        print(f"cuforge: {err.label}: {err}", file=sys.stderr)
        return err.exit_code
    print(f"{wheel.name}: sha256 pinned by the recipe")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
