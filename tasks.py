"""invoke tasks for the workstation: build, build-env, matrix, shell, verify, doctor, setup,
mesh-convert, patch-milo, patch-pointcept, index, resolve, ci-matrix, ci-workflow. Each is a thin
call into the ``cuforge`` CLI."""

from __future__ import annotations

import subprocess
import sys

from invoke import task
from invoke.exceptions import Exit


def _cuforge(c, *args: str) -> None:
    """Run the CLI on this terminal or pipe itself, not through invoke's output threads: a
    closed pipe (`invoke matrix | head`) is then cuforge's to handle quietly, and its exit
    code is the task's."""
    code = subprocess.call([sys.executable, "-m", "cuforge", *args])
    if code:
        raise Exit(code=code)


def _flag(name: str, value) -> list[str]:
    if value in (None, "", False):
        return []
    return [name] if value is True else [name, str(value)]


@task(help={"python": "combo python, e.g. 3.12", "accel": "cu128 | cu129 | cu130",
            "only": "comma-separated packages", "cuda_arch": 'e.g. "12.0;12.1+PTX"',
            "src": "NAME=PATH: build NAME from a local checkout"}, iterable=["src"])
def build(c, python="3.11", accel="cu130", combo="", only="", cuda_arch="", torch="", jobs=0,
          verbose=False, dry_run=False, keep_going=False, src=None, interpreter="",
          force_source=False, arch_policy="", rebuild=False, wheels=""):
    """Build, verify and publish wheels for one combo (same as `nox -s build-<py>-<accel>`)."""
    args = ["build", "--python", python, "--accel", accel]
    args += _flag("--combo", combo) + _flag("--only", only) + _flag("--cuda-arch", cuda_arch)
    args += _flag("--torch", torch) + _flag("--jobs", jobs or "") + _flag("-v", verbose)
    args += _flag("--dry-run", dry_run) + _flag("--keep-going", keep_going)
    args += _flag("--interpreter", interpreter) + _flag("--force-source", force_source)
    args += _flag("--arch-policy", arch_policy) + _flag("--rebuild", rebuild)
    args += _flag("--wheels", wheels)
    for item in src or []:
        args += ["--src", item]
    _cuforge(c, *args)


@task
def matrix(c):
    """Print every combo: torch, CUDA toolkit, default arches, packages in build order."""
    _cuforge(c, "matrix")


@task
def shell(c, python="3.11", accel="cu130", combo=""):
    """Open a shell in a combo's env with the build environment set."""
    _cuforge(c, "shell", "--python", python, "--accel", accel, *_flag("--combo", combo))


@task(help={"path": "a wheelhouse directory or wheel files", "json": "machine-readable output"})
def verify(c, path, python="3.11", accel="cu130", combo="", cuda_arch="", json=False,
           interpreter="", models=False):
    """Re-run all checks (ABI, symbols, fatbin, import, smoke) on wheels, against a combo."""
    _cuforge(c, "verify", *path.split(","), "--python", python, "--accel", accel,
             *_flag("--combo", combo), *_flag("--cuda-arch", cuda_arch), *_flag("--json", json),
             *_flag("--interpreter", interpreter), *_flag("--models", models))


@task(help={"gpu_arch": "rate the wheelhouses for this GPU instead (e.g. 12.1)",
            "combo": "judge only this combo (default: those with an env or a wheelhouse here)"})
def doctor(c, gpu_arch="", combo=""):
    """Check the machine, and how this GPU runs each wheelhouse package (native, PTX, none).

    GPU + driver, memory/jobs, tools, combos, system headers; then per package whether this GPU
    runs it natively, by PTX JIT, or not at all."""
    _cuforge(c, "doctor", *_flag("--gpu-arch", gpu_arch), *_flag("--combo", combo))


@task(help={"stack": "milo or pointcept (stacks/*.toml)",
            "checkout": "your clone of MILo / Pointcept", "venv": "default: CHECKOUT/.venv",
            "cuda_arch": "arches the wheels are built for", "no_build": "build nothing"})
def setup(c, stack, checkout, venv="", python="3.11", accel="cu130", combo="", cuda_arch="",
          dry_run=False, rebuild=False, no_build=False, wheels="", no_requirements=False,
          find_links="", no_index=False):
    """A working venv for a MILo / Pointcept checkout (`invoke setup milo --checkout ~/MILo`).

    Builds/installs the stack's wheels, patches the checkout, writes its env vars into the
    venv's activation, and runs the model check."""
    _cuforge(c, "setup", stack, "--checkout", checkout, *_flag("--venv", venv),
             "--python", python, "--accel", accel, *_flag("--combo", combo),
             *_flag("--cuda-arch", cuda_arch), *_flag("--dry-run", dry_run),
             *_flag("--rebuild", rebuild), *_flag("--no-build", no_build),
             *_flag("--wheels", wheels), *_flag("--no-requirements", no_requirements),
             *_flag("--find-links", find_links), *_flag("--no-index", no_index))


@task(name="build-env")
def build_env(c, python="3.11", accel="cu130", combo=""):
    """Create (or reuse) a combo's build env without building anything; print its variables."""
    _cuforge(c, "shell", "--python", python, "--accel", accel, *_flag("--combo", combo),
             "--print-env")


@task(name="mesh-convert", help={
    "in_": "the mesh to convert (MILo's .ply output)", "simplify": "target face count",
    "keep_components": "drop components smaller than this fraction of the bbox diagonal",
    "out_dir": "default: next to the input"})
def mesh_convert(c, in_, simplify=0, keep_components=0.0, out_dir="", no_obj=False,
                 no_glb=False):
    """Clean a mesh and write PLY + OBJ + GLB (needs the mesh extra: pip install 'cuforge[mesh]')."""
    _cuforge(c, "mesh-convert", "--in", in_, *_flag("--simplify", simplify or ""),
             *_flag("--keep-components", keep_components or ""), *_flag("--out-dir", out_dir),
             *_flag("--no-obj", no_obj), *_flag("--no-glb", no_glb))


@task(name="patch-milo", help={"milo": "path to a MILo checkout"})
def patch_milo(c, milo, check=False, revert=False, dry_run=False):
    """Apply cuforge's runtime patches to a MILo checkout (idempotent; --check, --revert)."""
    _cuforge(c, "patch", "milo", milo, *_flag("--check", check), *_flag("--revert", revert),
             *_flag("--dry-run", dry_run))


@task(name="patch-pointcept", help={"pointcept": "path to a Pointcept checkout"})
def patch_pointcept(c, pointcept, check=False, revert=False, dry_run=False):
    """Apply cuforge's runtime patches to a Pointcept checkout (NumPy 2, spconv algo switch)."""
    _cuforge(c, "patch", "pointcept", pointcept, *_flag("--check", check),
             *_flag("--revert", revert), *_flag("--dry-run", dry_run))


@task(help={"paths": "comma-separated wheelhouse dirs (default: the whole wheelhouse)"})
def index(c, paths=""):
    """Write a PEP 503/691 simple index into each wheelhouse dir (docs/package-index.md)."""
    _cuforge(c, "index", *[p for p in paths.split(",") if p])


@task(help={"torch": "one torch version (default: each the combo lists)"})
def resolve(c, python="3.11", accel="cu130", combo="", torch=""):
    """Check that a combo's torch + CUDA toolkit install on its platform (uv; installs nothing)."""
    _cuforge(c, "resolve", "--python", python, "--accel", accel, *_flag("--combo", combo),
             *_flag("--torch", torch))


@task(name="ci-matrix")
def ci_matrix(c):
    """The CI matrix as JSON: one entry per combo, with the stacks' packages in build order."""
    _cuforge(c, "ci", "matrix")


@task(name="ci-workflow", help={"check": "fail unless the committed workflow is current"})
def ci_workflow(c, check=False):
    """Regenerate .github/workflows/wheels.yml from envs/, stacks/, recipes/ and smoke/."""
    _cuforge(c, "ci", "workflow", *_flag("--check", check))
