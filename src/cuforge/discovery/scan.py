"""Walk a checkout for every folder that builds a torch extension, at any depth, and say why
each one was found (file:line) and why each left-out folder was left out. Git submodules that
are not checked out are read from their fetched tree (``submodules.fetched_tree``) as if they
were in place."""

from __future__ import annotations

import fnmatch
import shutil
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from cuforge.config.recipes import BuildKind
from cuforge.discovery.buildfiles import FolderBuild, read_folder
from cuforge.discovery.submodules import Submodule, fetched_tree, list_submodules
from cuforge.pipeline.fingerprint import IGNORED

# Folders never walked, and why (the dry run says it); __pycache__ and other dot-folders are
# left out without a word
_LEFT_OUT = {".git": "git's own data", "build": "a build output folder",
             "dist": "a build output folder", "*.egg-info": "setuptools' metadata folder",
             "node_modules": "JavaScript packages", "site-packages": "installed packages",
             ".cuforge": "cuforge's own state"}
_SILENT = ("__pycache__", ".*")


@dataclass(frozen=True)
class FoundExtension:
    """A folder of the checkout that builds a torch extension."""

    folder: PurePosixPath            # relative to the checkout ("submodules/simple-knn")
    tree: Path                       # its files: the checkout's folder or a fetched submodule's
    build: FolderBuild
    submodule: Submodule | None = None   # the submodule it lives in, when not checked out

    def why(self) -> str:
        return "; ".join(c.text() for c in self.build.calls)

    @property
    def optional_because(self) -> str:
        """Why setup may go on without it ("" = the checkout's own build builds it, so it is
        required): every call commented out, or a CMake build its setup.py does not run."""
        if self.build.kind is BuildKind.CMAKE:
            return "a CMake build the checkout's pip install does not run"
        if all(c.commented for c in self.build.calls):
            return "the checkout's own build has it commented out"
        return ""


@dataclass(frozen=True)
class LeftOut:
    folder: PurePosixPath
    reason: str


@dataclass
class Discovery:
    root: Path
    found: list[FoundExtension] = field(default_factory=list)
    left_out: list[LeftOut] = field(default_factory=list)
    submodules: list[Submodule] = field(default_factory=list)
    fetched: dict[PurePosixPath, Path] = field(default_factory=dict)   # submodule -> its tree


def discover(root: Path, cache_dir: Path) -> Discovery:
    """Every torch extension build under ``root``; submodules that are not checked out are
    fetched at their recorded commit into ``cache_dir`` first (``SourceError`` when that
    cannot be done, naming ``git submodule update``)."""
    seen = Discovery(root, submodules=list_submodules(root))
    fetched = {s.path: (s, fetched_tree(s, cache_dir, root))
               for s in seen.submodules if not s.checked_out}
    seen.fetched = {path: tree for path, (_, tree) in fetched.items()}
    pending: list[tuple[PurePosixPath, Path, Submodule | None]] = [(PurePosixPath("."), root, None)]
    while pending:
        rel, disk, sub = pending.pop()
        build = read_folder(disk, str(rel))
        if build is not None and build.kind is not None:
            seen.found.append(FoundExtension(rel, disk, build, sub))
        elif build is not None and str(rel) != "." and not _under_left_out(rel, seen):
            seen.left_out.append(LeftOut(rel, build.why_not))   # the top of its tree only
        for child in sorted((c for c in disk.iterdir() if c.is_dir() and not c.is_symlink()),
                            reverse=True):
            inner = rel / child.name
            reason = _left_out(child)
            if reason:
                seen.left_out.append(LeftOut(inner, reason))
            elif inner in fetched:
                pending.append((inner, fetched[inner][1], fetched[inner][0]))
            elif not any(fnmatch.fnmatch(child.name, p) for p in _SILENT):
                pending.append((inner, child, sub))
    seen.found.sort(key=lambda f: str(f.folder))
    seen.left_out.sort(key=lambda f: str(f.folder))
    return seen


def _under_left_out(rel: PurePosixPath, seen: Discovery) -> bool:
    """Whether a folder above ``rel`` was said to build no torch extension (glm's tests under
    glm: one line, not ten)."""
    return any(x.folder in rel.parents for x in seen.left_out)


def _left_out(folder: Path) -> str:
    """Why ``folder`` is not walked ("" = walk it)."""
    if (folder / "pyvenv.cfg").is_file():
        return "a virtual environment (pyvenv.cfg)"
    if (folder / "conda-meta").is_dir():
        return "a conda environment (conda-meta/)"
    for pattern, reason in _LEFT_OUT.items():
        if fnmatch.fnmatch(folder.name, pattern):
            return reason
    return ""


def composed_tree(ext: FoundExtension, seen: Discovery, cache_dir: Path) -> Path:
    """The files ``ext`` builds from: its folder, with every fetched submodule inside it put
    in place (a rasterizer checked out without its glm)."""
    inside = {path: tree for path, tree in seen.fetched.items() if ext.folder in path.parents}
    return _compose(seen.root, ext.folder, ext.tree, inside, cache_dir)


def tree_of(root: Path, folder: str, cache_dir: Path) -> Path:
    """Where the files of ``folder`` (relative to ``root``) are: in the checkout, or in the
    fetched tree of the not-checked-out submodule that holds it; with the fetched
    submodules inside it put in place."""
    inside, base, at = {}, root / folder, PurePosixPath(folder)
    for sub in list_submodules(root):
        if sub.checked_out:
            continue
        if at == sub.path or sub.path in at.parents:
            base = fetched_tree(sub, cache_dir, root) / at.relative_to(sub.path)
        elif at in sub.path.parents:
            inside[sub.path] = fetched_tree(sub, cache_dir, root)
    return _compose(root, at, base, inside, cache_dir)


def _compose(root: Path, folder: PurePosixPath, base: Path, inside: dict[PurePosixPath, Path],
             cache_dir: Path) -> Path:
    """``base`` itself, or, when submodules were fetched inside ``folder``, one copy of it
    with them in place under ``cache_dir`` (made again each time: nothing stale kept)."""
    if not inside:
        return base
    dest = cache_dir / "composed" / f"{root.name}-{str(folder).replace('/', '-')}"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(base, dest, ignore=shutil.ignore_patterns(*IGNORED), symlinks=True)
    for path, tree in inside.items():
        target = dest / path.relative_to(folder)
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(tree, target, ignore=shutil.ignore_patterns(*IGNORED), symlinks=True)
    return dest
