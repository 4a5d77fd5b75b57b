"""``--dry-run``: every step's exact command and environment, computed like a real build;
nothing is created, fetched, built or written."""

from __future__ import annotations

import platform
from pathlib import Path

from rich.console import Console

from . import sources, venv
from .build import BuildJob, steps_for
from .combos import Combo
from .errors import CuforgeError
from .pipeline import BuildRequest, _job_env, _package_arches, wheel_dir
from .project import Project
from .recipes import Recipe
from .toolchain import Toolkit
from .torchinfo import TorchInfo


def dry_run(project: Project, req: BuildRequest, order: list[Recipe]) -> None:
    """Print every step's exact command and environment; build nothing, write nothing."""
    combo = req.combo
    out = Console(highlight=False, soft_wrap=True)
    out.print(f"# dry run: combo {combo.id}, torch {combo.torch}, CUDA {combo.accel.cuda}, "
              f"arches {combo.arches}")
    out.print(f"# build order: {' -> '.join(r.name for r in order)}")
    env = _predicted_env(project, combo)
    if not combo.interpreter and not venv.is_ready(project.state_dir, combo):
        base = str(_find_python_or_name(combo.python))
        for step in venv.creation_steps(project.state_dir, combo, base):
            out.print(step.render(), markup=False)
    elif not combo.interpreter:
        out.print(f"# env {venv.env_dir(project.state_dir, combo)} is ready: nothing to install")
    house = wheel_dir(project, combo)
    for recipe in order:
        out.print(f"\n# ---- {recipe.name} ({recipe.kind}) ----")
        archs = _package_arches(recipe, combo, req)
        if archs is not None and len(archs) == 0:
            out.print(f"# would skip {recipe.name}: no requested arch is supported")
            continue
        work = project.state_dir / "work" / combo.env_id / recipe.name
        if recipe.kind != "prebuilt":
            for step in sources.describe_steps(recipe.source, project.root,
                                               project.state_dir / "cache", work / "src"):
                out.print(step.render(), markup=False)
            for p in recipe.patches:
                out.print(f"# apply patch set patches/{p}")
        job = BuildJob(recipe, env.python, work / "src", work / "dist", work / "build",
                       archs or combo.arches, _job_env(env, recipe, archs or combo.arches,
                                                       req.jobs), req.verbose,
                       project.root / "native" / "cmake")
        for step in steps_for(job):
            out.print(step.render(), markup=False)
        out.print(f"# then: verify (abi, symbols, fatbin, import, smoke) and publish into {house}")


def _predicted_env(project: Project, combo: Combo) -> venv.ComboEnv:
    """The env as it will be, without creating it (for --dry-run)."""
    root = venv.env_dir(project.state_dir, combo)
    if combo.interpreter or venv.is_ready(project.state_dir, combo):
        try:
            return venv.prepare(project.state_dir, combo, log=Path("/dev/null"))
        except CuforgeError:
            pass
    site = root / "lib" / f"python{combo.python}" / "site-packages"
    info = TorchInfo(python=root / "bin" / "python", py_version=combo.python, site_packages=site,
                     machine=platform.machine(), torch=combo.torch, torch_full=combo.torch,
                     cuda=str(combo.accel.cuda), cxx11_abi=True, torch_lib=site / "torch" / "lib",
                     nvidia_include=(site / "nvidia" / "cu13" / "include",),
                     nvidia_lib=(site / "nvidia" / "cu13" / "lib",))
    return venv.ComboEnv(combo, info, Toolkit(root / "cuda", combo.accel.cuda), root, False)


def _find_python_or_name(version: str) -> Path | str:
    try:
        return venv.find_python(version)
    except CuforgeError:
        return f"python{version}"
