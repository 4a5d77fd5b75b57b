"""``cuforge index``: each wheelhouse directory as a static PEP 503 / PEP 691 simple index,
kept current by every publish into that directory.

One tree per platform/CUDA/torch directory, written beside its wheels::

    wheelhouse/linux-x86_64/cu130/torch2.14.1-cp311/
        cuforge_demo-0.1.0+cu130torch2.14.1-cp311-cp311-linux_x86_64.whl
        simple/index.html  simple/index.json                    (the project list)
        simple/cuforge-demo/index.html  .../index.json          (files, ``#sha256=``,
                                                                 ``data-requires-python``)
        simple/.files/<sha256>/<wheel>                          (what the pages link)

so ``pip install --index-url file://.../simple cuforge-demo`` (or uv, or any static web server
over that directory) installs from it, with torch from its usual index as an extra index.
HTML and JSON carry the same facts; the JSON files are what a server that negotiates PEP 691
content types returns for ``application/vnd.pypi.simple.v1+json``.

**A listed hash always matches the bytes its link serves.** The pages link the index's own
copy of each wheel, stored by its sha256 under ``simple/.files`` (a hard link to the wheel:
no second copy on disk). A publish replaces a wheel by renaming a new file over its name,
which leaves the index's copy as it was, so a reader holding the old page still downloads the
old bytes it lists, until the pages are rewritten. Each page is replaced by a rename of its
own; copies are removed one rewrite after the last page naming them, so an install that read a
page just before a rewrite still finds its file. :func:`refresh` runs in every publish, under
the wheelhouse lock, and in the recovery of a killed one; :func:`problems` is ``cuforge
verify``'s check that the index and the directory agree.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.metadata import parse_email
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from cuforge.config import platforms
from cuforge.core.digest import sha256_of
from cuforge.core.errors import ConfigError, VerifyError

SIMPLE = "simple"    # a wheelhouse directory's index lives in <dir>/simple/

FILES = ".files"      # the index's copies of the wheels, by sha256; dotted, so pypiserver
                      # (which skips dot paths) does not list them beside the wheels
API_VERSION = "1.1"   # PEP 691 JSON with PEP 700's versions and sizes
_TEMP = ".tmp-"       # a page or a copy being written (removed by the next refresh)
_HREF = re.compile(r'href="([^"#]+)#sha256=([0-9a-f]{64})"')


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


def has_index(directory: Path) -> bool:
    return (directory / SIMPLE).is_dir()


def wheels_in(directory: Path) -> list[Path]:
    """The wheels an index of ``directory`` lists, checked: a valid file name, platform tags
    that fit the platform directory it sits in (``linux-aarch64/...``; else the index would
    offer it to the wrong machines), a readable METADATA. Not those being published."""
    platform = _platform_of(directory)
    wheels = []
    for wheel in sorted(directory.glob("*.whl")):
        if wheel.name.startswith("."):
            continue                       # a publish in progress (.incoming-*)
        try:
            parse_wheel_filename(wheel.name)
        except InvalidWheelFilename as err:
            raise VerifyError(f"{wheel} is not a valid wheel file name: {err}",
                              hint="rename or remove it; pip would refuse it too") from None
        if platform is not None and not platform.accepts(wheel.name):
            raise VerifyError(f"{wheel.name} does not run on {platform.name}, but sits in "
                              f"{directory}", hint="move it to the wheelhouse of its platform")
        wheels.append(wheel)
    return wheels


def rewrite(directory: Path) -> IndexTree:
    """Write (or rewrite) ``directory``'s index; the caller holds the wheelhouse lock
    (``Wheelhouse.write_index``)."""
    return _update(directory)


def checked_dirs(paths: list[Path]) -> list[Path]:
    """The wheel directories under ``paths``, every wheel checked first (so a bad wheel stops
    everything before anything is written)."""
    dirs = wheel_dirs(paths)
    if not dirs:
        raise ConfigError(f"no wheels under {', '.join(map(str, paths))}",
                          hint="build some first (`cuforge build`), or pass the wheelhouse dir")
    for d in dirs:
        for wheel in wheels_in(d):
            _requires_python(wheel)
    return dirs


def refresh(directory: Path) -> IndexTree | None:
    """Bring ``directory``'s index up to date with its wheels, if it has an index and it is
    not (the caller holds the wheelhouse lock: ``Wheelhouse.publish`` and its recovery). The
    check is cheap: each listed copy must be the same file (inode) as the wheel of that name,
    and the names must be the same; only a stale index is rewritten."""
    if not has_index(directory):
        return None
    _remove_leftovers(directory / SIMPLE)
    if _current(directory):
        return None
    return _update(directory)


def problems(directory: Path) -> list[str]:
    """Where ``directory``'s index and its wheels disagree (``cuforge verify``): a listed hash
    that its copy or the wheel of that name does not have, a wheel not listed, a listed wheel
    that is gone, HTML and JSON pages that differ. Reads every byte: a full check."""
    simple = directory / SIMPLE
    listed = _listed(simple)
    out: list[str] = []
    root = json.loads((simple / "index.json").read_text()) if (simple / "index.json").is_file() \
        else {"projects": []}
    named = {canonicalize_name(p["name"]) for p in root.get("projects", [])}
    for project in sorted(set(listed.projects) ^ named):
        out.append(f"project {project} is " + ("not in simple/index.json" if project not in named
                                               else "in simple/index.json without a page"))
    for project in listed.projects:
        page = simple / project / "index.html"
        links = set(_HREF.findall(page.read_text())) if page.is_file() else set()
        if links != {(url, sha) for _, url, sha in listed.links(project)}:
            out.append(f"simple/{project}/index.html and index.json list different files")
    for name, url, sha in listed.all():
        copy = (simple / listed.project_of[name] / url).resolve()
        wheel = directory / name
        if not copy.is_relative_to((simple / FILES).resolve()):
            out.append(f"{name} is linked by its wheelhouse path, not by the index's own copy "
                       "(an index written before indexes kept copies): a rebuild changes it "
                       "under the listed hash")
        elif not copy.is_file():
            out.append(f"the index's copy of {name} is gone")
        elif sha256_of(copy) != sha:
            out.append(f"the index's copy of {name} no longer has the listed sha256 {sha[:12]}… "
                       "(its bytes were changed in place)")
        if not wheel.is_file():
            out.append(f"the index lists {name}, which is not in {directory}")
        elif not (copy.is_file() and os.path.samefile(copy, wheel)) and sha256_of(wheel) != sha:
            out.append(f"{name} is not the file the index lists (sha256 {sha[:12]}…): it was "
                       "rebuilt or replaced after the index was written")
    for wheel in wheels_in(directory):
        if wheel.name not in listed.project_of:
            out.append(f"{wheel.name} is not listed")
    return out


def verify_index(directory: Path) -> None:
    """``cuforge verify`` of a wheelhouse directory with an index: VerifyError, naming every
    disagreement and the fix, unless the index lists exactly its wheels, by their bytes."""
    found = problems(directory)
    if found:
        raise VerifyError(
            f"the index of {directory} (simple/) is stale: " + "; ".join(found),
            hint=f"rewrite it: cuforge index {directory} (a wheel whose manifest check fails "
            "too was altered: rebuild that one instead)")


# -- reading an index -----------------------------------------------------------------------------
@dataclass(frozen=True)
class _Listed:
    """What the JSON pages of an index list: (project, url, sha256) per file name."""

    entries: dict[str, tuple[str, str, str]]

    @property
    def project_of(self) -> dict[str, str]:
        return {name: e[0] for name, e in self.entries.items()}

    @property
    def projects(self) -> list[str]:
        return sorted({e[0] for e in self.entries.values()})

    def links(self, project: str) -> list[tuple[str, str, str]]:
        return [(name, url, sha) for name, (p, url, sha) in self.entries.items() if p == project]

    def all(self) -> list[tuple[str, str, str]]:
        return [(name, url, sha) for name, (_, url, sha) in sorted(self.entries.items())]


def _listed(simple: Path) -> _Listed:
    entries = {}
    for page in sorted(simple.glob("*/index.json")):
        if page.parent.name.startswith("."):
            continue
        try:
            data = json.loads(page.read_text())
        except ValueError:
            continue                       # an unreadable page lists nothing: stale
        for f in data.get("files", []):
            entries[f["filename"]] = (page.parent.name, f["url"], f["hashes"]["sha256"])
    return _Listed(entries)


def _current(directory: Path) -> bool:
    """Whether every wheel is listed, nothing else is, and each listed copy is the wheel's
    own file (a hard link: the same inode, hence the same bytes)."""
    simple = directory / SIMPLE
    listed = _listed(simple)
    wheels = {w.name for w in directory.glob("*.whl") if not w.name.startswith(".")}
    if set(listed.project_of) != wheels or not (simple / "index.json").is_file():
        return False
    store = (simple / FILES).resolve()
    for name, url, _sha in listed.all():
        copy = (simple / listed.project_of[name] / url).resolve()
        try:
            if not copy.is_relative_to(store) or not os.path.samefile(copy, directory / name):
                return False
        except OSError:
            return False
    return True


# -- writing one ----------------------------------------------------------------------------------
def _update(directory: Path) -> IndexTree:
    """Write the index of ``directory`` from its wheels now (under the wheelhouse lock)."""
    wheels = wheels_in(directory)
    simple = directory / SIMPLE
    store = simple / FILES
    store.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(simple)
    # the copies the pages list now, with their hashes: kept one more rewrite, reused if unchanged
    known = {(simple / p / url).resolve(): sha for p, url, sha in _listed(simple).entries.values()}
    tree = IndexTree(directory, _sorted(_describe(*_store(w, store, known)) for w in wheels))
    _write_pages(tree, simple)
    keep = {(store / f.sha256 / f.filename).resolve() for f in tree.files} | set(known)
    for copy in store.glob("*/*"):
        if copy.resolve() not in keep:          # one rewrite after its last page: readers
            copy.unlink()                        # that read that page have had their turn
            if not any(copy.parent.iterdir()):
                copy.parent.rmdir()
    return tree


def _store(wheel: Path, store: Path, known: dict[Path, str]) -> tuple[Path, str]:
    """The index's copy of ``wheel``: linked first, then hashed, so the listed sha256 is that
    of the bytes the link serves even if the wheel is replaced meanwhile. A copy already in
    the store as the same file (inode) keeps its known hash."""
    fd, tmp = tempfile.mkstemp(prefix=_TEMP, dir=store)
    os.close(fd)
    os.unlink(tmp)
    try:
        os.link(wheel, tmp)
    except OSError:                          # no hard links on this file system: a real copy
        shutil.copyfile(wheel, tmp)
    try:
        sha = next((s for c, s in known.items() if c.is_file() and os.path.samefile(c, tmp)),
                   None) or sha256_of(Path(tmp))
        final = store / sha / wheel.name
        if final.is_file():
            os.unlink(tmp)                   # the same bytes, already stored
        else:
            final.parent.mkdir(exist_ok=True)
            os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return final, sha


def _describe(wheel: Path, sha: str) -> IndexFile:
    name, version, _build, _tags = parse_wheel_filename(wheel.name)
    return IndexFile(wheel.name, canonicalize_name(name), version, sha, wheel.stat().st_size,
                     _requires_python(wheel))


def _sorted(files) -> tuple[IndexFile, ...]:
    return tuple(sorted(files, key=lambda f: (f.project, f.version, f.filename)))


def _write_pages(tree: IndexTree, simple: Path) -> None:
    """Each project's pages, then the project list, each replaced by a rename of its own;
    then the pages of projects that have no wheel any more are removed."""
    projects = tree.projects
    for project in projects:
        files = [f for f in tree.files if f.project == project]
        links = []
        for f in files:
            rp = (f' data-requires-python="{html.escape(f.requires_python)}"'
                  if f.requires_python else "")
            links.append(f'<a href="{_url(f)}#sha256={f.sha256}"{rp}>{f.filename}</a>')
        _write(simple / project / "index.json", json.dumps({
            "meta": {"api-version": API_VERSION},
            "name": project,
            "versions": sorted({str(f.version) for f in files}, key=Version),
            "files": [_json_file(f) for f in files]}, indent=1))
        _write(simple / project / "index.html", _page(f"Links for {project}", links))
    _write(simple / "index.json", json.dumps({
        "meta": {"api-version": API_VERSION},
        "projects": [{"name": p} for p in projects]}, indent=1))
    _write(simple / "index.html", _page("Simple index", [
        f'<a href="{p}/">{p}</a>' for p in projects]))
    for page_dir in simple.iterdir():
        if page_dir.is_dir() and not page_dir.name.startswith(".") and \
                page_dir.name not in projects:
            shutil.rmtree(page_dir)


def _url(f: IndexFile) -> str:
    """The link from ``simple/<project>/`` to the index's copy."""
    return f"../{FILES}/{f.sha256}/{f.filename}"


def _json_file(f: IndexFile) -> dict:
    entry: dict = {"filename": f.filename, "url": _url(f),
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
    """Write ``path`` whole, then rename it in: a reader sees the old page or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=_TEMP, dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _remove_leftovers(simple: Path) -> None:
    """Pages and copies a killed write left half-done (never listed: nothing links them), and
    the ``.simple-*`` trees of cuforge versions that swapped the whole index."""
    for tmp in [*simple.glob(f"{_TEMP}*"), *simple.glob(f"*/{_TEMP}*")]:
        tmp.unlink(missing_ok=True)
    for old in simple.parent.glob(".simple-*"):
        shutil.rmtree(old, ignore_errors=True)


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
