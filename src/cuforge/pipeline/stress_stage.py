"""Recipes' ``[stress]``: each package's repeated GPU workload run on its wheel, by ``cuforge
verify --stress`` and as a build's (or setup's) last stage (``build --stress``), optionally
short and under compute-sanitizer (``--sanitize``). The verdict is recorded in the manifest."""

from __future__ import annotations

import os
from pathlib import Path

from cuforge.core.project import Project
from cuforge.env.venv import ComboEnv
from cuforge.pipeline.upstream_stage import each_wheel
from cuforge.verify.report import CheckResult
from cuforge.verify.stress import CHECK, SANITIZE_CHECK, find_sanitizer, run_stress


class StressStage:
    """Runs recipes' ``[stress]`` scripts for wheels; asks for a GPU once. ``sanitize``: the
    short run under compute-sanitizer instead of the full one (the binary is found before
    anything runs, so a missing one is one clear error, exit 3)."""

    def __init__(self, project: Project, combo_env: ComboEnv, *, sanitize: bool = False):
        self.project, self.python = project, Path(combo_env.python)
        # what ``python`` needs (emulation's variables)
        self.env = dict(combo_env.target.step_env())
        self.no_device = combo_env.target.no_device
        self.sanitizer = None
        if sanitize:
            extra = [Path(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
            self.sanitizer = find_sanitizer([combo_env.info.site_packages, *extra],
                                            combo_env.toolkit.root / "bin")
        self._gpu: bool | None = None

    def gpu_visible(self) -> bool:
        if self._gpu is None:
            from cuforge.verify.smoke import Device, probe_device
            self._gpu = not self.no_device and isinstance(
                probe_device(self.python, env=self.env), Device)
        return self._gpu

    def run(self, wheel: Path, recipe, dependency_paths: list[Path], *, imported_ok: bool,
            tmp: Path) -> CheckResult:
        from cuforge.verify.wheel import import_roots, unpack
        rule = recipe.stress if recipe else None
        check = CHECK if self.sanitizer is None else SANITIZE_CHECK
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
        return run_stress(self.python, rule, rule.path(self.project, recipe.name),
                          [*import_roots(unpacked), *dependency_paths],
                          sanitizer=self.sanitizer, env=self.env)


def stress_stage(project: Project, combo_env: ComboEnv, house_dir: Path, entries, recipes: dict,
                 console, *, sanitize: bool = False) -> list[CheckResult]:
    """A build's last stage (``build --stress``): each built or prebuilt wheel whose recipe has
    a ``[stress]``, its verdict printed and recorded in the manifest. Returns the results."""
    return each_wheel(StressStage(project, combo_env, sanitize=sanitize),
                      lambda r: r.stress is not None, house_dir, entries, recipes, console)
