"""Fetch a recipe's source into a fresh working tree: a pinned git commit (optionally a
subdirectory of a bigger repo, as MILo's submodules/ folders are), a checksummed sdist, or a
local path. Clones and downloads are cached; the working tree is always a fresh copy, so
patches never touch the cache or a user's checkout."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tarfile
import urllib.request
import zipfile
from datetime import datetime, timezone
from pathlib import Path

from filelock import FileLock

from cuforge.core import faults
from cuforge.core.digest import sha256_of
from cuforge.core.errors import SourceError
from cuforge.pipeline.fingerprint import IGNORED, tree_files
from cuforge.config.recipes import Source
from cuforge.core.runner import Step, capture

_IGNORE = shutil.ignore_patterns(*IGNORED)


def fetch(source: Source, *, project_root: Path, cache_dir: Path, dest: Path,
          stamp: str = "", fresh: bool = False) -> Path:
    """Materialise ``source`` at ``dest`` and return the directory to build.

    With a ``stamp`` (source + patches identity) equal to the one left by the last fetch, a
    pinned git/sdist tree is kept as is, build artefacts included, so an interrupted long
    build (spconv: hundreds of nvcc steps) resumes; ``fresh`` (``--rebuild``) never keeps it.
    A local path is synced over the old copy: only files whose content differs are copied,
    with a fresh time, so ninja rebuilds exactly what changed (whatever time the user's file
    carries). Either way the source's time is written beside the tree (``epoch_file``).
    """
    marker = dest.parent / f".{dest.name}.stamp"
    previous, _, relative = (marker.read_text() if marker.exists() else "").partition("\n")
    if stamp and dest.exists() and previous == stamp and not fresh:
        if source.path:
            sync_tree(resolve_path(source.path, project_root), dest)
        if not epoch_file(dest).exists():   # a tree fetched before fetches wrote it
            _write_epoch(source, cache_dir, dest)
        return dest / relative
    marker.unlink(missing_ok=True)
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if source.path:
        root = _copy_path(resolve_path(source.path, project_root), dest)
    elif source.git:
        root = _export_git(source, cache_dir / "git", dest)
    elif source.sdist:
        root = _extract_sdist(source, cache_dir / "sdist", dest)
    else:
        raise SourceError("recipe has no source")
    _write_epoch(source, cache_dir, dest)
    faults.point("fetch")
    if stamp:
        marker.write_text(f"{stamp}\n{root.relative_to(dest)}")
    return root


# SOURCE_DATE_EPOCH of a local tree: 1980-01-01 UTC, the earliest time a zip entry can hold.
# A local tree has no time of its own (its files' times are the user's edits, its copies'
# the copy's); its content is already in the wheel, byte for byte.
LOCAL_EPOCH = 315532800


def epoch_file(dest: Path) -> Path:
    """Where the fetch of a tree into ``dest`` writes its source's time (seconds), read by the
    build (``SOURCE_DATE_EPOCH``) and by the publish (the wheel's zip times)."""
    return dest.parent / f".{dest.name}.epoch"


def source_date_epoch(source: Source, cache_dir: Path) -> int:
    """The source's own time: a pinned commit's committer time, the newest member of a pinned
    sdist, ``LOCAL_EPOCH`` for a local tree. The source, not the build, decides it, so every
    build of the same source says the same (docs/reliability.md, "Reproducible wheels")."""
    if source.git:
        mirror = _mirror_path(cache_dir / "git", source.git)
        out = subprocess.run(["git", "-C", str(mirror), "show", "-s", "--format=%ct",
                              f"{source.commit}^{{commit}}"], capture_output=True, text=True)
        if out.returncode != 0 or not out.stdout.strip().isdigit():
            raise SourceError(f"cannot read the time of {source.git}@{source.commit[:12]}: "
                              f"{out.stderr.strip()}", hint="delete the mirror under "
                              f"{cache_dir / 'git'} and build again")
        return int(out.stdout.strip())
    if source.sdist:
        archive = _archive_path(source, cache_dir / "sdist")
        if archive.suffix == ".zip":
            with zipfile.ZipFile(archive) as zf:
                times = [int(datetime(*i.date_time, tzinfo=timezone.utc).timestamp())
                         for i in zf.infolist()]
        else:
            with tarfile.open(archive) as tar:
                times = [int(m.mtime) for m in tar.getmembers()]
        return max(times, default=LOCAL_EPOCH)
    return LOCAL_EPOCH


def _write_epoch(source: Source, cache_dir: Path, dest: Path) -> None:
    epoch_file(dest).write_text(f"{source_date_epoch(source, cache_dir)}\n")


def describe_steps(source: Source, project_root: Path, cache_dir: Path, dest: Path) -> list[Step]:
    """What fetch does, as commands, for --dry-run."""
    if source.git:
        mirror = _mirror_path(cache_dir / "git", source.git)
        return [Step(("git", "clone", "--mirror", source.git, str(mirror)),
                     description="clone once into the cache (later: git fetch)"),
                Step(("git", "-C", str(mirror), "archive", source.commit, source.subdir or "."),
                     description=f"export {source.commit[:12]} into {dest}")]
    if source.sdist:
        return [Step(("download", source.sdist, f"sha256={source.sha256}"),
                     description=f"fetch into the cache and unpack into {dest}")]
    return [Step(("copy", str(resolve_path(source.path, project_root)), str(dest)),
                 description="copy the local source tree")]


def sync_tree(src: Path, dest: Path) -> list[str]:
    """Copy into ``dest`` the files of ``src`` whose content differs (new ones included) and
    return their relative paths. Copies get the current time, never the source's: a file
    reverted to older content must still look newer than the objects built from it."""
    if not src.is_dir():
        raise SourceError(f"local source {src} does not exist",
                          hint="fix the recipe's [source] path or the --src NAME=PATH argument")
    theirs, ours = tree_files(src), tree_files(dest)
    changed = [rel for rel, meta in theirs.items() if ours.get(rel) != meta]
    for rel in changed:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink() or target.exists():
            target.unlink()
        if (src / rel).is_symlink():
            target.symlink_to((src / rel).readlink())
        else:
            shutil.copyfile(src / rel, target)
    return changed


def resolve_path(path: str, project_root: Path) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else project_root / p


def _copy_path(src: Path, dest: Path) -> Path:
    if not src.is_dir():
        raise SourceError(f"local source {src} does not exist",
                          hint="fix the recipe's [source] path or the --src NAME=PATH argument")
    shutil.copytree(src, dest, ignore=_IGNORE, symlinks=True)
    return dest


def _mirror_path(cache: Path, url: str) -> Path:
    name = url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
    return cache / f"{name}-{hashlib.sha256(url.encode()).hexdigest()[:12]}.git"


def _export_git(source: Source, cache: Path, dest: Path) -> Path:
    mirror = _mirror_path(cache, source.git)
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(str(mirror) + ".lock"):
        if not mirror.exists():
            _git(["clone", "--quiet", "--mirror", source.git, str(mirror)], source)
        if not _has_commit(mirror, source.commit):
            _git(["-C", str(mirror), "fetch", "--quiet", "origin"], source)
        if not _has_commit(mirror, source.commit):
            raise SourceError(f"{source.git} has no commit {source.commit}",
                              hint="fix the pinned commit in the recipe")
        dest.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(mirror), "archive", "--format=tar",
                                  source.commit], capture_output=True)
        if archive.returncode != 0:
            raise SourceError(f"git archive of {source.commit} failed: "
                              f"{archive.stderr.decode(errors='replace').strip()}")
        tmp_tar = dest.parent / f".{dest.name}.tar"
        tmp_tar.write_bytes(archive.stdout)
        with tarfile.open(tmp_tar) as tar:
            tar.extractall(dest, filter="data")
        tmp_tar.unlink()
    root = dest / source.subdir if source.subdir else dest
    if not root.is_dir():
        raise SourceError(f"{source.git}@{source.commit[:12]} has no directory {source.subdir!r}",
                          hint="fix `subdir` in the recipe's [source]")
    return root


def _has_commit(mirror: Path, commit: str) -> bool:
    return subprocess.run(["git", "-C", str(mirror), "cat-file", "-e", f"{commit}^{{commit}}"],
                          capture_output=True).returncode == 0


def _git(args: list[str], source: Source) -> None:
    try:
        capture(["git", *args], error=SourceError)
    except SourceError as err:
        raise SourceError(f"cannot fetch {source.git}: {err}",
                          hint="check the URL and your network, or build from a local checkout "
                          "with --src NAME=PATH") from None


def _extract_sdist(source: Source, cache: Path, dest: Path) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    archive = _archive_path(source, cache)
    with FileLock(str(archive) + ".lock"):
        if not archive.exists() or sha256_of(archive) != source.sha256:
            _download(source.sdist, archive)
        digest = sha256_of(archive)
        if digest != source.sha256:
            archive.unlink()
            raise SourceError(f"checksum mismatch for {source.sdist}: expected sha256 "
                              f"{source.sha256}, got {digest}",
                              hint="the upstream file changed or the download is corrupt; check "
                              "the index and update `sha256` in the recipe if the change is "
                              "legitimate")
    # Unpacked beside dest, then the single top folder (name-version/) becomes dest itself:
    # the tree's path is known before the download (the plan names it).
    unpack = dest.parent / f".{dest.name}.unpack"
    shutil.rmtree(unpack, ignore_errors=True)
    unpack.mkdir(parents=True)
    try:
        if archive.suffix == ".zip":
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(unpack)
        else:
            with tarfile.open(archive) as tar:
                tar.extractall(unpack, filter="data")
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as err:
        shutil.rmtree(unpack, ignore_errors=True)
        raise SourceError(f"cannot unpack {archive.name} ({source.sdist}): {err}",
                          hint="the archive is corrupt or not a tar/zip (its sha256 matches the "
                          "recipe, so the pinned file itself is bad): pin a good release and its "
                          "sha256") from None
    entries = list(unpack.iterdir())
    if len(entries) == 1 and entries[0].is_dir():
        entries[0].rename(dest)
        unpack.rmdir()
    else:
        unpack.rename(dest)
    return dest


def _archive_path(source: Source, cache: Path) -> Path:
    return cache / source.sdist.rsplit("/", 1)[-1].split("#")[0]


def _download(url: str, target: Path) -> None:
    tmp = target.with_suffix(target.suffix + ".part")
    try:
        if url.startswith(("/", "file:")):
            shutil.copyfile(url.removeprefix("file://"), tmp)
        else:
            with urllib.request.urlopen(url, timeout=60) as resp, open(tmp, "wb") as out:
                shutil.copyfileobj(resp, out)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise SourceError(f"cannot download {url}: {err}",
                          hint="check your network, or build from a local copy with --src") from None
    tmp.replace(target)


def export_commit(url: str, commit: str, cache_dir: Path, dest: Path) -> Path:
    """The tree of ``url`` at ``commit`` at ``dest`` (cloned once into ``cache_dir``'s git
    mirrors, like a recipe's pinned source; git submodules of it are not filled in)."""
    return _export_git(Source(git=url, commit=commit), cache_dir / "git", dest)


def gitlinks(url: str, commit: str, cache_dir: Path) -> dict[str, str]:
    """The git submodules ``url`` records at ``commit`` (after :func:`export_commit`):
    ``{path: commit}``, read from the cached mirror."""
    return gitlinks_in(_mirror_path(cache_dir / "git", url), commit)


def gitlinks_in(repo: Path, commit: str) -> dict[str, str]:
    """``{path: commit}`` of the gitlinks (submodules) in ``repo``'s tree at ``commit``."""
    listing = capture(["git", "-C", str(repo), "ls-tree", "-r", commit], error=SourceError)
    links = {}
    for line in listing.splitlines():
        meta, _, path = line.partition("\t")
        mode, kind, sha = meta.split()
        if mode == "160000" and kind == "commit":
            links[path] = sha
    return links
