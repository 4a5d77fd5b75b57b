"""Each setting of a command is decided once and carried (the house, third step): the compiler
cache's configuration (and a dist scheduler's answer), where the code runs, an interpreter
combo's torch, the stack, the verification context. Counted on real commands in a fixture
project (two pure-Python setuptools packages, a stack of them, a combo whose interpreter is the
test torch's): each loader is wrapped, the real function runs, and the test fails when one is
called more than once by one command. Slow: a real build and a real setup (~30 s)."""

from __future__ import annotations

import importlib
import shutil
import socket
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import pure_python_project, torch_python

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(torch_python() is None, reason="needs CUFORGE_TEST_TORCH_PYTHON")]

# what is decided once per command: (module, function) of its loader
LOADERS = {
    "the compiler cache's configuration": ("cuforge.pipeline.cache_config", "load_config"),
    "the dist scheduler's answer": ("cuforge.pipeline.dist_cache", "probe"),
    "where the code runs": ("cuforge.env.target", "resolve"),
    "the interpreter's torch": ("cuforge.env.venv", "check_interpreter"),
    "the stack": ("cuforge.config.stacks", "load_stack"),
    "the verification context": ("cuforge.verify", "context_from"),
    # once per wheel for its checks; the pins' question reads the zip (no second unpack)
    "a wheel unpacked": ("cuforge.verify.wheel", "unpack"),
}
# every module that calls one of them, imported before they are wrapped: a name bound by
# ``from x import f`` is wrapped where it is bound
CALLERS = ("cuforge.cli.commands", "cuforge.workstation.setup", "cuforge.workstation.decision",
           "cuforge.pipeline.executor", "cuforge.pipeline.dryrun", "cuforge.pipeline.context",
           "cuforge.pipeline.gate", "cuforge.pipeline.wheelsource", "cuforge.pipeline.plan")


@pytest.fixture
def calls(monkeypatch) -> Counter:
    """How often each loader ran: every module's name for it wraps the real function."""
    for name in (*CALLERS, *(module for module, _ in LOADERS.values())):
        importlib.import_module(name)
    counted: Counter = Counter()
    for what, (module, func) in LOADERS.items():
        real = getattr(sys.modules[module], func)

        def counting(*args, _real=real, _what=what, **kwargs):
            counted[_what] += 1
            return _real(*args, **kwargs)
        for loaded in list(sys.modules.values()):
            if getattr(loaded, "__name__", "").startswith("cuforge") \
                    and getattr(loaded, func, None) is real:
                monkeypatch.setattr(loaded, func, counting)
    return counted


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A project whose combo ``own`` names 2.13.0 but runs the test torch's interpreter (2.14.1:
    its torch decides), with tiny-render (needs tiny-knn) and the stack ``tiny`` of it."""
    for var in ("CUFORGE_ROOT", "CUFORGE_STATE", "CUFORGE_WHEELHOUSE", "CUFORGE_CACHE",
                "CUFORGE_BUILD_DIR", "CUFORGE_DIST_SCHEDULER"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CUFORGE_CCCL_OVERLAY", "off")   # nothing to download for pure Python
    proj = tmp_path / "proj"
    (proj / "envs").mkdir(parents=True)
    shutil.copy(REPO / "envs" / "accels.toml", proj / "envs")
    (proj / "envs" / "combos.toml").write_text(
        f'[[combo]]\nname = "own"\npython = "3.11"\naccel = "cu130"\ntorch = "2.13.0"\n'
        f'interpreter = "{torch_python()}"\npackages = ["tiny-render"]\n')
    knn = pure_python_project(tmp_path / "src" / "knn", "tiny-knn", 'def knn():\n    return "knn"\n')
    render = pure_python_project(tmp_path / "src" / "render", "tiny-render",
                      "import tiny_knn\n\ndef uses_knn():\n    return tiny_knn.knn()\n")
    (proj / "recipes").mkdir()
    for name, src, deps in (("tiny-knn", knn, "[]"), ("tiny-render", render, '["tiny-knn"]')):
        (proj / "recipes" / f"{name}.toml").write_text(
            f'kind = "setuptools"\ndepends = {deps}\nmodules = ["{name.replace("-", "_")}"]\n'
            f'[source]\npath = "{src}"\n[arches]\ndevice_code = false\n')
    (proj / "stacks").mkdir()
    (proj / "stacks" / "tiny.toml").write_text(
        '[stack]\nname = "tiny"\ndescription = "a stack of two pure-Python packages"\n'
        'packages = ["tiny-render"]\n')
    (tmp_path / "checkout").mkdir()
    return proj


def _cuforge(project: Path, *args: str) -> int:
    from cuforge.cli import main
    return main(["--root", str(project), *args])


def test_a_dry_run_build_decides_each_setting_once(project, calls, monkeypatch, capsys):
    """--cache dist with a scheduler that is down: its answer is asked once, however many
    packages the plan has (no memo of the process stands in for carrying it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"   # nothing listens there
    monkeypatch.setenv("CUFORGE_DIST_TOKEN", "t")
    assert _cuforge(project, "build", "--combo", "own", "--dry-run", "--cache", "dist",
                    "--scheduler", dead) == 0
    out = capsys.readouterr()
    assert "torch2.14.1-cp311" in out.out and out.err.count("unreachable") == 1, out
    assert calls == {"the compiler cache's configuration": 1, "the dist scheduler's answer": 1,
                     "where the code runs": 1, "the interpreter's torch": 1}


def test_a_build_decides_each_setting_once(project, calls):
    """Two packages built and checked: the cache, the target, the interpreter's torch and the
    verification context once each, not once per package."""
    assert _cuforge(project, "build", "--combo", "own", "--cache", "off") == 0
    house = project / "wheelhouse"
    assert len(list(house.rglob("tiny_*.whl"))) == 2
    assert calls == {"the compiler cache's configuration": 1, "where the code runs": 1,
                     "the interpreter's torch": 1, "the verification context": 1,
                     "a wheel unpacked": 2}


def test_a_setup_decides_each_setting_once(project, calls, tmp_path):
    """A setup that builds what is missing: its decision reads the stack and asks the
    interpreter once, and the build it starts takes both, the target and the cache from it."""
    assert _cuforge(project, "setup", "tiny", "--checkout", str(tmp_path / "checkout"),
                    "--venv", str(tmp_path / "venv"), "--combo", "own",
                    "--no-requirements") == 0
    assert calls == {"the compiler cache's configuration": 1, "where the code runs": 1,
                     "the interpreter's torch": 1, "the stack": 1,
                     "the verification context": 1, "a wheel unpacked": 2}
