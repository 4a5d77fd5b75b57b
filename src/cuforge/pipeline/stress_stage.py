"""Recipes' ``[stress]``: each package's repeated GPU workload run on its wheel, by ``cuforge
verify --stress`` and as a build's (or setup's) last stage (``build --stress``), optionally
short and under compute-sanitizer (``--sanitize``), and either of them on the wheel's PTX
(``--ptx-jit``: verify/ptxjit.py). The verdict is recorded in the manifest."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from cuforge.core.errors import ToolchainError
from cuforge.core.project import Project
from cuforge.env.unpacked import ensure_unpacked, unpacked_dir
from cuforge.env.venv import ComboEnv
from cuforge.pipeline.upstream_stage import each_wheel
from cuforge.verify.report import CheckResult
from cuforge.verify.stress import SANITIZER_FIX, check_name, find_sanitizer, run_stress


def sanitizer_for(project: Project, combo_env: ComboEnv) -> Path:
    """compute-sanitizer for ``--sanitize``: one that can launch a program (``find_sanitizer``:
    ``CUFORGE_COMPUTE_SANITIZER``, the env's, the toolkit's, PATH), else the accel's PyPI
    ``sanitizer`` wheel (envs/accels.toml), unpacked once under ``.cuforge/tools/``."""
    extra = [Path(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    try:
        return find_sanitizer([combo_env.info.site_packages, *extra],
                              combo_env.toolkit.root / "bin")
    except ToolchainError:
        spec = combo_env.combo.accel.sanitizer
        if not spec or os.environ.get("CUFORGE_COMPUTE_SANITIZER"):
            raise
    root = unpacked_dir(project.state_dir, "tools", spec)
    ensure_unpacked(root, spec, combo_env.python, what="compute-sanitizer", hint=SANITIZER_FIX)
    return find_sanitizer([root])


class StressStage:
    """Runs recipes' ``[stress]`` scripts for wheels; asks for a GPU once. ``sanitize``: the
    short run under compute-sanitizer instead of the full one (the binary is found before
    anything runs, so a missing one is one clear error, exit 3). ``ptx_jit``: on a copy whose
    SASS the device would pick is hidden, so the driver JIT-compiles the PTX."""

    def __init__(self, project: Project, combo_env: ComboEnv, *, sanitize: bool = False,
                 ptx_jit: bool = False):
        self.project, self.python = project, Path(combo_env.python)
        # what ``python`` needs (emulation's variables)
        self.env = dict(combo_env.target.step_env())
        self.no_device = combo_env.target.no_device
        self.sanitizer = None
        if sanitize and not self.no_device:      # an emulated target runs no GPU code here
            self.sanitizer = sanitizer_for(project, combo_env)
        self.ptx_jit = ptx_jit
        self.check = check_name(sanitize=sanitize, ptx_jit=ptx_jit)
        self._device = None
        self._probed = False

    def gpu_visible(self) -> bool:
        if not self._probed:
            from cuforge.verify.smoke import Device, probe_device
            found = None if self.no_device else probe_device(self.python, env=self.env)
            self._device, self._probed = found if isinstance(found, Device) else None, True
        return self._device is not None

    def run(self, wheel: Path, recipe, dependency_paths: list[Path], *, imported_ok: bool,
            tmp: Path) -> CheckResult:
        from cuforge.verify.wheel import import_roots, unpack
        rule = recipe.stress if recipe else None
        check = self.check
        if rule is None:
            return CheckResult(check, "skipped", "skipped: the recipe declares no [stress] "
                               "(docs/packages.md says which packages have one and why)")
        if not imported_ok:
            return CheckResult(check, "skipped", "skipped: the wheel does not import")
        if not self.gpu_visible():
            why = self.no_device or f"torch.cuda.is_available() is False in {self.python}"
            return CheckResult(check, "skipped", f"skipped: no GPU ({why}); the stress did "
                               "not run")
        unpacked = unpack(wheel, tmp / f"stress-{wheel.name}")
        paths = [*import_roots(unpacked), *dependency_paths]
        if self.ptx_jit:
            return self._run_on_ptx(wheel, rule, recipe, paths, tmp)
        return run_stress(self.python, rule, rule.path(self.project, recipe.name), paths,
                          sanitizer=self.sanitizer, env=self.env, check=check)

    def _run_on_ptx(self, wheel: Path, rule, recipe, paths: list[Path], tmp: Path) -> CheckResult:
        """The run on copies of the wheel and the wheels it imports with, their SASS hidden.
        The driver's JIT cache is the user's ``CUDA_CACHE_PATH`` (a second run then reuses
        what the first compiled), else one of its own; how much it grew shows the JIT ran."""
        from cuforge.verify.ptxjit import hide_sass, jit_cache_bytes
        root = tmp / f"ptx-jit-{wheel.name}"
        copies = [shutil.copytree(p, root / str(i)) for i, p in enumerate(paths)]
        hidden = [hide_sass(c, self._device.arch) for c in copies]
        if lost := [g for h in hidden for g in h.without_ptx]:
            return CheckResult(self.check, "fail", "--ptx-jit: no PTX the driver could JIT-"
                               f"compile for {self._device.arch} in {', '.join(lost)} (build "
                               "with +PTX)")
        cache = Path(os.environ.get("CUDA_CACHE_PATH") or root / "jit-cache")
        before = jit_cache_bytes(cache)
        result = run_stress(self.python, rule, rule.path(self.project, recipe.name),
                            [Path(c) for c in copies], sanitizer=self.sanitizer,
                            env={**self.env, "CUDA_CACHE_PATH": str(cache),
                                 "CUDA_CACHE_MAXSIZE": str(4 << 30)}, check=self.check)
        said = "; ".join(h.summary() for h in hidden if h.images) or \
            "PTX JIT: no SASS the device would pick"
        grown = (jit_cache_bytes(cache) - before) / 1e6
        return CheckResult(result.check, result.status, f"{result.detail}\n{said}; the "
                           f"driver's JIT cache grew by {grown:.1f} MB")


def stress_stage(project: Project, combo_env: ComboEnv, house_dir: Path, entries, recipes: dict,
                 console, *, sanitize: bool = False, ptx_jit: bool = False) -> list[CheckResult]:
    """A build's last stage (``build --stress``): each built or prebuilt wheel whose recipe has
    a ``[stress]``, its verdict printed and recorded in the manifest. Returns the results."""
    return each_wheel(StressStage(project, combo_env, sanitize=sanitize, ptx_jit=ptx_jit),
                      lambda r: r.stress is not None, house_dir, entries, recipes, console)
