"""The upstream-test stage on a fixture suite (tests/fixtures/upstream/suite_project): a real
pytest run in a subprocess against a real (pure-Python) wheel, with one passing and one failing
test, two shadowing attempts and a time-out."""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

import pytest

from cuforge.core.errors import ConfigError
from cuforge.config.recipes import UpstreamTests, parse_recipe
from cuforge.verify.upstream import run_upstream_tests, summary_line
from cuforge.core.digest import sha256_of
from cuforge.publish.wheelhouse import Entry, Wheelhouse

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "upstream" / "suite_project"
PYTHON = Path(sys.executable)          # the test env has pytest: nothing to install


def built_wheel(tmp: Path) -> Path:
    """shadowpkg as its wheel holds it (BUILT = True), written as a wheel file."""
    wheel = tmp / "shadowpkg-1.0-py3-none-any.whl"
    info = "shadowpkg-1.0.dist-info"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("shadowpkg/__init__.py", "BUILT = True\n")
        zf.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: shadowpkg\nVersion: 1.0\n")
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{info}/top_level.txt", "shadowpkg\n")
        zf.writestr(f"{info}/RECORD", "")
    return wheel


def run(tmp: Path, spec: UpstreamTests, **env: str):
    from cuforge.verify.wheel import import_roots, top_level_modules, unpack
    root = unpack(built_wheel(tmp), tmp / "wheel")
    scratch = tmp / "run"
    scratch.mkdir()
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return run_upstream_tests(PYTHON, spec, FIXTURE, paths=import_roots(root),
                                  modules=top_level_modules(root),
                                  requirements_dir=tmp / "site", scratch=scratch,
                                  gpu_visible=None), scratch
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


PYTEST = ("pytest", "-q", "-p", "no:cacheprovider", "{tests}")


def test_passing_suite_sees_the_wheel_not_the_sources(tmp_path):
    result, scratch = run(tmp_path, UpstreamTests("tests", PYTEST, gpu=False, timeout=120))
    assert result.status == "pass", result.detail
    assert result.summary.startswith("3 passed in ")           # pytest's own summary + time
    assert result.summary.endswith(" s)")
    # the suite's own shadowpkg.py was removed from the copy, and said so
    assert "removed tests/shadowpkg.py from the copied suite" in result.detail
    assert not (scratch / "tests" / "shadowpkg.py").exists()
    assert not (scratch / "shadowpkg").exists()                 # the source tree stayed out


def test_in_tree_run_would_be_shadowed():
    """The fixture is a real trap: run in place, pytest imports the unbuilt sources."""
    import subprocess
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "tests/test_suite.py::test_sees_the_built_wheel"], cwd=FIXTURE,
                         capture_output=True, text=True,
                         env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert out.returncode == 1 and "1 failed" in out.stdout


def test_failing_test_fails_the_check_with_the_summary(tmp_path):
    result, _ = run(tmp_path, UpstreamTests("tests", PYTEST, gpu=False, timeout=120),
                    SUITE_FAIL="1")
    assert result.status == "fail"
    assert result.summary.startswith("1 failed, 2 passed in "), result.summary
    assert "asked to fail" in result.detail


def test_time_limit_kills_the_suite(tmp_path):
    spec = UpstreamTests("tests", PYTEST, gpu=False, timeout=3)
    result, _ = run(tmp_path, spec, SUITE_SLEEP="60")
    assert result.status == "fail" and result.summary == "timed out after 3 s"


def test_gpu_suite_skips_without_a_gpu(tmp_path):
    spec = UpstreamTests("tests", PYTEST, gpu=True)
    result, _ = run(tmp_path, spec)
    assert result.status == "skipped" and "no GPU" in result.summary


def test_shadowing_probe_catches_a_package_in_the_scratch_dir(tmp_path):
    """A suite whose copy still holds the package (here: the whole tree as the suite, whose
    shadowpkg/ sits one level down where the probe looks through PYTHONPATH-free imports)
    would pass for the wrong reason; the probe fails the check instead."""
    from cuforge.verify.upstream import shadowed
    scratch = tmp_path / "scratch"
    (scratch / "shadowpkg").mkdir(parents=True)
    (scratch / "shadowpkg" / "__init__.py").write_text("BUILT = False\n")
    # python -c with a cwd: sys.path[0] is '' (the cwd) unless PYTHONSAFEPATH is set
    assert shadowed(PYTHON, ["shadowpkg"], [], scratch, {}) 
    assert not shadowed(PYTHON, ["shadowpkg"], [], scratch, {"PYTHONSAFEPATH": "1"})


def test_summary_line_of_each_runner():
    assert summary_line("x\n=== 1 failed, 1 passed in 0.12s ===\n") == "1 failed, 1 passed in 0.12s"
    assert summary_line("Ran 4 tests in 1.0s\n\nFAILED (failures=1)\n") == \
        "Ran 4 tests in 1.0s: FAILED (failures=1)"
    assert summary_line("fused-ssim Time (Inference): 0.7 ms\n") == \
        "fused-ssim Time (Inference): 0.7 ms"


def recipe(tmp: Path, table: str) -> Path:
    path = tmp / "pkg.toml"
    path.write_text('name = "pkg"\n[source]\npath = "src"\n' + table)
    return path


def test_recipe_table_is_parsed(tmp_path):
    r = parse_recipe(recipe(tmp_path, '[upstream_tests]\npath = "test"\n'
                            'command = ["pytest", "{tests}"]\nrequires = ["pytest==9.2.0"]\n'
                            'gpu = false\ntimeout = 60\n[upstream_tests.source]\n'
                            'git = "https://example.org/x.git"\ncommit = "' + "a" * 40 + '"\n'))
    t = r.upstream_tests
    assert (t.path, t.gpu, t.timeout, t.requires) == ("test", False, 60.0, ("pytest==9.2.0",))
    assert t.source.describe() == "https://example.org/x.git@" + "a" * 40


@pytest.mark.parametrize("table, words", [
    ('path = "test"\ncommand = ["pytest"]\nrequires = ["pytest>=8"]\n', "not pinned"),
    ('path = "../x"\ncommand = ["pytest"]\n', "`path`"),
    ('path = "test"\ncommand = "pytest"\n', "`command`"),
    ('path = "test"\ncommand = ["pytest"]\ntimeout = 0\n', "`timeout`"),
    ('path = "test"\ncommand = ["pytest"]\nsource = { git = "https://x/y.git", commit = "main" }\n',
     "40-hex"),
    ('path = "test"\ncommand = ["pytest"]\nwhere = "x"\n', "unknown keys"),
])
def test_recipe_table_mistakes_are_config_errors(tmp_path, table, words):
    with pytest.raises(ConfigError, match=words):
        parse_recipe(recipe(tmp_path, "[upstream_tests]\n" + table))


def test_result_goes_into_the_manifest(tmp_path):
    """verify --upstream-tests on a wheelhouse wheel: its manifest line is appended again
    with the verdict among its checks (and the wheel's sha256 still matches)."""
    from cuforge.verify.report import CheckResult
    from cuforge.pipeline.upstream_stage import record_check
    house = Wheelhouse(tmp_path / "wh")
    wheel = built_wheel(tmp_path)
    house.publish(wheel, Entry(package="shadowpkg", status="compiled", wheel=wheel.name,
                               wheel_sha256=sha256_of(wheel), checks={"import": "pass"}))
    record_check(house.dir / wheel.name,
                 CheckResult("upstream-tests", "pass", "3 passed in 0.05s (1.2 s)"))
    latest = house.latest()["shadowpkg"]
    assert latest.checks == {"import": CheckResult("import", "pass", ""), "upstream-tests":
                             CheckResult("upstream-tests", "pass", "3 passed in 0.05s (1.2 s)")}
    assert latest.wheel_sha256 == sha256_of(house.dir / wheel.name)


def test_stage_takes_the_suite_from_its_declared_source(tmp_path):
    """The stage verify --upstream-tests and build --upstream-tests share: the suite's tree
    is fetched like [source] (here a local path source), or taken from --tests-src."""
    from cuforge.core.project import Project
    from cuforge.config.recipes import Recipe, Source
    from cuforge.pipeline.upstream_stage import UpstreamStage
    spec = UpstreamTests("tests", PYTEST, gpu=False, timeout=120, source=Source(path=str(FIXTURE)))
    recipe = Recipe("shadowpkg", "setuptools", Source(path="/nonexistent"), upstream_tests=spec)
    combo = type("C", (), {"env_id": "fixture"})()
    stage = UpstreamStage(Project(tmp_path), PYTHON, combo, {})
    result = stage.run(built_wheel(tmp_path), recipe, [], imported_ok=True, tmp=tmp_path)
    assert result.status == "pass", result.detail
    tree = stage.tree(recipe)
    assert (tree / "tests" / "test_suite.py").is_file() and tree != FIXTURE   # a fresh copy
    # --tests-src wins over the declared source; a missing suite path is a failure
    stage = UpstreamStage(Project(tmp_path), PYTHON, combo, {"shadowpkg": tmp_path})
    failed = stage.run(built_wheel(tmp_path), recipe, [], imported_ok=True, tmp=tmp_path / "b")
    assert failed.status == "fail" and "is not in" in failed.summary
    skipped = stage.run(built_wheel(tmp_path), recipe, [], imported_ok=False, tmp=tmp_path / "c")
    assert skipped.status == "skipped" and "does not import" in skipped.summary
