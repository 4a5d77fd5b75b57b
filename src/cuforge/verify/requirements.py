"""Which requirements an interpreter already meets: one interpreter start that reads the
installed versions (``importlib.metadata``), judged here with ``packaging``. Every "install
what is missing" in cuforge asks this first, because pip's resolver takes seconds even when
everything is there (seconds of every spconv build on the H200, for its runtime requirements).

Only the named distributions are looked at, not their own dependencies: a missing transitive
dependency shows up in the import check, with its name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from cuforge.verify._proc import run_python

_VERSIONS = """
import json, sys
from importlib.metadata import PackageNotFoundError, version
def installed(name):
    try:
        return version(name)
    except PackageNotFoundError:
        return None
print("cuforge-versions:" + json.dumps({name: installed(name) for name in sys.argv[1:]}))
"""


def installed_versions(python: Path, names: Sequence[str], paths: Sequence[Path] = (),
                       env: Mapping[str, str] | None = None
                       ) -> dict[str, str | None]:
    """``{name: version or None}`` as ``python`` (with ``paths`` first on sys.path) sees them.
    An interpreter that cannot answer reports every name as missing."""
    try:
        outcome = run_python(python, ["-c", _VERSIONS, *names], paths=paths, timeout=120,
                             env=env)
    except OSError:   # no such interpreter: pip, run next, names the problem
        return dict.fromkeys(names)
    line = next((ln for ln in outcome.stdout.splitlines() if ln.startswith("cuforge-versions:")),
                "cuforge-versions:{}")
    found = json.loads(line.removeprefix("cuforge-versions:"))
    return {name: found.get(name) for name in names}


def unmet(python: Path, requirements: Sequence[str], paths: Sequence[Path] = (), *,
          env: Mapping[str, str] | None = None) -> list[str]:
    """The ``requirements`` (as given) that ``python`` does not satisfy: not installed, or at a
    version outside the specifier (a local build, ``2.11.0+cu130``, meets ``==2.11.0``).

    >>> unmet(Path("/nonexistent/python"), [])
    []
    """
    if not requirements:
        return []
    parsed = [(text, Requirement(text)) for text in requirements]
    have = installed_versions(python, sorted({canonicalize_name(r.name) for _, r in parsed}),
                              paths, env)
    return [text for text, req in parsed
            if (version := have.get(canonicalize_name(req.name))) is None
            or not req.specifier.contains(version, prereleases=True)]
