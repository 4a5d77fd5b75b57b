"""Names a person types: a package, a stack or a combo given as ``simple_knn``, ``Pointcept``
or ``spconvv``. Case and ``-``/``_``/``.`` do not matter (PEP 503's rule, as pip and uv
match project names); a name that matches nothing gets a "did you mean" (difflib), as cargo
and git answer a typo.

>>> match("simple_knn", ["simple-knn", "spconv"])
'simple-knn'
>>> match("Pointcept", ["milo", "pointcept"])
'pointcept'
>>> match("spconvv", ["simple-knn", "spconv"]) is None
True
>>> did_you_mean("spconvv", ["simple-knn", "spconv"])
' (did you mean spconv?)'
>>> as_known(["Simple_KNN", "spconvv"], ["simple-knn", "spconv"])
(['simple-knn', 'spconvv'], ' (did you mean spconv?)')
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable


def canonical(name: str) -> str:
    """``Diff_Gaussian.Rasterization`` -> ``diff-gaussian-rasterization``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def match(given: str, known: Iterable[str]) -> str | None:
    """The known name ``given`` stands for, or None."""
    by_form = {canonical(k): k for k in known}
    return by_form.get(canonical(given))


def did_you_mean(given: str, known: Iterable[str]) -> str:
    """`` (did you mean X?)`` for the closest known names, or "" when none is close."""
    by_form = {canonical(k): k for k in known}
    close = difflib.get_close_matches(canonical(given), list(by_form), n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(by_form[c] for c in close)}?)" if close else ""


def as_known(given: list[str], known: Iterable[str]) -> tuple[list[str], str]:
    """Each name as known (an unknown one as given), and the "did you mean" of the first
    unknown one ("" when all are known or none is close): one call for a caller that
    resolves a list and refuses what is left."""
    known = list(known)
    names = [match(g, known) or g for g in given]
    unknown = [n for n in names if n not in known]
    return names, did_you_mean(unknown[0], known) if unknown else ""
