"""nox sessions: one ``build-<python>-<accel>`` per combo in envs/, plus ``tests``.

Sessions only declare; the machinery is the ``cuforge`` package. Each session installs cuforge
into its own small venv, and cuforge then creates (once) and reuses the combo's uv venv with
torch and the CUDA toolchain under ``.cuforge/envs/``.

    nox -l
    nox -s build-3.12-cu130 -- --only simple-knn --cuda-arch "12.0;12.1+PTX" -v

A session that runs cuforge ends nox with cuforge's own exit code (2 for a bad option, 6 for
a failed build, ...; `cuforge --help` lists them), not nox's 1 for every failure; the
sessions after it do not run.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import nox
from nox.command import CommandFailed

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["tests"]
ROOT = Path(__file__).parent


def _combo_ids() -> list[str]:
    """The combos as cuforge reads them (its loader, its checks): a TOML syntax error or a
    combo without ``accel`` prints cuforge's one-line error and exits 2, not a traceback.
    Without cuforge importable (nox alone), envs/combos.toml is read directly."""
    try:
        from cuforge.config.combos import load_combos
        from cuforge.core.errors import CuforgeError
        from cuforge.core.project import find_project
    except ImportError:
        data = tomllib.loads((ROOT / "envs" / "combos.toml").read_text())
        return [c.get("name") or f"{c['python']}-{c['accel']}" for c in data.get("combo", [])]
    try:
        return [c.id for c in load_combos(find_project(root=ROOT))]
    except CuforgeError as err:
        print(f"cuforge: {err.label}: {err}", file=sys.stderr)
        raise SystemExit(err.exit_code) from None


def _cuforge(session: nox.Session, *args: str) -> None:
    """``cuforge ARGS`` in the session; its failure ends nox with cuforge's exit code (nox
    itself would exit 1 for any failed command)."""
    try:
        session.run("cuforge", *args)
    except CommandFailed as err:
        raise SystemExit(err.return_code or 1) from None


def _make_build_session(combo_id: str) -> None:
    def build(session: nox.Session) -> None:
        session.install("-e", ".")
        _cuforge(session, "build", "--combo", combo_id, *session.posargs)

    build.__doc__ = f"Build, verify and publish the wheels of combo {combo_id}."
    nox.session(name=f"build-{combo_id}")(build)


def _make_slow_session(combo_id: str) -> None:
    def slow(session: nox.Session) -> None:
        session.install("-e", ".")
        _cuforge(session, "build", "--combo", combo_id, "--only", "all", "--keep-going",
                 *session.posargs)

    slow.__doc__ = (f"Build every recipe for {combo_id}, real sources (hours on 2 cores; "
                    "failures are recorded, dependents skipped).")
    nox.session(name=f"slow-{combo_id}")(slow)


for _id in _combo_ids():
    _make_build_session(_id)
    _make_slow_session(_id)


@nox.session
def tests(session: nox.Session) -> None:
    """Unit and integration tests (one real CUDA build of the demo for 3.11-cu130)."""
    session.install("-e", ".[test]")
    session.run("pytest", *(session.posargs or ["-q", "--durations=30"]))   # the slowest, for CI time


@nox.session(name="emulation-setup")
def emulation_setup(session: nox.Session) -> None:
    """Provision building linux-aarch64 wheels here under QEMU (docs/dgx-spark.md).

    The aarch64 root gets the Debian packages of envs/emulation.toml; binfmt_misc is registered."""
    session.install("-e", ".")
    _cuforge(session, "emulation", "setup", *session.posargs)


@nox.session(name="emulated")
def emulated(session: nox.Session) -> None:
    """The linux-aarch64 demo built and verified under QEMU (test_emulated_build.py alone).

    `nox -s tests` runs it too."""
    session.install("-e", ".[test]")
    session.run("pytest", "-q", "tests/integration/test_emulated_build.py", *session.posargs,
                env={"CUFORGE_REQUIRE_EMULATION": "1"})


@nox.session
def bench(session: nox.Session) -> None:
    """Build-speed ratios measured side by side in one run (bench/; `-- --help` for options).

    Cold vs by hand, no-op, warm, resumed, serial vs side by side, nvcc -t, compiler cache."""
    session.install("-e", ".", "pypiserver")   # pypiserver: the team index of team_wheels.py
    session.run("python", "bench/build_speed.py", *session.posargs)
    session.run("python", "bench/cache_speed.py")   # warm vs cold compiler cache (the demo)
    session.run("python", "bench/team_wheels.py")   # --wheels from a team index vs cold (demo)
