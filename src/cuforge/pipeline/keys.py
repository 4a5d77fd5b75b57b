"""What a package's key is made of: the named inputs of its build (recipe and patch bytes,
the source tree's content, arches, policy, torch, the exact commands and their environment,
the dependencies' keys) and a key over them (``fingerprint.key_of``), in the spirit of Bazel's
action keys: an equal key means the wheel in the wheelhouse is this build's output. The
source key decides whether a work dir's tree and build state are kept (resume)."""

from __future__ import annotations

import fnmatch
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from cuforge.config.arches import ArchPolicy
from cuforge.config.recipes import Recipe, Source
from cuforge.core.project import Project
from cuforge.core.runner import Step
from cuforge.env.venv import ComboEnv
from cuforge.pipeline import sources
from cuforge.pipeline.fingerprint import files_digest, key_of, tree_digest

# Variables that change how fast a build runs, never what it outputs: left out of the key so
# that another --jobs or a compiler cache (a launcher) does not make a wheel out of date.
# Variables that change how fast a build runs, never what it outputs: left out of the key so
# that another --jobs or a compiler cache (a launcher) does not make a wheel out of date.
NOT_IN_KEY = ("MAX_JOBS", "CMAKE_BUILD_PARALLEL_LEVEL", "*_COMPILER_LAUNCHER", "CCACHE_*",
              "SCCACHE_*", "CUFORGE_CACHE*")


@dataclass(frozen=True)
class PackageKeys:
    inputs: tuple[tuple[str, str], ...]   # the named digests the key is made of, sorted
    key: str                              # over the inputs
    source_key: str                       # over the sources and the env that built them


def package_keys(project: Project, recipe: Recipe, combo_env: ComboEnv, *,
                 patch_sets: tuple[str, ...], archs: str, policy: ArchPolicy, skip: str,
                 commands: dict[str, Step], depends: dict[str, str]) -> PackageKeys:
    """The keys of one package build: ``commands`` are its build commands as they run
    without launchers (by their place among the actions), ``depends`` its dependencies' keys."""
    source_inputs = {"source": _source_identity(recipe.source, project, content=False),
                     "patches": patches_digest(project, patch_sets)}
    for var, extra in recipe.extra_sources:
        source_inputs[f"extra:{var}"] = _source_identity(extra, project, content=True)
    inputs = {**source_inputs,
              "source": _source_identity(recipe.source, project, content=True),
              "recipe": recipe_digest(project, recipe),
              "arches": archs, "policy": policy, "skip": skip,
              "torch": combo_env.combo.torch, "python": combo_env.combo.python,
              "cuda": str(combo_env.toolkit.version),
              "commands": key_of({i: _step_identity(step) for i, step in commands.items()}),
              "build_requires": " ".join(recipe.build_requires)}
    inputs.update({f"dep:{d}": key for d, key in depends.items()})
    return PackageKeys(tuple(sorted(inputs.items())), key_of(inputs),
                       _resume_key(source_inputs, combo_env))


def _resume_key(source_inputs: dict, combo_env: ComboEnv) -> str:
    """What decides whether a work dir's tree and build state are kept (resume): the sources,
    and the env that built them. A tree another env built (another clone sharing build_dir, a
    recreated env) starts fresh: its CMake cache and ninja state name that env's compilers,
    include dirs and rpaths."""
    return key_of({**source_inputs, "built_by": str(combo_env.python)})


def _source_identity(source: Source, project: Project, *, content: bool) -> str:
    """A pinned source is its URL + commit or checksum; a local path is its content (when
    ``content``) - a path alone says nothing about what is in it."""
    if source.path and content:
        root = sources.resolve_path(source.path, project.root)
        return f"path:{tree_digest(root)}" if root.is_dir() else f"missing:{root}"
    return source.describe()


# Which install of cuforge runs a build is not an input of its wheel: its interpreter runs the
# PEP 517 frontend and the pin check, and its package dir holds the build shim. A second install
# (the README's invoke route beside nox's venv) must see the same key, or it rebuilds everything.
OWN_PYTHON, OWN_PACKAGE = "<cuforge's python>", "<cuforge's package>"
_PACKAGE_DIR = str(Path(__file__).resolve().parents[1])   # cuforge/, not cuforge/pipeline/


def _step_identity(step: Step) -> str:
    argv = tuple(OWN_PYTHON if a == sys.executable else _own_paths(a) for a in step.argv)
    env = "\n".join(f"{k}={_own_paths(_key_value(k, v))}" for k, v in step.env
                    if not any(fnmatch.fnmatch(k, pat) for pat in NOT_IN_KEY))
    return f"{step.cwd}\n{argv!r}\n{env}"


def _own_paths(text: str) -> str:
    """``text`` with cuforge's package dir named, not spelled (see OWN_PYTHON)."""
    return re.sub(re.escape(_PACKAGE_DIR) + r"(?=/|$|:|;)", OWN_PACKAGE, text)


def _key_value(name: str, value: str) -> str:
    """The user's own $PATH (and friends) and nvcc's thread count are not part of the key."""
    own = os.environ.get(name)
    if own and value.endswith(own):
        value = value[: -len(own)] + f"${name}"
    if name == "NVCC_APPEND_FLAGS":
        parts = value.split()
        value = " ".join(p for i, p in enumerate(parts)
                         if p != "-t" and not (i and parts[i - 1] == "-t"))
    return value


def recipe_digest(project: Project, recipe: Recipe) -> str:
    """sha256 over the recipe file and every file of its patch sets."""
    return files_digest(([recipe.file] if recipe.file else [])
                        + _patch_files(project, (*recipe.patches, *recipe.arches.native_patches)),
                        project.root)


def patches_digest(project: Project, names: tuple[str, ...]) -> str:
    return files_digest(_patch_files(project, names), project.root)


def _patch_files(project: Project, names) -> list[Path]:
    files: list[Path] = []
    for name in names:
        files += sorted(p for p in (project.patches_dir / name).rglob("*") if p.is_file())
    return files
