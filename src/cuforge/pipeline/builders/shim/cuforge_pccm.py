"""pccm's code generation, done once per build dir while its inputs stay the same.

pccm-based packages (spconv, cumm) generate their C++ in ``build_ext``: ``PCCMBuild`` calls
``pccm.builder.build_pybind``, which builds pccm's code graph, writes the sources (only those
whose text changed) and hands them to ``ccimport.ccimport``, which writes build.ninja and runs
ninja. The graph and the text are rebuilt on every run, also when nothing changed: ~12 s of
each spconv build here, paid again by the rerun of a killed build before ninja resumes.

Here ``build_pybind`` saves what it hands to ccimport, next to its output, under a key of
everything the generation reads: its arguments, every loaded module's file, the source tree's
files, and the environment. A later call with the same key and every generated source still
on disk calls ccimport with the saved arguments at once; ninja then decides, as before. The
save is written before ninja starts, so a build killed while compiling resumes without
generating again. On spconv's real tree here, a rebuild with nothing to compile went from
27.8 s to 15.7 s, and the wheel's files were byte for byte the same.
``CUFORGE_PCCM_REGENERATE=1`` generates anyway.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
from pathlib import Path

SUFFIX = ".cuforge-generated"   # next to build_pybind's out_path, in the package's build dir
PER_RUN = {"CUFORGE_SLOTS"}   # the compile-slot pool of this run (a new FIFO each run)
OUTPUTS = {"build", "dist", ".git", ".cuforge-patches"}   # in the tree, but no input


def patch(builder) -> None:
    """Wrap ``builder.build_pybind`` (``pccm.builder``, right after it is imported)."""
    import ccimport

    real_build = builder.build_pybind
    if getattr(real_build, "_cuforge", False):
        return

    def build_pybind(cus, out_path, *args, **kwargs):
        saved_at = Path(f"{out_path}{SUFFIX}")
        key = _key(out_path, args, kwargs)
        saved = None if os.environ.get("CUFORGE_PCCM_REGENERATE") == "1" else _load(saved_at, key)
        if saved is not None:
            print(f"cuforge: pccm's generated code in {Path(out_path).parent} is the last run's "
                  "(same inputs); not generating it again", flush=True)
            return ccimport.ccimport(*saved[0], **saved[1])
        real_ccimport = ccimport.ccimport

        def save_then_build(*c_args, **c_kwargs):
            _save(saved_at, key, (c_args, c_kwargs))
            return real_ccimport(*c_args, **c_kwargs)

        ccimport.ccimport = save_then_build
        try:
            return real_build(cus, out_path, *args, **kwargs)
        finally:
            ccimport.ccimport = real_ccimport

    build_pybind._cuforge = True
    builder.build_pybind = build_pybind


def _key(out_path, args: tuple, kwargs: dict) -> str:
    """What the generation reads, besides the code units (built by those modules from that
    environment): its arguments (object reprs left out: they hold addresses), every loaded
    module's file, the source tree's files (setup.py, version.txt, ...), the environment.
    Python files and the tree's files count by their text (spconv's setup.py rewrites
    spconv/__version__.py on every run, same text), other loaded files by size and time;
    cuforge's per-run plumbing is no input."""
    tree = _tree_files(Path.cwd())
    files = {getattr(m, "__file__", None) for m in list(sys.modules.values())} - set(tree)
    parts = [repr((str(out_path), args, sorted(kwargs.items())))]
    parts += [f"{name} {_digest(name)}" for name in tree]
    parts += [f"{name} {_identity(name)}"
              for name in sorted(f for f in files if isinstance(f, str))]
    parts += [f"{k}={v}" for k, v in sorted(os.environ.items()) if k not in PER_RUN]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _tree_files(root: Path) -> list[str]:
    """The source tree's files, outputs left out (``build/``, ``*.egg-info``, ...)."""
    found = []
    for top, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in OUTPUTS and not d.endswith(".egg-info"))
        found += [os.path.join(top, n) for n in sorted(names)]
    return found


def _digest(name: str) -> str:
    try:
        with open(name, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return "-"


def _identity(name: str) -> str:
    if name.endswith(".py"):
        return _digest(name)
    try:
        stat = os.stat(name)
    except OSError:
        return "-"
    return f"{stat.st_size} {stat.st_mtime_ns}"


def _load(path: Path, key: str):
    """The saved ccimport arguments for ``key``, or None (none, another key, a generated
    source gone, or unreadable)."""
    try:
        with open(path, "rb") as f:
            saved = pickle.load(f)
        if saved["key"] != key:
            return None
        c_args, c_kwargs = saved["call"]
        sources = c_args[0] if c_args else c_kwargs["source_paths"]
        if not all(Path(p).is_file() for p in sources):
            return None
        return c_args, c_kwargs
    except Exception:   # a save from another pccm, or cut short: generate again
        return None


def _save(path: Path, key: str, call: tuple) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        pickle.dump({"key": key, "call": call}, f)
    os.replace(tmp, path)   # whole or absent: a kill never leaves half a save
