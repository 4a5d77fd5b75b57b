"""What people see: verdict lines, bracketed text kept, 80-column tables, ninja progress."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from cuforge.cli import main
from cuforge.core.console import BuildProgress, ninja_step, print_error, table
from cuforge.core.runner import Step, listen, run

REPO = Path(__file__).resolve().parents[2]


def console80() -> Console:
    return Console(file=io.StringIO(), width=80, record=True, color_system=None)


def test_error_keeps_brackets_and_does_not_split_words() -> None:
    out = console80()
    print_error(out, "configuration error",
                "no combo named 'x'\n  fix: add a [[combo]] table to envs/combos.toml "
                "/a/very/long/path/that/must/stay/on/one/line/for/copying/envs/combos.toml")
    text = out.export_text()
    assert "[[combo]]" in text
    assert "/a/very/long/path/that/must/stay/on/one/line/for/copying/envs/combos.toml" in text


def test_tables_fold_instead_of_cutting_at_80_columns() -> None:
    out = console80()
    t = table("combo", "python", "torch", "CUDA", "arches", "packages", wide=["packages"])
    t.add_row("build-3.11-cu130", "3.11", "2.14.1", "13.0 (PyPI wheels)", "9.0;12.0;12.1+PTX",
              "diff-gaussian-rasterization_ms, cuforge-demo")
    out.print(t)
    text = out.export_text()
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    for word in ("build-3.11-cu130", "9.0;12.0;12.1+PTX", "diff-gaussian-rasterization_ms"):
        assert in_order(word, text)   # folded over lines, nothing dropped


def in_order(word: str, text: str) -> bool:
    """Every character of ``word`` appears in ``text`` in order (a cell folded over lines)."""
    rest = iter(text)
    return all(ch in rest for ch in word)


@pytest.mark.parametrize("command", ["matrix", "doctor"])
def test_cli_tables_fit_80_columns(command: str, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.chdir(REPO)
    main([command])
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "…" not in out, out


def test_empty_cuda_arch_is_a_config_error(capsys, monkeypatch) -> None:
    monkeypatch.chdir(REPO)
    assert main(["build", "--cuda-arch", "", "--dry-run"]) == 2
    assert "--cuda-arch is empty" in capsys.readouterr().err


def test_ninja_step() -> None:
    assert ninja_step("[775/775] Linking CXX shared module core_cc.so") == (775, 775)
    assert ninja_step("  [1/3] /usr/local/cuda/bin/nvcc -c a.cu") == (1, 3)
    assert ninja_step("nvcc warning : [1/3]") is None


@pytest.mark.skipif(not shutil.which("ninja"), reason="needs ninja")
def test_progress_follows_a_real_ninja_build(tmp_path: Path) -> None:
    """A real ninja run through the runner: the bar reaches N/N from ninja's own output."""
    rules = ["rule touch", "  command = sleep 0.01 && touch $out", ""]
    rules += [f"build out{i}: touch" for i in range(7)]
    (tmp_path / "build.ninja").write_text("\n".join(rules) + "\n")
    seen: list[tuple[int, int]] = []
    with BuildProgress("demo", console80(), "building") as progress:
        def on_line(line: str) -> None:
            progress.on_line(line)
            if progress.steps:
                seen.append(progress.steps)
        with listen(on_line):
            # ninja prints [n/N] status lines only to a terminal unless told how: NINJA_STATUS
            run(Step(("ninja", "-j1", "-v"), cwd=tmp_path))
    assert seen[-1] == (7, 7)
    assert [n for n, _ in seen] == sorted(n for n, _ in seen)


def test_output_through_a_pipe_keeps_long_paths_on_one_line(tmp_path: Path) -> None:
    """Not a terminal (a CI log, `| tee`): rich must not break lines at 80 columns in the middle
    of a path. `cuforge doctor` prints its wheelhouse path and a table through the same
    console factory that builds use."""
    import subprocess
    import sys
    deep = tmp_path / ("a-directory-with-a-long-name-" * 4) / "wheelhouse"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.run([sys.executable, "-m", "cuforge", "doctor"], cwd=REPO,
                          capture_output=True, text=True,
                          env={**env, "CUFORGE_WHEELHOUSE": str(deep)})
    assert proc.returncode in (0, 3), proc.stderr
    line = f"no wheelhouse under {deep} yet (cuforge build makes one)"
    assert len(line) > 120 and line in proc.stdout.splitlines(), proc.stdout[-2000:]
    rows = [r for r in proc.stdout.splitlines() if r.strip().startswith("memory / jobs")]
    assert len(rows) == 1 and "--jobs overrides)" in rows[0], proc.stdout   # a table row, whole


def test_make_console_wraps_only_on_a_terminal(monkeypatch) -> None:
    from cuforge.core.console import LOG_WIDTH, make_console
    monkeypatch.delenv("COLUMNS", raising=False)
    for var in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(var, raising=False)
    piped = make_console()              # pytest's captured stdout is not a terminal
    assert not piped.is_terminal and piped.soft_wrap and piped.width == LOG_WIDTH
    monkeypatch.setenv("COLUMNS", "132")
    asked = make_console()              # an explicit width is a request: wrap there
    assert asked.width == 132 and not asked.soft_wrap
    monkeypatch.delenv("COLUMNS")
    monkeypatch.setenv("TTY_COMPATIBLE", "1")   # rich's way to say "this is a terminal"
    assert not make_console().soft_wrap


def test_heartbeat_speaks_on_a_pipe_and_not_on_a_terminal():
    """A long step under a live display prints nothing where no terminal shows it; the
    heartbeat says what still runs, at its interval; on a terminal it stays quiet."""
    import io
    import time

    from rich.console import Console

    from cuforge.core.console import heartbeat
    pipe = Console(file=io.StringIO(), force_terminal=False, width=200)
    with heartbeat(pipe, lambda: ["demo: building (3 s)"], every=0.1):
        time.sleep(0.55)
    beats = pipe.file.getvalue().splitlines()
    assert 4 <= len(beats) <= 6 and set(beats) == {"... still running: demo: building (3 s)"}
    tty = Console(file=io.StringIO(), force_terminal=True, width=200)
    with heartbeat(tty, lambda: ["demo"], every=0.1):
        time.sleep(0.3)
    assert tty.file.getvalue() == ""


def test_progress_lines_say_what_a_live_display_shows():
    import io

    from rich.console import Console

    from cuforge.core.console import live_progress, progress_lines
    progress = live_progress(Console(file=io.StringIO()))
    progress.add_task("demo: building for 12.0", total=None, last=72.4)
    progress.add_task("spconv: building", total=775, completed=12)
    lines = progress_lines(progress)
    # a count says what it counts (issue 50: "(15.0 s, 1/3)" said 1/3 of nothing), and a
    # package with no count yet says how long its last build here took
    assert lines[0].startswith("demo: building for 12.0 (")
    assert lines[0].endswith(", last build here 1 min 12 s)"), lines[0]
    assert lines[1].endswith(", ninja [12/775])"), lines[1]


def test_the_live_line_shows_no_unknown_total_and_no_eta_without_one():
    """On a terminal, a package whose build has printed no ninja line yet showed ``0/? ...
    eta -:--:--``: now its last build time here; with ninja's count, ``ninja [n/N]``."""
    from rich.console import Console

    from cuforge.core.console import BuildProgress, live_progress
    term = Console(file=io.StringIO(), force_terminal=True, width=160, color_system=None)
    progress = live_progress(term)
    with BuildProgress("demo", term, "building", shared=progress, last=90.0) as bar:
        before = _rendered(progress)
        bar.on_line("[1/3] Building CUDA object demo.cu.o")
        after = _rendered(progress)
    assert "0/?" not in before and "eta" not in before, before
    assert "last build here 1 min 30 s" in before, before
    assert "ninja [1/3]" in after, after


def _rendered(progress) -> str:
    from rich.console import Console
    out = Console(file=io.StringIO(), width=160, color_system=None)
    out.print(progress.get_renderable())
    return out.file.getvalue()


def test_a_build_starts_with_a_line_naming_its_last_build_here():
    """A pipe shows no live line: the build of a package starts with one line that says what
    it does and how long its last build here took."""
    from rich.console import Console

    from cuforge.core.console import BuildProgress, live_progress
    pipe = Console(file=io.StringIO(), force_terminal=False, width=200)
    with BuildProgress("demo", pipe, "building for 12.0", shared=live_progress(pipe),
                       last=72.4) as bar:
        bar.announce()
    with BuildProgress("fresh", pipe, "building", shared=live_progress(pipe)) as bar:
        bar.announce()
    assert pipe.file.getvalue().splitlines() == [
        "demo: building for 12.0; its last build here took 1 min 12 s",
        "fresh: building; no earlier build of it here"]


def test_a_table_in_a_log_has_no_padded_lines(capsys, monkeypatch):
    """Through a pipe a table takes its natural width; its rows are not padded with blanks to
    the widest one (doctor's were 1,500 columns wide in a log)."""
    from cuforge.core.console import make_console, table
    monkeypatch.delenv("COLUMNS", raising=False)
    t = table("check", "detail")
    t.add_row("short", "ok")
    t.add_row("long", "x" * 300)
    make_console().print(t)
    lines = capsys.readouterr().out.splitlines()
    assert any("x" * 300 in line for line in lines)
    assert not [line for line in lines if line.endswith(" ")], lines
