"""A wheelhouse that cannot be written is one line and exit 9, before any work (issue 50 point
2): a read-only directory, a full disk, for ``build`` (and its dry run), ``setup`` and
``index``; the line names the option the user set (``--wheelhouse`` or
``CUFORGE_WHEELHOUSE``). A real read-only mount and a real full tmpfs: root ignores file modes,
so as root the directory is bind-mounted read-only (skipped where mounting is not allowed)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from cuforge.core.errors import WheelhouseError

from reliability_project import COMBO_DIR, ROOT, cuforge, make_project

LABEL = f"cuforge: {WheelhouseError.label}"


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


@contextmanager
def read_only(path: Path) -> Iterator[Path]:
    """``path`` (an existing directory) read-only for this user while the block runs."""
    if os.geteuid() != 0:
        path.chmod(0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)
        return
    if not _mount("--bind", "-o", "ro", str(path), str(path)):
        pytest.skip("root, and no read-only bind mount allowed here")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


@contextmanager
def full_disk(path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs at ``path``, filled up."""
    path.mkdir(parents=True)
    if os.geteuid() != 0 or not _mount("-t", "tmpfs", "-o", "size=64k", "tmpfs", str(path)):
        pytest.skip("mounting a small tmpfs needs root")
    try:
        fd = os.open(path / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:   # ENOSPC: full
            pass
        finally:
            os.close(fd)
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def _tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
            for p in sorted(root.rglob("*")) if not p.is_symlink()}


def _one_line(run: subprocess.CompletedProcess, *says: str) -> None:
    assert run.returncode == WheelhouseError.exit_code == 9, (run.returncode, run.stderr)
    assert "Traceback" not in run.stderr and run.stderr.startswith(LABEL), run.stderr
    assert run.stderr.count(LABEL) == 1 and "fix:" in run.stderr, run.stderr
    for phrase in says:
        assert phrase in run.stderr, (phrase, run.stderr)


def _build(*extra: str) -> list[str]:
    return ["build", "--combo", "3.11-cu130", "--only", "tinyext", *extra]


def test_build_into_a_read_only_wheelhouse_is_refused_before_any_work(tmp_path):
    proj = make_project(tmp_path)
    house = tmp_path / "house"
    house.mkdir()
    with read_only(house):
        before = _tree(tmp_path)
        runs = [cuforge(proj, *_build("--wheelhouse", str(house), *dry), timeout=300)
                for dry in (["--dry-run"], [])]
        for run in runs:
            _one_line(run, f"the wheelhouse {house / COMBO_DIR} (--wheelhouse)",
                      "read-only file system", "fix: pass --wheelhouse DIR")
            assert "CUFORGE_WHEELHOUSE" not in run.stderr, run.stderr
        assert runs[0].stderr == runs[1].stderr
        assert _tree(tmp_path) == before   # no env, no state dir, no log: nothing ran
        # the environment variable, when that is what chose it
        env_run = cuforge(proj, *_build(), env={"CUFORGE_WHEELHOUSE": str(house)})
        _one_line(env_run, "(CUFORGE_WHEELHOUSE)", "fix: point CUFORGE_WHEELHOUSE")


def test_setup_into_a_read_only_wheelhouse_is_refused_before_the_venv(tmp_path):
    checkout = tmp_path / "Pointcept"
    shutil.copytree(ROOT / "tests" / "fixtures" / "upstream" / "pointcept", checkout)
    house = tmp_path / "house"
    house.mkdir()
    with read_only(house):
        before = _tree(tmp_path)
        run = cuforge(tmp_path, "setup", "pointcept", "--checkout", str(checkout),
                      "--wheelhouse", str(house), env={"CUFORGE_ROOT": str(ROOT)}, timeout=300)
        _one_line(run, "(--wheelhouse)", "read-only file system")
        assert _tree(tmp_path) == before and not (checkout / ".venv").exists()


def test_index_of_a_read_only_wheelhouse_is_one_line(tmp_path):
    house = tmp_path / "house"
    (house / COMBO_DIR).mkdir(parents=True)
    with zipfile.ZipFile(house / COMBO_DIR / "x-1.0-py3-none-any.whl", "w") as zf:
        zf.writestr("x/__init__.py", "")
        zf.writestr("x-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: x\nVersion: 1.0\n")
    with read_only(house):
        run = cuforge(tmp_path, "index", str(house), env={"CUFORGE_ROOT": str(ROOT)})
        _one_line(run, "read-only file system", "fix: copy the wheelhouse")
        default = cuforge(tmp_path, "index", env={"CUFORGE_ROOT": str(ROOT),
                                                  "CUFORGE_WHEELHOUSE": str(house)})
        _one_line(default, "(CUFORGE_WHEELHOUSE)")


def test_a_full_disk_is_refused_before_the_compile(tmp_path):
    proj = make_project(tmp_path)
    with full_disk(tmp_path / "full") as house:
        run = cuforge(proj, *_build("--wheelhouse", str(house)), timeout=300)
        _one_line(run, "no space left on its disk", "fix: free disk space there, or pass "
                  "--wheelhouse DIR")
    assert not (proj / ".state").exists()   # refused before the env, the fetch, the compile


def test_a_disk_that_fills_while_publishing_names_the_option_given(tmp_path):
    """The disk fills after the early check (here: a file-size limit the manifest line
    crosses): the publish's error names --wheelhouse, the option this user set."""
    wheel = tmp_path / "x-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("x/__init__.py", "#" * 4096)
    script = textwrap.dedent(f"""
        import resource, sys
        from pathlib import Path
        from cuforge.core.errors import WheelhouseError
        from cuforge.publish.wheelhouse import Entry, Wheelhouse
        resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))
        try:
            Wheelhouse(Path({str(tmp_path / 'wh')!r}), "--wheelhouse").publish(
                Path({str(wheel)!r}), Entry(package="x", status="compiled", wheel="x.whl"))
        except WheelhouseError as err:
            print(err)
            sys.exit(err.exit_code)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert run.returncode == 9, run.stderr
    assert "(--wheelhouse)" in run.stdout and "pass --wheelhouse DIR" in run.stdout, run.stdout
    assert "CUFORGE_WHEELHOUSE" not in run.stdout and "nothing was published" in run.stdout
    assert not list((tmp_path / "wh").glob("*.whl"))


def test_the_build_summary_names_manifest_txt_only_where_it_was_written(tmp_path):
    from cuforge.pipeline.executor import summary_line
    plan = SimpleNamespace(packages=[], combo=SimpleNamespace(id="3.11-cu130"),
                           wheel_dir=tmp_path)
    executor = SimpleNamespace(plan=plan, results={}, current=set())
    assert "manifest.txt" not in summary_line(executor, tmp_path / "logs", 1.0).plain
    (tmp_path / "manifest.txt").write_text("status package\n")
    assert "(manifest.txt)" in summary_line(executor, tmp_path / "logs", 1.0).plain
