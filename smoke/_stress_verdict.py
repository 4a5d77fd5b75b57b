"""The stress scripts' last lines, in the smoke protocol (the last line says why; exit 0 pass,
1 fail): the first failures seen, then one verdict line.

>>> verdict(40, 0, [], "GPU X")
pass: 40 calls, 0 failures on GPU X
0
"""

from __future__ import annotations

import sys


def verdict(calls: int, failures: int, seen: list[str], device: str, *, sections: int = 1,
            which: str = "") -> int:
    """Print the failures ``seen`` and the verdict over ``calls``; ``which`` names the failing
    sections for the fail line. Returns the exit code."""
    if failures:
        print("\n".join(seen), file=sys.stderr)
        print(f"fail: {failures} wrong results in {calls} calls{which}", file=sys.stderr)
        return 1
    where = f" in {sections} sections" if sections > 1 else ""
    print(f"pass: {calls} calls{where}, 0 failures on {device}")
    return 0
