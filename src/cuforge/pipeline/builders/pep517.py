"""Build a wheel with one PEP 517 ``build_wheel`` call, the build command of the setuptools
and cmake kinds::

    python -m cuforge.pipeline.builders.pep517 --python ENV_PYTHON --outdir DIR [-C KEY=VALUE ...]
        [--epoch-file FILE] SRC

Why not ``pip wheel --no-build-isolation --no-deps``, which it replaces: pip first asks the
backend for the wheel's metadata (``prepare_metadata_for_build_wheel``), and for setuptools
that is one more whole ``setup.py`` run. spconv's builds its kernel tables when imported: about
12 s of each spconv build on the H200, paid by every rerun after a kill (docs/reliability.md).
Without isolation and dependencies, the wheel hook is all that pip ran besides.

``--epoch-file`` names the file the fetch wrote the source's time into (``sources.epoch_file``):
the build runs with it as ``SOURCE_DATE_EPOCH`` (``__DATE__``, the backend's zip times),
whatever the caller's environment says, so the same source gives the same wheel.

The hooks run in ``ENV_PYTHON`` (the combo env's interpreter) through pyproject_hooks, the hook
caller pip and pypa/build use, in the source dir and with this process's environment (the
shim and the build dependencies on PYTHONPATH, the arch lists). cuforge's own interpreter runs
this module; the env needs nothing more than its build backend.

The hook process ends without tearing its interpreter down (``FAST_EXIT``): after spconv's
``build_wheel`` it holds 3.5 million objects (pccm's code graph), and freeing them one by one
at exit took 10 s of each spconv build here, after the wheel was written. Its atexit handlers
still run; the exit code is the hook's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tomllib
from pathlib import Path

LEGACY = "setuptools.build_meta:__legacy__"   # PEP 517's backend for a tree without one

# Run by the env's interpreter as ``python -c FAST_EXIT HOOK_SCRIPT HOOK CONTROL_DIR``, in place
# of ``python HOOK_SCRIPT HOOK CONTROL_DIR`` (pyproject_hooks' own in-process script, unchanged,
# with the sys.path and argv it would have had). The first atexit handler registered runs
# last, after the backend's: it flushes and leaves with os._exit, which skips the teardown.
FAST_EXIT = """\
import atexit, os, runpy, sys
script = sys.argv[1]
sys.argv[:] = sys.argv[1:]
if not getattr(sys.flags, "safe_path", False):   # -c put the cwd first, a script its own dir
    sys.path[0] = os.path.dirname(script)
code = 1
def _leave():
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
atexit.register(_leave)
try:
    runpy.run_path(script, run_name="__main__")
    code = 0
except SystemExit as stop:
    code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    raise
except KeyboardInterrupt:
    code = 130
    raise
"""


def fast_exit_runner(cmd: list[str], cwd: str | None = None,
                     extra_environ: dict[str, str] | None = None) -> None:
    """pyproject_hooks' subprocess runner (its default, plus ``FAST_EXIT``)."""
    python, *script_and_args = cmd
    subprocess.run([python, "-c", FAST_EXIT, *script_and_args], cwd=cwd, check=True,
                   env={**os.environ, **(extra_environ or {})})


def backend_of(src: Path) -> tuple[str, list[str] | None]:
    """The tree's ``[build-system]`` backend and ``backend-path`` (PEP 517's defaults)."""
    pyproject = src / "pyproject.toml"
    data = tomllib.loads(pyproject.read_text()) if pyproject.is_file() else {}
    system = data.get("build-system", {})
    return system.get("build-backend", LEGACY), system.get("backend-path")


def config_settings(pairs: list[str]) -> dict[str, str | list[str]]:
    """``["a=1", "b=2", "a=3"]`` -> ``{"a": ["1", "3"], "b": "2"}``: a repeated key becomes a
    list, as pip passes ``--config-settings``.

    >>> config_settings(["a=1", "b=2", "a=3"])
    {'a': ['1', '3'], 'b': '2'}
    """
    out: dict[str, str | list[str]] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        if key not in out:
            out[key] = value
        else:
            old = out[key]
            out[key] = [*old, value] if isinstance(old, list) else [old, value]
    return out


def command(job, settings: dict[str, str] | None = None) -> list[str]:
    """This module's command line for a build job: the combo env's interpreter runs the hooks,
    cuforge's own runs this; ``settings`` (a kind's) and the recipe's ``config_settings``
    become ``-C`` options."""
    merged = {**(settings or {}), **dict(job.recipe.config_settings)}
    file = job.paths.epoch_file if job.paths else None
    epoch = ["--epoch-file", str(file)] if file else []
    return [sys.executable, "-m", "cuforge.pipeline.builders.pep517", "--python", str(job.python),
            "--outdir", str(job.out_dir), *(f"-C{k}={v}" for k, v in merged.items()), *epoch,
            str(job.src_dir)]


def source_date_epoch(path: Path) -> int | None:
    """The source's time the fetch wrote into ``path`` (seconds), None when it wrote none."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cuforge.pipeline.builders.pep517",
                                     description="one PEP 517 build_wheel call, no isolation")
    parser.add_argument("--python", required=True, help="the interpreter that runs the hooks")
    parser.add_argument("--outdir", required=True, type=Path)
    parser.add_argument("-C", "--config-setting", action="append", default=[],
                        metavar="KEY=VALUE")
    parser.add_argument("--epoch-file", type=Path, help="SOURCE_DATE_EPOCH from this file")
    parser.add_argument("src", type=Path)
    args = parser.parse_args(argv)
    if args.epoch_file:
        epoch = source_date_epoch(args.epoch_file)
        if epoch is None:
            print(f"warning: {args.epoch_file} holds no source time (not fetched by cuforge?): "
                  "SOURCE_DATE_EPOCH left as it is", file=sys.stderr)
        else:   # the hooks' process inherits it (fast_exit_runner)
            os.environ["SOURCE_DATE_EPOCH"] = str(epoch)
            print(f"SOURCE_DATE_EPOCH={epoch} (the source's time)", flush=True)
    try:
        from pyproject_hooks import BackendUnavailable, BuildBackendHookCaller
    except ImportError:   # cuforge run from a checkout without its dependencies installed
        print(f"error: {sys.executable} cannot import pyproject_hooks, a dependency of cuforge; "
              f"fix: {sys.executable} -m pip install pyproject-hooks", file=sys.stderr)
        return 1
    src = args.src.resolve()
    backend, backend_path = backend_of(src)
    args.outdir.mkdir(parents=True, exist_ok=True)
    hooks = BuildBackendHookCaller(str(src), backend, backend_path,
                                   runner=fast_exit_runner, python_executable=args.python)
    print(f"build_wheel of {src} by {backend} in {args.python}", flush=True)
    try:
        name = hooks.build_wheel(str(args.outdir.resolve()),
                                 config_settings(args.config_setting) or None)
    except BackendUnavailable as err:   # the env lacks the backend: say which
        why = next((ln for ln in reversed(err.traceback.splitlines()) if ln.strip()), "")
        print(f"error: {args.python} cannot import the build backend {backend}"
              f"{': ' + why.strip() if why else ''}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as err:   # the backend's output is above it already
        print(f"error: {backend}'s build_wheel failed (exit {err.returncode})", file=sys.stderr)
        return err.returncode or 1
    print(f"built {args.outdir / name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
