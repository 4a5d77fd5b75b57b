"""The one atomic writer: scripts written by packages that build side by side in one process
(threads share a pid), and the patch store's files, whose mode a rewrite keeps."""

from __future__ import annotations

import threading

from cuforge.core.atomic import EXECUTABLE, write_atomic


def test_threads_writing_one_script_at_once_all_succeed(tmp_path):
    script = tmp_path / "launchers" / "g++"
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def writer(i: int) -> None:
        start.wait()
        try:
            for j in range(200):
                write_atomic(script, f"#!/bin/sh\n# {i} {j}\n", EXECUTABLE)
        except BaseException as e:   # what the build thread would have raised
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert script.read_text().startswith("#!/bin/sh\n# ")
    assert script.stat().st_mode & 0o777 == 0o755
    assert [p.name for p in script.parent.iterdir()] == ["g++"]   # no temp file left


def test_a_rewrite_keeps_the_mode_and_an_unchanged_file_is_not_touched(tmp_path):
    target = tmp_path / "setup.py"
    target.write_bytes(b"old")
    target.chmod(0o700)   # a patched file keeps its mode
    write_atomic(target, b"new")
    assert target.read_bytes() == b"new" and target.stat().st_mode & 0o777 == 0o700
    before = target.stat().st_mtime_ns, target.stat().st_ino
    write_atomic(target, "new")   # the same bytes: left alone (no rename under a reader)
    assert (target.stat().st_mtime_ns, target.stat().st_ino) == before
    write_atomic(target, "new", EXECUTABLE)   # the same bytes, another mode: rewritten
    assert target.stat().st_mode & 0o777 == 0o755
    assert write_atomic(tmp_path / "new" / "cache.json", "{}").stat().st_mode & 0o777 == 0o644
