"""Scripts written by packages that build side by side in one process (threads share a pid)."""

from __future__ import annotations

import threading

from cuforge.core.scripts import write_script


def test_threads_writing_one_script_at_once_all_succeed(tmp_path):
    script = tmp_path / "launchers" / "g++"
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def writer(i: int) -> None:
        start.wait()
        try:
            for j in range(200):
                write_script(script, f"#!/bin/sh\n# {i} {j}\n")
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
