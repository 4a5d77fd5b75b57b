"""Doctor's last line: what is wrong and the first fix, or that nothing is."""

from __future__ import annotations

from rich.text import Text

from cuforge.core.console import plural

PROBLEMS = ("missing", "old")   # the words that fail doctor (of what is in use)


def verdict(problems: list[tuple[str, str]], judged: str) -> Text:
    """Doctor's last line: what is wrong and the first fix, or that nothing is.

    >>> verdict([], "3.11-cu130").plain
    'doctor: ok (3.11-cu130)'
    >>> verdict([("tetra: headers", "apt-get install libcgal-dev"), ("uv", "not found")],
    ...         "3.11-cu130").plain
    'doctor: 2 problems (3.11-cu130): tetra: headers, uv; first fix: apt-get install libcgal-dev'
    """
    if not problems:
        return Text(f"doctor: ok ({judged})", style="green")
    first = next((f for _, d in problems if (f := _fix_in(d))), "")
    return Text(f"doctor: {plural(len(problems), 'problem')} ({judged}): "
                + ", ".join(check for check, _ in problems)
                + (f"; first fix: {first}" if first else
                   f"; see the {problems[0][0]} row above"), style="bold red")


def _fix_in(detail: str) -> str:
    """The fix a row's detail names (``...; fix: X``, an error's ``fix:`` line, or a detail
    that is itself the command), else ''."""
    if "fix: " in detail:
        return detail.rsplit("fix: ", 1)[1].strip().splitlines()[0]
    return detail if detail.startswith(("apt-get install", "cuforge ", "sudo ")) else ""
