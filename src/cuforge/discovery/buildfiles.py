"""One folder's build files, read without running them: does the folder build a torch
extension, under which distribution name, and which line says so.

A setup.py builds a torch extension when it imports ``torch.utils.cpp_extension`` and calls
``CUDAExtension`` / ``CppExtension`` (a call commented out still counts: GOF's
tetra-triangulation ships its ``ext_modules`` commented out); a CMakeLists.txt does when it
finds Torch (``find_package(Torch ...)``) outside a comment."""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from cuforge.config.recipes import BuildKind

SETUP_PY, PYPROJECT, CMAKELISTS = "setup.py", "pyproject.toml", "CMakeLists.txt"
_EXTENSION_CALL = re.compile(r"\b(CUDAExtension|CppExtension|CMakeExtension)\s*\(")
_CALL_NAME = re.compile(r"\s*(?:name\s*=\s*)?[\"']([\w.]+)[\"']")
_USES_CPP_EXTENSION = re.compile(r"torch\.utils\.cpp_extension|from\s+torch\.utils\s+import\s+"
                                 r"cpp_extension|\bBuildExtension\b")
_FIND_TORCH = re.compile(r"^\s*find_package\s*\(\s*Torch\b", re.IGNORECASE)
_CMAKE_PROJECT = re.compile(r"^\s*project\s*\(\s*([\w.-]+)", re.IGNORECASE)


@dataclass(frozen=True)
class ExtensionCall:
    """One extension call in a build file: ``CUDAExtension("simple_knn._C", ...)``."""

    file: str             # the build file, relative to the checkout
    line: int
    call: str             # CUDAExtension, CppExtension, CMakeExtension, find_package(Torch)
    module: str = ""      # the extension's module where the call names it literally
    commented: bool = False

    def text(self) -> str:
        """``setup.py:9 CUDAExtension(simple_knn._C)``, ``... (commented out)``."""
        what = f"{self.call}({self.module})" if self.module else self.call
        return f"{self.file}:{self.line} {what}" + (" (commented out)" if self.commented else "")


@dataclass(frozen=True)
class FolderBuild:
    """What a folder's build files say."""

    kind: BuildKind | None            # None: no torch extension is built here
    name: str                         # the distribution name ("" where nothing names it)
    packages: tuple[str, ...]         # setup(packages=[...]) where literal
    calls: tuple[ExtensionCall, ...]  # the lines that make it an extension build
    why_not: str = ""                 # why a folder with build files is not one

    @property
    def modules(self) -> tuple[str, ...]:
        """What the import check imports: each compiled extension module the build names
        (``simple_knn._C``: the package alone may be a namespace that loads no code), then
        the packages."""
        names = [c.module for c in self.calls if c.module and c.call != "CMakeExtension"
                 and not c.commented] + [p.split(".")[0] for p in self.packages]
        return tuple(dict.fromkeys(n for n in names if n))


def read_folder(folder: Path, relative: str) -> FolderBuild | None:
    """The build files of ``folder`` (``relative``: its path in the checkout, for the
    file:line evidence); None when it has none."""
    setup_py, pyproject, cmake = (folder / n for n in (SETUP_PY, PYPROJECT, CMAKELISTS))
    if not (setup_py.is_file() or pyproject.is_file() or cmake.is_file()):
        return None
    where = (relative.rstrip("/") + "/") if relative not in ("", ".") else ""
    name, packages, calls, uses = "", (), [], False
    if setup_py.is_file():
        text = setup_py.read_text(errors="replace")
        name, packages = _setup_arguments(text)
        calls = _extension_calls(text, where + SETUP_PY)
        uses = bool(_USES_CPP_EXTENSION.search(text))
    if not name and pyproject.is_file():
        name = _pyproject_name(pyproject)
    finds_torch = _finds_torch(cmake, where + CMAKELISTS) if cmake.is_file() else None
    live = [c for c in calls if not c.commented and c.call != "CMakeExtension"]
    if live and uses:
        return FolderBuild(BuildKind.SETUPTOOLS, name or folder.name, packages, tuple(calls))
    if finds_torch is not None:   # CMake finds Torch: the extension, whatever setup.py says
        return FolderBuild(BuildKind.CMAKE, name or _cmake_project(cmake) or folder.name,
                           packages, (finds_torch, *calls))
    if calls and uses:   # every torch extension call commented out, and no CMake build
        return FolderBuild(BuildKind.SETUPTOOLS, name or folder.name, packages, tuple(calls))
    why = ("its setup.py builds no torch extension (no torch.utils.cpp_extension call)"
           if setup_py.is_file() else
           "its CMakeLists.txt does not find Torch" if cmake.is_file() else
           "its pyproject.toml builds no torch extension")
    return FolderBuild(None, name, packages, (), why)


def _setup_arguments(text: str) -> tuple[str, tuple[str, ...]]:
    """``setup(name=..., packages=[...])`` where they are literals; ("", ()) otherwise."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return "", ()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(
                node.func, "attr", "")) == "setup":
            args = {k.arg: k.value for k in node.keywords if k.arg}
            name = args.get("name")
            packages = args.get("packages")
            return (name.value if isinstance(name, ast.Constant) and isinstance(name.value, str)
                    else "",
                    tuple(e.value for e in getattr(packages, "elts", ())
                          if isinstance(e, ast.Constant) and isinstance(e.value, str)))
    return "", ()


def _extension_calls(text: str, file: str) -> list[ExtensionCall]:
    calls = []
    lines = text.splitlines()
    for match in _EXTENSION_CALL.finditer(text):
        number = text.count("\n", 0, match.start()) + 1
        line = lines[number - 1]
        before = line[:match.start() - (text.rfind("\n", 0, match.start()) + 1)]
        if before.rstrip().endswith(("class", "def")):
            continue   # ``class CMakeExtension(Extension):`` defines, does not call
        # the arguments may follow on the next lines (commented out with the call, or not)
        after = re.sub(r"\n\s*#?", " ", text[match.end():match.end() + 400])
        named = _CALL_NAME.match(after)
        calls.append(ExtensionCall(file, number, match.group(1), named.group(1) if named else "",
                                   line.lstrip().startswith("#")))
    return calls


def _pyproject_name(path: Path) -> str:
    try:
        return str(tomllib.loads(path.read_text(errors="replace")).get("project", {})
                   .get("name", ""))
    except tomllib.TOMLDecodeError:
        return ""


def _finds_torch(path: Path, file: str) -> ExtensionCall | None:
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if _FIND_TORCH.match(line.split("#", 1)[0]):
            return ExtensionCall(file, number, "find_package(Torch)")
    return None


def _cmake_project(path: Path) -> str:
    for line in path.read_text(errors="replace").splitlines():
        found = _CMAKE_PROJECT.match(line)
        if found:
            return found.group(1)
    return ""
