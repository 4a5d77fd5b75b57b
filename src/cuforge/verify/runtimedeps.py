"""What verification installs into the combo env before importing a wheel: the wheel's own
``Requires-Dist`` (so the import sees what a user's ``pip install`` sees), minus what must never
come from an index: torch (the combo's build) and any package that has a recipe (those come from
the wheelhouse; spconv's metadata asks for ``cumm-cu130<0.8.0``). torch is also pinned on the
same ``pip install`` line, so a transitive requirement cannot replace it either: pip fails
instead. What was installed goes to the package's log and its manifest line."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from cuforge.core.runner import Step

_CUDA_SUFFIX = re.compile(r"-cu\d+$")   # cumm-cu130 is cumm


def base_name(requirement_or_name: str) -> str:
    """``"cumm-cu130<0.8.0"`` -> ``"cumm"``; ``"Torch_Scatter"`` -> ``"torch-scatter"``."""
    try:
        name = Requirement(requirement_or_name).name
    except Exception:   # a bare name that is not a valid requirement string
        name = requirement_or_name
    return _CUDA_SUFFIX.sub("", canonicalize_name(name))


def split(requirements: Iterable[str], protected: Iterable[str]) -> tuple[list[str], list[str]]:
    """(to install, left out): a requirement on torch or on a protected package is left out.

    >>> split(["scipy", "torch>=2", "cumm-cu130<0.8.0"], ["cumm", "spconv"])
    (['scipy'], ['torch>=2', 'cumm-cu130<0.8.0'])
    """
    keep = {base_name(p) for p in protected} | {"torch"}
    install, left = [], []
    for req in requirements:
        (left if base_name(req) in keep else install).append(req)
    return install, left


def install_step(python: Path, wheel: str, requirements: list[str], torch_version: str,
                 env: tuple[tuple[str, str], ...] = ()) -> Step:
    """``pip install REQS torch==<the env's torch>``: torch already satisfies its own pin, and a
    dependency that wants another torch makes pip fail rather than swap it. The public version
    (``2.14.1``, not ``2.14.1+cu130``): it matches the installed local build, and a machine-wide
    pip constraint such as ``torch<=2.14.1`` does not exclude it."""
    return Step((str(python), "-m", "pip", "install", "--disable-pip-version-check",
                 *requirements, f"torch=={torch_version}"), env,
                description=f"runtime requirements of {wheel} (torch stays {torch_version})")
