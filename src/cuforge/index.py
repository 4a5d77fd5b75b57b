"""``cuforge index``: each wheelhouse directory as a static PEP 503 / PEP 691 simple index.

One tree per platform/CUDA/torch directory, written beside its wheels::

    wheelhouse/linux-x86_64/cu130/torch2.14.1-cp311/
        cuforge_demo-0.1.0-cp311-cp311-linux_x86_64.whl
        simple/index.html  simple/index.json                    (the project list)
        simple/cuforge-demo/index.html  .../index.json          (files, ``#sha256=``,
                                                                 ``data-requires-python``)

so ``pip install --index-url file://.../simple cuforge-demo`` (or uv, or any static web server
over that directory) installs from it, with torch from its usual index as an extra index.
HTML and JSON carry the same facts; the JSON files are what a server that negotiates PEP 691
content types returns for ``application/vnd.pypi.simple.v1+json``.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.metadata import parse_email
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from . import platforms
from .digest import sha256_of
from .errors import ConfigError, VerifyError
from .wheelhouse import Wheelhouse

SIMPLE = "simple"
API_VERSION = "1.1"   # PEP 691 JSON with PEP 700's versions and sizes


@dataclass(frozen=True)
class IndexFile:
    """One wheel as the index lists it."""

    filename: str
    project: str              # canonical name (PEP 503 normalization)
    version: Version
    sha256: str
    size: int
    requires_python: str      # "" when the wheel does not say


@dataclass(frozen=True)
class IndexTree:
    """The index of one wheelhouse directory."""

    root: Path                # the directory holding the wheels; the index is root/simple
    files: tuple[IndexFile, ...]

    @property
    def projects(self) -> list[str]:
        return sorted({f.project for f in self.files})

    @property
    def url(self) -> str:
        """What ``--index-url`` takes: ``file:///.../simple/``."""
        return (self.root / SIMPLE).resolve().as_uri() + "/"


def wheel_dirs(paths: list[Path]) -> list[Path]:
    """Directories holding wheels: each path itself, or every such directory below it."""
    found: list[Path] = []
    for path in paths:
        if not path.is_dir():
            raise ConfigError(f"{path} is not a directory",
                              hint="pass a wheelhouse directory (or the wheelhouse root)")
        dirs = [path] + sorted(p for p in path.rglob("*") if p.is_dir() and
                               not any(part.startswith(".") or part == SIMPLE
                                       for part in p.relative_to(path).parts))
        found += [d for d in dirs if any(d.glob("*.whl")) and d not in found]
    return found


def scan(directory: Path) -> IndexTree:
    """Read every wheel in ``directory``: name, version, hash, size, Requires-Python.

    A wheel whose platform tags do not fit the platform directory it sits in
    (``linux-aarch64/...``) is an error: the index would offer it to the wrong machines."""
    target = _platform_of(directory)
    files = []
    for wheel in sorted(directory.glob("*.whl")):
        if wheel.name.startswith("."):
            continue                       # a publish in progress (.incoming-*)
        try:
            name, version, _build, _tags = parse_wheel_filename(wheel.name)
        except InvalidWheelFilename as err:
            raise VerifyError(f"{wheel} is not a valid wheel file name: {err}",
                              hint="rename or remove it; pip would refuse it too") from None
        if target is not None and not target.accepts(wheel.name):
            raise VerifyError(f"{wheel.name} does not run on {target.name}, but sits in "
                              f"{directory}", hint="move it to the wheelhouse of its platform")
        files.append(IndexFile(wheel.name, canonicalize_name(name), version, sha256_of(wheel),
                               wheel.stat().st_size, _requires_python(wheel)))
    return IndexTree(directory, tuple(sorted(files, key=lambda f: (f.project, f.version,
                                                                   f.filename))))


def write_index(tree: IndexTree) -> IndexTree:
    """Write ``tree.root/simple`` whole, then swap it in: a reader sees the old or the new
    index, never a mix. Runs under the wheelhouse lock, so no publish interleaves."""
    with Wheelhouse(tree.root).lock:
        staging = Path(tempfile.mkdtemp(prefix=".simple-", dir=tree.root))
        try:
            _write_tree(tree, staging)
            final = tree.root / SIMPLE
            old = tree.root / f".{SIMPLE}-old"
            shutil.rmtree(old, ignore_errors=True)
            if final.exists():
                os.replace(final, old)
            os.replace(staging, final)
            shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return tree


def write_indexes(paths: list[Path]) -> list[IndexTree]:
    """Scan every wheel directory under ``paths`` first (so a bad wheel stops everything before
    anything is written), then write one index per directory."""
    trees = [scan(d) for d in wheel_dirs(paths)]
    if not trees:
        raise ConfigError(f"no wheels under {', '.join(map(str, paths))}",
                          hint="build some first (`cuforge build`), or pass the wheelhouse dir")
    return [write_index(t) for t in trees]


def _write_tree(tree: IndexTree, dest: Path) -> None:
    projects = tree.projects
    _write(dest / "index.html", _page("Simple index", [
        f'<a href="{p}/">{p}</a>' for p in projects]))
    _write(dest / "index.json", json.dumps({
        "meta": {"api-version": API_VERSION},
        "projects": [{"name": p} for p in projects]}, indent=1))
    for project in projects:
        files = [f for f in tree.files if f.project == project]
        links = []
        for f in files:
            rp = (f' data-requires-python="{html.escape(f.requires_python)}"'
                  if f.requires_python else "")
            links.append(f'<a href="../../{f.filename}#sha256={f.sha256}"{rp}>{f.filename}</a>')
        _write(dest / project / "index.html", _page(f"Links for {project}", links))
        _write(dest / project / "index.json", json.dumps({
            "meta": {"api-version": API_VERSION},
            "name": project,
            "versions": sorted({str(f.version) for f in files}, key=Version),
            "files": [_json_file(f) for f in files]}, indent=1))


def _json_file(f: IndexFile) -> dict:
    entry: dict = {"filename": f.filename, "url": f"../../{f.filename}",
                   "hashes": {"sha256": f.sha256}, "size": f.size}
    if f.requires_python:
        entry["requires-python"] = f.requires_python
    return entry


def _page(title: str, links: list[str]) -> str:
    body = "\n".join(f"    {link}<br/>" for link in links)
    return (f'<!DOCTYPE html>\n<html>\n  <head>\n'
            f'    <meta name="pypi:repository-version" content="{API_VERSION}">\n'
            f'    <title>{html.escape(title)}</title>\n  </head>\n  <body>\n'
            f'    <h1>{html.escape(title)}</h1>\n{body}\n  </body>\n</html>\n')


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _requires_python(wheel: Path) -> str:
    """The ``Requires-Python`` of the wheel's METADATA ("" when absent)."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            meta = next((n for n in zf.namelist() if n.count("/") == 1
                         and n.endswith(".dist-info/METADATA")), None)
            if meta is None:
                raise VerifyError(f"{wheel.name} has no .dist-info/METADATA",
                                  hint="rebuild it; it is not a complete wheel")
            raw, _unparsed = parse_email(zf.read(meta))
    except (zipfile.BadZipFile, OSError) as err:
        raise VerifyError(f"{wheel} is not a readable wheel (zip): {err}",
                          hint="rebuild it; a truncated copy or a failed build leaves such files")
    return str(raw.get("requires_python", "")).strip()


def _platform_of(directory: Path) -> platforms.Platform | None:
    """The platform whose name is a component of ``directory`` (``linux-aarch64``), if any."""
    known = platforms.known()
    return next((known[part] for part in reversed(directory.resolve().parts) if part in known),
                None)
