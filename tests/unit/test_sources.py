import hashlib
import subprocess
import tarfile
from pathlib import Path

import pytest

from cuforge.core.errors import SourceError
from cuforge.config.recipes import Source
from cuforge.pipeline.sources import fetch


def _git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"})


def _upstream(tmp_path: Path) -> tuple[Path, str]:
    """A MILo-shaped repo: the package lives in a subdirectory, pinned by commit."""
    repo = tmp_path / "MILo"
    pkg = repo / "submodules" / "simple-knn"
    pkg.mkdir(parents=True)
    (pkg / "setup.py").write_text("# v1\n")
    _git("init", "-q", cwd=repo)
    _git("add", ".", cwd=repo)
    _git("commit", "-qm", "v1", cwd=repo)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                            text=True).stdout.strip()
    (pkg / "setup.py").write_text("# v2\n")
    _git("commit", "-qam", "v2", cwd=repo)
    return repo, commit


def test_git_subdir_at_pinned_commit_is_cached(tmp_path):
    repo, commit = _upstream(tmp_path)
    src = Source(git=f"file://{repo}", commit=commit, subdir="submodules/simple-knn")
    out = fetch(src, project_root=tmp_path, cache_dir=tmp_path / "cache", dest=tmp_path / "w1")
    assert (out / "setup.py").read_text() == "# v1\n"      # the pin, not the branch head
    assert len(list((tmp_path / "cache" / "git").glob("*.git"))) == 1
    again = fetch(src, project_root=tmp_path, cache_dir=tmp_path / "cache", dest=tmp_path / "w1")
    assert (again / "setup.py").read_text() == "# v1\n"


def test_git_missing_subdir_and_commit(tmp_path):
    repo, commit = _upstream(tmp_path)
    with pytest.raises(SourceError, match="no directory 'submodules/nope'"):
        fetch(Source(git=f"file://{repo}", commit=commit, subdir="submodules/nope"),
              project_root=tmp_path, cache_dir=tmp_path / "c", dest=tmp_path / "w")
    with pytest.raises(SourceError, match="has no commit"):
        fetch(Source(git=f"file://{repo}", commit="0" * 40), project_root=tmp_path,
              cache_dir=tmp_path / "c", dest=tmp_path / "w2")


def test_sdist_checksum(tmp_path):
    tree = tmp_path / "torch_scatter-2.1.2"
    tree.mkdir()
    (tree / "setup.py").write_text("print('hi')\n")
    archive = tmp_path / "torch_scatter-2.1.2.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tree, arcname=tree.name)
    good = hashlib.sha256(archive.read_bytes()).hexdigest()
    out = fetch(Source(sdist=str(archive), sha256=good), project_root=tmp_path,
                cache_dir=tmp_path / "cache", dest=tmp_path / "w")
    assert (out / "setup.py").exists()
    with pytest.raises(SourceError, match="checksum mismatch") as err:
        fetch(Source(sdist=str(archive), sha256="f" * 64), project_root=tmp_path,
              cache_dir=tmp_path / "cache2", dest=tmp_path / "w2")
    assert "fix:" in str(err.value)
    assert not list((tmp_path / "cache2" / "sdist").glob("*.tar.gz"))  # bad file not kept


def test_unchanged_stamp_keeps_the_tree_so_builds_resume(tmp_path):
    repo, commit = _upstream(tmp_path)
    src = Source(git=f"file://{repo}", commit=commit, subdir="submodules/simple-knn")
    kw = dict(project_root=tmp_path, cache_dir=tmp_path / "cache", dest=tmp_path / "w")
    root = fetch(src, stamp="s1", **kw)
    (root / "build").mkdir()
    (root / "build" / "obj.o").write_text("compiled")          # an artefact of a killed build
    assert (fetch(src, stamp="s1", **kw) / "build" / "obj.o").exists()
    assert not (fetch(src, stamp="s2", **kw) / "build").exists()  # new patches: fresh tree


def test_build_dir_is_reset_when_the_source_key_changes(tmp_path):
    from cuforge.pipeline.actions import reset_build_dir
    work = tmp_path / "work"
    reset_build_dir(work, "key-a")
    (work / "build").mkdir()
    (work / "build" / "obj.o").write_text("x")
    reset_build_dir(work, "key-a")
    assert (work / "build" / "obj.o").exists()               # same sources: resume
    reset_build_dir(work, "key-b")
    assert not (work / "build").exists()                     # a source moved: fresh
