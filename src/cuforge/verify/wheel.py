"""A wheel as the checks see it: unpacked into a directory, with its importable modules.

A wheel is a zip whose root is what ``pip`` puts into site-packages (plus ``*.data/purelib``
and ``*.data/platlib``), so the unpacked root on ``sys.path`` imports like an installed wheel.

>>> package_name(Path("simple_knn-0.0.0-cp311-cp311-linux_x86_64.whl"))
'simple-knn'
>>> module_of(Path("pkg/_C.cpython-311-aarch64-linux-gnu.so"))
'pkg._C'
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from cuforge.core.errors import VerifyError
from cuforge.core.elf import ElfLib

# Extension module suffixes: foo.cpython-311-aarch64-linux-gnu.so, foo.abi3.so, foo.so
_EXT_RE = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:\.(?:cpython-[^.]+|abi3))?\.so$")
_SKIP_DIRS = ("__pycache__",)


def package_name(wheel: Path) -> str:
    """The distribution name from the wheel's file name (normalized, as pip shows it)."""
    try:
        return str(parse_wheel_filename(wheel.name)[0])
    except InvalidWheelFilename:
        return wheel.name.split("-")[0]


def unpack(wheel: Path, dest: Path) -> Path:
    """Extract ``wheel`` into ``dest``; raise VerifyError when it is not a readable zip."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(dest)
    except (zipfile.BadZipFile, OSError) as err:
        raise VerifyError(f"{wheel} is not a readable wheel (zip): {err}",
                          hint="rebuild it; a truncated download or a failed build leaves such files")
    return dest


def import_roots(root: Path) -> list[Path]:
    """The directories that go on ``sys.path``: the root and ``*.data/{purelib,platlib}``."""
    roots = [root]
    for data in sorted(root.glob("*.data")):
        roots += [p for p in (data / "purelib", data / "platlib") if p.is_dir()]
    return roots


def module_of(relative: Path) -> str | None:
    """The dotted module name of an extension file relative to an import root, or None."""
    m = _EXT_RE.match(relative.name)
    if not m or any(not part.isidentifier() for part in relative.parent.parts):
        return None
    return ".".join([*relative.parent.parts, m["name"]])


def _is_extension(path: Path, name: str) -> bool:
    # A plain "libfoo.so" shipped next to modules is a library, not a module: only a file
    # that exports PyInit_<name> can be imported.
    try:
        with ElfLib(path) as lib:
            return lib.defines(f"PyInit_{name}")
    except (OSError, ValueError):
        return False


def extension_modules(root: Path) -> list[str]:
    """Dotted names of the Python extension modules under ``root`` (``pkg._C``)."""
    found = []
    for base in import_roots(root):
        for path in sorted(base.rglob("*.so")):
            rel = path.relative_to(base)
            if rel.parts[0].endswith((".dist-info", ".data")) or any(p in _SKIP_DIRS for p in rel.parts):
                continue
            name = module_of(rel)
            if name and _is_extension(path, name.rsplit(".", 1)[-1]):
                found.append(name)
    return found


def top_level_modules(root: Path) -> list[str]:
    """Top-level import names: ``top_level.txt`` when the wheel has one, else derived from
    the files (packages, ``.py`` modules, extension modules) listed in ``RECORD``."""
    for info in sorted(root.glob("*.dist-info")):
        top = info / "top_level.txt"
        if top.is_file():
            names = [ln.strip() for ln in top.read_text().splitlines() if ln.strip()]
            return [n.replace("/", ".") for n in names if all(p.isidentifier() for p in n.split("/"))]
    names: list[str] = []
    for rel in _record_paths(root):
        first = rel.parts[0]
        if first.endswith((".dist-info", ".data")) or first in _SKIP_DIRS:
            continue
        if len(rel.parts) > 1 and first.isidentifier():
            names.append(first)  # a package (regular or namespace)
        elif rel.suffix == ".py" and rel.stem.isidentifier():
            names.append(rel.stem)
        elif (m := _EXT_RE.match(rel.name)):
            names.append(m["name"])
    return list(dict.fromkeys(names))


def _record_paths(root: Path) -> list[Path]:
    for info in sorted(root.glob("*.dist-info")):
        record = info / "RECORD"
        if record.is_file():
            return [Path(line.split(",")[0]) for line in record.read_text().splitlines() if line]
    return [p.relative_to(root) for p in sorted(root.rglob("*")) if p.is_file()]


def default_modules(root: Path) -> list[str]:
    """What the import check imports by default: the top-level names, then every extension
    module (importing a package does not always load its ``_C``)."""
    return list(dict.fromkeys([*top_level_modules(root), *extension_modules(root)]))


def wheel_lib_dirs(shared: list[Path]) -> list[Path]:
    """Directories of the wheel that hold shared objects (``pkg/``, ``pkg.libs/``)."""
    return list(dict.fromkeys(p.parent for p in shared))
