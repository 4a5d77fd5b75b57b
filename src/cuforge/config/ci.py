"""The CI build matrix from ``envs/`` and the GitHub Actions workflow generated from it.

``cuforge ci matrix`` prints one entry per combo that takes part in CI (packages in build
order, arches, runners, whether its smoke tests need a GPU); a combo with ``ci = false`` is
tied to one machine no CI runner is, and stderr names each left out with its ``ci_why``.
``cuforge ci workflow`` writes
``.github/workflows/wheels.yml`` from the same entries: each combo builds on a CPU runner, its
wheelhouse (with its simple index) is uploaded, and a GPU runner verifies it with the smoke
tests, then runs ``setup``'s model stage for each stack on the stack's upstream checkout. The
CI system schedules; cuforge only describes.

What a combo builds in CI is what people install: the packages of the stacks ``envs/ci.toml``
names (``stacks/*.toml``, optional ones included), plus its ``packages``; a ``[combo.<id>]``
table there names another set for one combo. A combo's own ``packages`` (the demo by default)
is what a plain ``cuforge build`` makes, not what the wheel factory's CI checks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from cuforge.config import platforms
from cuforge.config.combos import Combo, ToolkitSource, load_combos
from cuforge.core.errors import ConfigError
from cuforge.core.project import Project
from cuforge.core.tomlfile import read_toml
from cuforge.config.recipes import Recipe, load_recipes, build_order
from cuforge.config.stacks import load_stack

WORKFLOW = Path(".github") / "workflows" / "wheels.yml"


@dataclass(frozen=True)
class Runners:
    runner: str                      # builds (CPU)
    gpu_runner: tuple[str, ...]      # verify + smoke tests (labels of a GPU machine)
    system_toolkit_runner: tuple[str, ...] = ()   # builds with an installed CUDA ({cuda})

    def build_runner(self, combo: Combo) -> str | list[str]:
        """Where ``combo`` compiles: the hosted runner, unless it needs an installed toolkit."""
        if combo.toolkit is not ToolkitSource.SYSTEM:
            return self.runner
        if not self.system_toolkit_runner:
            raise ConfigError(f"combo {combo.id} uses the system CUDA toolkit, but envs/ci.toml "
                              f"names no system_toolkit_runner for {combo.platform}",
                              hint="add one (labels of a runner with that CUDA installed), or set "
                                   "`ci = false` on the combo")
        cuda = f"{combo.accel.cuda.major}.{combo.accel.cuda.minor}"
        return [label.format(cuda=cuda) for label in self.system_toolkit_runner]


def load_runners(project: Project) -> tuple[str, dict[str, Runners]]:
    """``envs/ci.toml``: the platform of combos that name none, and the runners per platform."""
    path = project.envs_dir / "ci.toml"
    data = read_toml(path, "CI runner table")
    runners = {}
    for name, row in data.get("platform", {}).items():
        platforms.get(name, where=f"{path} [platform.{name}]")
        runners[name] = Runners(row["runner"], tuple(row["gpu_runner"]),
                                tuple(row.get("system_toolkit_runner", ())))
    default = data.get("default_platform", "linux-x86_64")
    platforms.get(default, where=f"{path} default_platform")
    return default, runners


@dataclass(frozen=True)
class BuildSet:
    """What a CI combo builds: the packages of ``stacks`` plus ``packages``."""

    stacks: tuple[str, ...]
    packages: tuple[str, ...]


def _ci_data(project: Project) -> dict:
    return read_toml(project.envs_dir / "ci.toml", "CI runner table")


def build_set(project: Project, combo: Combo) -> BuildSet:
    """``envs/ci.toml``'s ``stacks`` and ``packages``, or its ``[combo.<id>]`` table's."""
    data = _ci_data(project)
    row = data.get("combo", {}).get(combo.id, data)
    stacks = tuple(row.get("stacks", ()))
    packages = tuple(row.get("packages", ()))
    if not stacks and not packages:
        raise ConfigError(f"envs/ci.toml names nothing for combo {combo.id} to build in CI",
                          hint='set stacks = ["milo", "pointcept"] (and/or packages = [...]) '
                               "there")
    return BuildSet(stacks, packages)


def requested_packages(project: Project, wanted: BuildSet) -> list[str]:
    """The stacks' packages (required, then optional) and the extra ones, each once."""
    names: list[str] = []
    for name in wanted.stacks:
        stack = load_stack(project, name)
        names += [*stack.packages, *stack.optional]
    names += list(wanted.packages)
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class Checkout:
    """The upstream tree a stack's model stage runs on: the one its recipes build from."""

    stack: str
    git: str
    commit: str


def stack_checkout(project: Project, name: str, recipes: dict[str, Recipe]) -> Checkout:
    """The git source (and commit) that the stack's packages are subdirectories of: MILo's
    rasterizers live in ``submodules/``, Pointcept's ops in ``libs/``."""
    stack = load_stack(project, name)
    found = {(r.source.git, r.source.commit) for n in [*stack.packages, *stack.optional]
             if (r := recipes.get(n)) and r.source.git and r.source.subdir}
    if len(found) != 1:
        raise ConfigError(f"stack {name}: its packages come from {len(found)} upstream trees "
                          f"({', '.join(sorted(g for g, _ in found)) or 'none'}), so CI cannot "
                          "tell which checkout its model stage runs on",
                          hint="pin every in-tree package of the stack to one git source "
                               "and commit")
    git, commit = found.pop()
    return Checkout(name, git, commit)


def matrix(project: Project) -> list[dict]:
    """One entry per combo that takes part in CI (``ci = false`` leaves one out)."""
    default, runners = load_runners(project)
    recipes = load_recipes(project)
    entries = []
    for combo in load_combos(project):
        if not combo.ci:
            continue
        combo = replace(combo, platform=combo.platform or default)
        if combo.platform not in runners:
            raise ConfigError(f"combo {combo.id} builds on {combo.platform}, which has no "
                              "runners in envs/ci.toml",
                              hint=f"add a [platform.{combo.platform}] table there, or set "
                                   "`ci = false` on the combo")
        wanted = build_set(project, combo)
        requested = requested_packages(project, wanted)
        order = build_order(recipes, requested)
        run = runners[combo.platform]
        apt = sorted({h.debian for r in order for h in r.system_headers})
        entries.append({
            "combo": combo.id, "python": combo.python, "accel": combo.accel.tag,
            "cuda": str(combo.accel.cuda), "torch": combo.torch, "platform": combo.platform,
            "arches": combo.arches.torch(), "packages": [r.name for r in order],
            "only": ",".join(requested), "stacks": list(wanted.stacks), "apt": " ".join(apt),
            "toolkit": combo.toolkit, "runner": run.build_runner(combo),
            # a smoke test that needs a GPU decides: compiling never does
            "gpu": any(r.smoke.gpu and r.smoke.path(project, r.name).is_file() for r in order),
            "gpu_runner": list(run.gpu_runner),
            "wheel_dir": combo.wheel_dir(Path("wheelhouse")).as_posix(),
        })
    return entries


def matrix_json(project: Project) -> str:
    return json.dumps(matrix(project), indent=1)


def left_out(project: Project) -> str:
    """The combos the matrix leaves out and why, in one line for stderr ("" when none is).

    ``6 of 10 combos; left out (ci = false): h200 (the lent GPU machine's ...), ...``"""
    combos = load_combos(project)
    out = [c for c in combos if not c.ci]
    if not out:
        return ""
    return (f"{len(combos) - len(out)} of {len(combos)} combos; left out (ci = false in "
            "envs/combos.toml): " + ", ".join(c.id + (f" ({c.ci_why})" if c.ci_why else "")
                                              for c in out))


def render_workflow(project: Project) -> str:
    """The workflow text. Matrix entries are JSON objects on one line each (JSON is YAML)."""
    entries = matrix(project)
    build = "\n".join(f"          - {json.dumps(e)}" for e in entries)
    smoke = "\n".join(f"          - {json.dumps(e)}" for e in entries if e["gpu"])
    text = _HEADER + _job(_BUILD_JOB, build)
    if smoke:
        recipes = load_recipes(project)
        stacks = dict.fromkeys(s for e in entries if e["gpu"] for s in e["stacks"])
        text += _job(_SMOKE_JOB, smoke) + "".join(
            _model_stage_step(stack_checkout(project, name, recipes)) for name in stacks)
    return text


def _model_stage_step(checkout: Checkout) -> str:
    """`setup`'s model stage for one stack: its upstream tree at the recipes' commit, the
    downloaded wheels (no build), patches, variables, then every wheel imported together and
    the stack's tiny forward on the GPU."""
    where = f".cuforge/checkouts/{checkout.stack}"
    return _MODEL_STAGE.format(stack=checkout.stack, git=checkout.git, commit=checkout.commit,
                               where=where)


def write_workflow(project: Project) -> Path:
    path = project.root / WORKFLOW
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_workflow(project))
    return path


def check_workflow(project: Project) -> None:
    """ConfigError unless the committed workflow is what ``render_workflow`` gives now."""
    path = project.root / WORKFLOW
    if not path.is_file() or path.read_text() != render_workflow(project):
        state = "is out of date" if path.is_file() else "is missing"
        raise ConfigError(f"{WORKFLOW} {state} (envs/, recipes/ or smoke/ changed since it was "
                          "generated)", hint="run `invoke ci-workflow` (or `cuforge ci workflow`) "
                                             "and commit the result")


def _job(template: str, matrix: str) -> str:
    """A job's text with its matrix entries and the common set-up steps filled in."""
    return template.replace("@MATRIX_AND_SETUP@", _MATRIX_AND_SETUP.replace("@MATRIX@", matrix))


_HEADER = """\
# Generated by `invoke ci-workflow` (`cuforge ci workflow`) from envs/combos.toml, envs/ci.toml,
# recipes/ and smoke/. Do not edit: change those and regenerate (a test checks it is current).
name: wheels

on:
  workflow_dispatch:
  push:
    branches: [main]
    paths: ["envs/**", "recipes/**", "patches/**", "smoke/**", "native/**", "src/**",
            ".github/workflows/wheels.yml"]

permissions:
  contents: read

jobs:
"""

# Shared by both jobs: one entry per combo, then checkout, Python and cuforge.
_MATRIX_AND_SETUP = """\
    strategy:
      fail-fast: false
      matrix:
        include:
@MATRIX@
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: ${{ matrix.python }}
      - name: Install cuforge
        run: python -m pip install uv -e .
"""

# Each combo compiles on a CPU runner; smoke tests there report "skipped: no GPU".
_BUILD_JOB = """\
  build:
    name: build ${{ matrix.combo }} (${{ matrix.platform }})
    runs-on: ${{ matrix.runner }}
    timeout-minutes: 360
@MATRIX_AND_SETUP@      - name: System headers the packages need
        if: ${{ matrix.apt != '' }}
        run: sudo apt-get update && sudo apt-get install -y ${{ matrix.apt }}
      - name: Build, verify and publish the stacks' packages
        run: cuforge build --combo ${{ matrix.combo }} --only ${{ matrix.only }} --keep-going
      # what passed is published even when another package failed (the job still fails)
      - name: Write the simple index
        if: ${{ !cancelled() }}
        run: cuforge index ${{ matrix.wheel_dir }}
      - uses: actions/upload-artifact@v4
        if: ${{ !cancelled() }}
        with:
          name: wheelhouse-${{ matrix.combo }}
          path: ${{ matrix.wheel_dir }}
          if-no-files-found: error
      - uses: actions/upload-artifact@v4
        if: ${{ failure() }}
        with:
          name: logs-${{ matrix.combo }}
          path: .cuforge/logs
"""

# The same wheels again on a machine with a GPU: every check, the kernel smoke tests included.
_SMOKE_JOB = """\

  smoke:
    name: verify + smoke ${{ matrix.combo }} (GPU)
    needs: build
    if: ${{ !cancelled() }}   # one combo's failed build must not hold back the others' checks
    runs-on: ${{ matrix.gpu_runner }}
    timeout-minutes: 60
@MATRIX_AND_SETUP@      - name: A GPU is visible (otherwise smoke tests would only be skipped)
        run: nvidia-smi -L
      - uses: actions/download-artifact@v4
        with:
          name: wheelhouse-${{ matrix.combo }}
          path: ${{ matrix.wheel_dir }}
      - name: Verify with smoke tests
        run: cuforge verify ${{ matrix.wheel_dir }} --combo ${{ matrix.combo }}
"""

# One per stack, after the smoke job's verify: `setup`'s model stage on the upstream tree.
_MODEL_STAGE = """\
      - name: Model stage of the {stack} stack (cuforge setup {stack} --no-build)
        if: ${{{{ !cancelled() && contains(matrix.stacks, '{stack}') }}}}
        run: |
          git clone --quiet {git} {where}
          git -C {where} checkout --quiet {commit}
          cuforge setup {stack} --checkout {where} --combo ${{{{ matrix.combo }}}} --no-build
"""
