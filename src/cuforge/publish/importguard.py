"""The import guard cuforge writes into a published wheel that links torch: the one place where
what pins cannot stop (torch swapped after the install, by a command that installs torch alone;
docs/package-index.md) is refused, with one line naming both builds.

The wheel's package is upstream's code, so the guard does not touch it. It is a module of its
own, ``_cuforge_guard_<dist>.py``, and a ``_cuforge_guard_<dist>.pth`` that imports it, the
mechanism editable installs use for their finders: site runs the line at start-up, which puts a
finder first on ``sys.meta_path``. The finder does nothing until one of the wheel's own
top-level modules is imported; then it reads torch's *metadata* (no ``import torch``: a
millisecond) and raises ImportError when that torch is another version or build than the one
the wheel was compiled against. Verification imports the unpacked wheel without site, so there
the guard runs only as the module it also is. Its refusal is one line, e.g. ``cuforge-demo
0.1.0+cu130torch2.14.1 was built for torch 2.14.1 (cu130), but this environment has torch
2.14.1+cu126 (cu126): install torch 2.14.1 (cu130), or a build of it for torch 2.14.1+cu126``
(tests/integration/test_torch_build_pins.py reads it beside another torch).

>>> module_name("cuforge-demo")
'_cuforge_guard_cuforge_demo'
>>> top_level_names(["demo/__init__.py", "demo_ext.abi3.so", "demo-0.1.dist-info/RECORD",
...                  "_cuforge_guard_demo.py"])
['demo', 'demo_ext']
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# The guard itself, as written into the wheel: standard library only (the env may have nothing
# else), no torch import, a set lookup per import until one of NAMES is imported.
_SOURCE = '''"""Written by cuforge into {what}: refuses its import beside another build of torch
than the one it was compiled against (cuforge's docs/package-index.md)."""
import sys

NAMES = frozenset({names!r})   # the wheel's top-level modules
TORCH = {torch!r}              # the torch version it was built against (public part)
LABELS = frozenset({labels!r}) # the builds of it that are that build ("" = the plain version)
CUDA = {cuda!r}                # that build's CUDA ("cu130"; "" = unknown)
WHAT = {what!r}
RUNTIME = r"^(cuda-toolkit|nvidia-cuda-runtime(-cu\\d+)?)\\b[^;]*==\\s*(\\d+)\\.(\\d+)"


def refusal():
    """None, or the line that says why this torch is not the one (metadata only; imported
    here, not at interpreter start)."""
    import re
    from importlib import metadata
    try:
        torch = metadata.distribution("torch")
    except metadata.PackageNotFoundError:
        return None                       # the package's own `import torch` says so
    version = torch.version
    public, _, label = version.partition("+")
    runtimes = [m for line in torch.requires or () if "extra ==" not in line
                for m in [re.match(RUNTIME, line)] if m]
    cuda = label if label.startswith("cu") else (
        f"cu{{runtimes[0][3]}}{{runtimes[0][4]}}" if runtimes else label)
    if public == TORCH and label in LABELS and not (CUDA and cuda and cuda != CUDA):
        return None
    return (f"{{WHAT}} was built for torch {{TORCH}} ({{CUDA or 'its build'}}), but this "
            f"environment has torch {{version}} ({{cuda or 'no CUDA runtime'}}): install torch "
            f"{{TORCH}} ({{CUDA or 'its build'}}), or a build of it for torch {{version}}")


class Guard:
    checked = False

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if not cls.checked and name in NAMES:
            why = refusal()
            if why:
                raise ImportError(why)
            cls.checked = True
        return None                       # never finds anything itself


if Guard not in sys.meta_path:
    sys.meta_path.insert(0, Guard)
'''


def module_name(dist: str) -> str:
    """``_cuforge_guard_cuforge_demo`` for the distribution ``cuforge-demo``."""
    return "_cuforge_guard_" + re.sub(r"[^A-Za-z0-9]+", "_", dist).lower()


def top_level_names(archive_names: Iterable[str]) -> list[str]:
    """The importable top-level names of a wheel's files (packages, ``.py`` and extension
    modules), not its ``.dist-info``/``.data`` nor a guard."""
    names = set()
    for arc in archive_names:
        first, slash, _ = arc.partition("/")
        if first.endswith((".dist-info", ".data")) or first.startswith("_cuforge_guard_"):
            continue
        if slash:
            names.add(first)                                  # a package
        elif first.endswith(".py") or re.search(r"\.so(\.\d+)*$", first):
            names.add(first.split(".", 1)[0])                 # a module
    return sorted(n for n in names if n.isidentifier())


def files(dist: str, what: str, names: list[str], torch: str, labels: list[str],
          cuda: str) -> dict[str, bytes]:
    """The guard's two files, by archive path, for a wheel of ``dist`` (``what``: its name and
    version) whose top-level modules are ``names``, built against torch ``torch`` whose
    accepted builds are ``labels`` (``""``: the plain version) and whose CUDA is ``cuda``."""
    module = module_name(dist)
    source = _SOURCE.format(what=what, names=sorted(names), torch=torch, labels=sorted(labels),
                            cuda=cuda)
    return {f"{module}.py": source.encode(), f"{module}.pth": f"import {module}\n".encode()}
