"""cuforge.pipeline.builders.pep517, the build command of the setuptools and cmake kinds: one real
``build_wheel`` hook call in the given interpreter, never the metadata hook that ``pip wheel``
calls first (a whole second ``setup.py`` run for setuptools). The backend here is a real
in-tree PEP 517 backend that records the hooks it is asked for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BACKEND = '''
import atexit, json, os, sys, zipfile
class _Graph:   # stands for a backend's big object graph: freed at teardown, one by one
    def __del__(self, _open=open, _marker=os.environ["HOOK_LOG"] + ".teardown"):
        _open(_marker, "w").close()   # builtins may be gone by then: hold on to open
_graph = _Graph()
atexit.register(lambda: open(os.environ["HOOK_LOG"] + ".atexit", "w").close())
def _record(name, **kw):
    with open(os.environ["HOOK_LOG"], "a") as log:
        log.write(json.dumps({"hook": name, **kw}) + "\\n")
def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    _record("prepare_metadata_for_build_wheel")
    raise RuntimeError("the metadata hook must not be called")
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _record("build_wheel", config_settings=config_settings, cwd=os.getcwd(),
            shim=os.environ.get("PYTHONPATH", ""), path=sys.path,
            epoch=os.environ.get("SOURCE_DATE_EPOCH"))
    if os.environ.get("FAIL_BUILD"):
        raise SystemExit(3)
    if os.environ.get("RAISE"):
        raise RuntimeError("the backend broke")
    sys.stdout.write("unflushed backend output")   # no newline, no flush: must still arrive
    name = "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as whl:
        whl.writestr("demo/__init__.py", "")
    return name
'''


def _tree(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "pyproject.toml").write_text('[build-system]\nrequires = []\n'
                                        'build-backend = "backend"\nbackend-path = ["."]\n')
    (src / "backend.py").write_text(BACKEND)
    return src


def _build(src: Path, out: Path, log: Path, *extra: str, env: dict | None = None):
    return subprocess.run([sys.executable, "-m", "cuforge.pipeline.builders.pep517", "--python",
                           sys.executable, "--outdir", str(out), *extra, str(src)],
                          capture_output=True, text=True,
                          env={**os.environ, "HOOK_LOG": str(log), **(env or {})})


def test_one_build_wheel_call_with_config_settings_and_no_metadata_pass(tmp_path):
    src, out, log = _tree(tmp_path), tmp_path / "out", tmp_path / "hooks.jsonl"
    run = _build(src, out, log, "-Ca=1", "-Cb=2", "-Ca=3", env={"PYTHONPATH": "/the/shim"})
    assert run.returncode == 0, run.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["hook"] for c in calls] == ["build_wheel"]
    assert calls[0]["config_settings"] == {"a": ["1", "3"], "b": "2"}
    assert calls[0]["cwd"] == str(src) and "/the/shim" in calls[0]["shim"]
    assert (out / "demo-1.0-py3-none-any.whl").is_file()
    assert f"built {out / 'demo-1.0-py3-none-any.whl'}" in run.stdout


def test_a_failing_backend_gives_its_exit_code_and_one_line_not_a_traceback(tmp_path):
    src, out, log = _tree(tmp_path), tmp_path / "out", tmp_path / "hooks.jsonl"
    run = _build(src, out, log, env={"FAIL_BUILD": "1"})
    assert run.returncode == 3
    assert "backend's build_wheel failed (exit 3)" in run.stderr and "Traceback" not in run.stderr
    assert not list(out.glob("*.whl"))


def test_a_backend_the_interpreter_cannot_import_is_named(tmp_path):
    src, out, log = _tree(tmp_path), tmp_path / "out", tmp_path / "hooks.jsonl"
    (src / "pyproject.toml").write_text('[build-system]\nbuild-backend = "no_such_backend"\n')
    run = _build(src, out, log)
    assert run.returncode == 1
    assert "cannot import the build backend no_such_backend: " in run.stderr
    assert "No module named 'no_such_backend'" in run.stderr
    assert "Traceback" not in run.stderr


def test_an_interpreter_without_pyproject_hooks_is_told_the_fix(tmp_path):
    src, out = _tree(tmp_path), tmp_path / "out"
    code = ("import sys; sys.modules['pyproject_hooks'] = None\n"   # import fails as if absent
            "from cuforge.pipeline.builders.pep517 import main\n"
            f"sys.exit(main(['--python', sys.executable, '--outdir', {str(out)!r}, {str(src)!r}]))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 1
    assert "cannot import pyproject_hooks" in run.stderr and "-m pip install pyproject-hooks" in \
        run.stderr and "Traceback" not in run.stderr


def test_the_hook_process_skips_its_teardown_but_runs_atexit_and_flushes(tmp_path):
    """spconv's hook process spent 10 s freeing its objects after the wheel was written."""
    src, out, log = _tree(tmp_path), tmp_path / "out", tmp_path / "hooks.jsonl"
    run = _build(src, out, log)
    assert run.returncode == 0, run.stderr
    assert "unflushed backend output" in run.stdout
    assert Path(f"{log}.atexit").exists()          # the backend's atexit handlers ran
    assert not Path(f"{log}.teardown").exists()    # the interpreter was not torn down
    assert (out / "demo-1.0-py3-none-any.whl").is_file()


def test_an_exception_in_the_backend_is_exit_1_with_its_traceback_in_the_log(tmp_path):
    src, out, log = _tree(tmp_path), tmp_path / "out", tmp_path / "hooks.jsonl"
    run = _build(src, out, log, env={"RAISE": "1"})
    assert run.returncode == 1
    assert "RuntimeError: the backend broke" in run.stderr   # the backend's, for the build log
    assert "backend's build_wheel failed (exit 1)" in run.stderr.splitlines()[-1]
    assert not list(out.glob("*.whl"))


def test_pythonpath_stays_on_sys_path_under_safe_path(tmp_path):
    """With PYTHONSAFEPATH, ``-c`` puts no cwd first: the hook must not overwrite sys.path[0]
    (it would be the shim, PYTHONPATH's first entry)."""
    src, out, log = _tree(tmp_path), tmp_path / "out", tmp_path / "hooks.jsonl"
    run = _build(src, out, log, env={"PYTHONPATH": "/the/shim", "PYTHONSAFEPATH": "1"})
    assert run.returncode == 0, run.stderr
    call = json.loads(log.read_text().splitlines()[0])
    assert "/the/shim" in call["path"]


def test_the_source_time_the_fetch_wrote_is_the_builds_source_date_epoch(tmp_path):
    """Whatever the caller's environment says: the source decides (docs/reliability.md,
    "Reproducible wheels")."""
    src, out, log = _tree(tmp_path), tmp_path / "out", tmp_path / "hooks.jsonl"
    epoch = tmp_path / ".src.epoch"
    epoch.write_text("1700000000\n")
    run = _build(src, out, log, "--epoch-file", str(epoch), env={"SOURCE_DATE_EPOCH": "5"})
    assert run.returncode == 0, run.stderr
    assert json.loads(log.read_text())["epoch"] == "1700000000"
    assert "SOURCE_DATE_EPOCH=1700000000 (the source's time)" in run.stdout
    # no file (a command copied from --dry-run, run by hand): said, and the build goes on
    log.unlink()
    run = _build(src, out, log, "--epoch-file", str(tmp_path / "none"))
    assert run.returncode == 0 and "holds no source time" in run.stderr
