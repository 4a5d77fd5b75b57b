"""What a discovered checkout declares it needs, each line with where it comes from:
``requirements.txt``, ``environment.yml`` (its ``pip:`` list, and its conda dependencies that
PyPI also has, by name: conda's versions are not PyPI's), and the checkout's own ``setup.py``
``install_requires``. Lines that are not requirements for this venv are left out with the
reason: the checkout's own extension folders (cuforge builds those), option lines, the
toolchain and torch itself (held at the combo's)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from cuforge.config.stacks import CheckoutRequirement

# conda packages that are the toolchain, torch itself or a system binary (ffmpeg: PyPI's
# "ffmpeg" is another package): the combo or the system provides them
_CONDA_ONLY = {"python", "pip", "cudatoolkit", "cudatoolkit-dev", "cuda", "cuda-toolkit",
               "cuda-nvcc", "pytorch", "pytorch-cuda", "pytorch-mutex", "mkl", "blas",
               "libstdcxx-ng", "libgcc-ng", "ninja", "cmake", "gcc", "gxx", "ffmpeg"}
_HELD = {"torch": "torch is held at the combo's version"}


@dataclass(frozen=True)
class Declared:
    requirements: tuple[CheckoutRequirement, ...]
    left_out: tuple[str, ...]     # "environment.yml:15 submodules/simple-knn: ..."


def declared(root: Path, extension_folders: set[str]) -> Declared:
    """The checkout's requirements (first mention wins), and the lines left out."""
    taken: dict[str, CheckoutRequirement] = {}
    left: list[str] = []
    for text, where in (*_requirements_txt(root), *_environment_yml(root), *_install_requires(root)):
        reason = _not_a_requirement(text, root, extension_folders)
        if reason:
            left.append(f"{where} {text}: {reason}")
            continue
        name = canonicalize_name(Requirement(text).name)
        if name in _HELD:
            left.append(f"{where} {text}: {_HELD[name]}")
        elif name not in taken:
            taken[name] = CheckoutRequirement(text, where)
    return Declared(tuple(taken.values()), tuple(left))


def _not_a_requirement(text: str, root: Path, folders: set[str]) -> str:
    if text.startswith("-"):
        return "an option line, not a requirement"
    local = text.removeprefix("file:").removeprefix("./").rstrip("/")
    if local in folders:
        return "the checkout's own extension, built by cuforge"
    if "/" in local or (root / local).is_dir():
        return "a local path, not a requirement"
    try:
        Requirement(text)
    except InvalidRequirement as err:
        return f"not a requirement ({err})"
    return ""


def _requirements_txt(root: Path) -> list[tuple[str, str]]:
    path = root / "requirements.txt"
    if not path.is_file():
        return []
    lines = []
    for number, raw in enumerate(path.read_text(errors="replace").splitlines(), 1):
        text = raw.split(" #", 1)[0].strip()
        if text and not text.startswith("#"):
            lines.append((text, f"requirements.txt:{number}"))
    return lines


def _environment_yml(root: Path) -> list[tuple[str, str]]:
    """The ``pip:`` list as written; conda dependencies by name, toolchain and torch left out."""
    path = next((root / n for n in ("environment.yml", "environment.yaml")
                 if (root / n).is_file()), None)
    if path is None:
        return []
    try:
        tree = yaml.compose(path.read_text(errors="replace"))
    except yaml.YAMLError:
        return []
    deps = _mapping_value(tree, "dependencies")
    if not isinstance(deps, yaml.SequenceNode):
        return []
    lines = []
    for item in deps.value:
        where = f"{path.name}:{item.start_mark.line + 1}"
        if isinstance(item, yaml.ScalarNode):
            name = re.split(r"[=<>! ]", item.value.split("::")[-1], maxsplit=1)[0]
            if name and canonicalize_name(name) not in _CONDA_ONLY:
                lines.append((name, f"{where} (conda dependency; the version is left to PyPI)"))
        elif isinstance(item, yaml.MappingNode):
            pip = _mapping_value(item, "pip")
            for entry in pip.value if isinstance(pip, yaml.SequenceNode) else ():
                if isinstance(entry, yaml.ScalarNode):
                    lines.append((entry.value.strip(), f"{path.name}:{entry.start_mark.line + 1}"))
    return lines


def _mapping_value(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    return next((v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key),
                None)


def _install_requires(root: Path) -> list[tuple[str, str]]:
    """The root setup.py's ``install_requires`` where it is a literal list."""
    path = root / "setup.py"
    if not path.is_file():
        return []
    try:
        tree = ast.parse(path.read_text(errors="replace"))
    except SyntaxError:
        return []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "install_requires":
            return [(e.value, f"setup.py:{e.lineno} install_requires")
                    for e in getattr(node.value, "elts", ())
                    if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []
