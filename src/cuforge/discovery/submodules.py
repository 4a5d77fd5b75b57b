"""A checkout's git submodules (2DGS and GOF keep their rasterizers as submodules, 3DGS too):
which are checked out, and for those that are not, their tree at the commit the checkout
records, fetched into cuforge's source cache (nested submodules filled in the same way). The
user's tree is never written: ``git submodule update`` is theirs to run."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from cuforge.core.errors import CuforgeError, SourceError
from cuforge.core.runner import capture
from cuforge.pipeline import sources

UPDATE = "submodule update --init --recursive"   # git's own command, run by the user


@dataclass(frozen=True)
class Submodule:
    path: PurePosixPath   # relative to the checkout
    url: str              # absolute (a relative .gitmodules URL resolved against origin)
    commit: str           # what the checkout records (its gitlink)
    checked_out: bool

    def text(self) -> str:
        state = "checked out" if self.checked_out else "not checked out"
        return f"{self.path}: git submodule {self.url} @ {self.commit[:12]} ({state})"


def list_submodules(root: Path) -> list[Submodule]:
    """The submodules ``root`` (a git clone) records, and those of each one checked out, by
    path from ``root``; [] for a tree without .gitmodules or outside git (a downloaded
    archive has no gitlinks to read)."""
    if not (root / ".gitmodules").is_file():
        return []
    try:
        declared = _declared(root / ".gitmodules")
        links = sources.gitlinks_in(root, "HEAD")
    except CuforgeError:
        return []
    found = []
    for path, url in sorted(declared.items()):
        if path in links:
            folder = root / path
            sub = Submodule(PurePosixPath(path), _absolute(url, root), links[path],
                            folder.is_dir() and any(folder.iterdir()))
            found.append(sub)
            if sub.checked_out:   # its own submodules (glm in a rasterizer) may not be
                found += [replace(inner, path=sub.path / inner.path)
                          for inner in list_submodules(folder)]
    return found


def _declared(gitmodules: Path) -> dict[str, str]:
    """``{path: url}`` of every submodule a .gitmodules file declares with both."""
    config = capture(["git", "config", "-f", str(gitmodules), "--get-regexp",
                      r"^submodule\..*\.(path|url)$"], error=SourceError)
    paths, urls = {}, {}
    for line in config.splitlines():
        key, _, value = line.partition(" ")
        name, _, field = key.removeprefix("submodule.").rpartition(".")
        (paths if field == "path" else urls)[name] = value.strip()
    return {path: urls[name] for name, path in paths.items() if name in urls}


def _absolute(url: str, root: Path) -> str:
    """A .gitmodules URL as git would fetch it: ``../x.git`` is relative to origin's URL."""
    if not url.startswith(("./", "../")):
        return url
    try:
        base = capture(["git", "-C", str(root), "remote", "get-url", "origin"]).strip()
    except CuforgeError:
        base = str(root)
    return _join(base, url)


def fetched_tree(sub: Submodule, cache_dir: Path, checkout: Path) -> Path:
    """The tree of ``sub`` at its recorded commit under ``cache_dir`` (fetched once; its own
    submodules filled in recursively). Offline or unreachable: one SourceError naming
    ``git submodule update``."""
    dest = cache_dir / "submodules" / f"{sub.path.name}-{sub.commit[:12]}"
    done = dest.parent / f".{dest.name}.complete"
    if done.is_file() and dest.is_dir():
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    try:
        _fill(sub.url, sub.commit, cache_dir, dest)
    except SourceError as err:
        shutil.rmtree(dest, ignore_errors=True)
        raise SourceError(f"{sub.path} is a git submodule of {checkout} that is not checked "
                          f"out, and cuforge cannot fetch it ({sub.url} @ {sub.commit[:12]}): "
                          f"{err.summary}",
                          hint=f"check it out and run setup again: git -C {checkout} "
                               f"{UPDATE}") from None
    done.write_text(f"{sub.url} {sub.commit}\n")
    return dest


def _fill(url: str, commit: str, cache_dir: Path, dest: Path) -> None:
    sources.export_commit(url, commit, cache_dir, dest)
    nested = sources.gitlinks(url, commit, cache_dir)
    if not nested or not (dest / ".gitmodules").is_file():
        return
    for path, inner in _declared(dest / ".gitmodules").items():
        if path in nested:
            target = dest / path
            shutil.rmtree(target, ignore_errors=True)
            _fill(_join(url, inner) if inner.startswith(("./", "../")) else inner,
                  nested[path], cache_dir, target)


def _join(base: str, relative: str) -> str:
    for part in relative.split("/"):
        if part == "..":
            base = base.rstrip("/").rsplit("/", 1)[0]
        elif part not in (".", ""):
            base = f"{base.rstrip('/')}/{part}"
    return base
