"""The stress check (cuforge.verify.stress, config.stress): the recipe table, the sizing rule,
running a real stress-shaped script through the smoke protocol, compute-sanitizer's verdict and
where its binary is found. The GPU runs themselves are in docs/gpu-runs.md (issue 54)."""

from __future__ import annotations

import ast
import math
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from cuforge.config.stress import StressRule, parse_stress
from cuforge.core.errors import ConfigError, ToolchainError
from cuforge.verify.checklist import BY_NAME as CHECK_NAMES
from cuforge.verify.stress import (check_name, find_sanitizer, run_stress, sanitized_verdict,
                                   sanitizer_errors)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "fixtures" / "stress" / "stress_counts.py"
PY = Path(sys.executable)


def test_the_spconv_script_is_sized_for_a_1e4_fault_at_95_percent():
    # the script's own constants, read without importing it (it imports torch)
    tree = ast.parse((ROOT / "smoke" / "stress_spconv.py").read_text())
    consts = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign)
              for t in n.targets if isinstance(t, ast.Name)}
    calls = eval(compile(ast.Expression(consts["CALLS_95_AT_1E4"]), "script", "eval"),
                 {"math": math})
    assert calls == 29_956
    assert ast.unparse(consts["REPORT_VOXELS"]) == "49093"
    assert ast.unparse(consts["REPORT_SHAPE"]) == "(757, 621, 546)"


def test_recipes_with_a_stress_table_have_their_script():
    from cuforge.config.recipes import load_recipes
    from cuforge.core.project import find_project
    project = find_project(root=ROOT)
    stressed = {n: r for n, r in load_recipes(project).items() if r.stress}
    assert {"spconv", "cuforge-demo"} <= set(stressed)
    for name, recipe in stressed.items():
        assert recipe.stress.path(project, name).is_file(), name
        assert recipe.stress.why, f"{name}: [stress] must say which kernels it repeats"


@pytest.mark.parametrize("table, key", [({"scripts": "x"}, "unknown keys"),
                                        ({"args": "--fast"}, "`args` must be a list"),
                                        ({"timeout": 0}, "`timeout` must be")])
def test_a_wrong_stress_table_names_the_key(table, key):
    with pytest.raises(ConfigError, match=key):
        parse_stress(table, "recipes/x.toml")


def test_a_stress_run_passes_with_its_section_lines():
    result = run_stress(PY, StressRule(), SCRIPT, [])
    assert result.check == "stress" and result.status == "pass"
    assert result.summary.startswith("passed: 2000 calls, 0 failures (")
    assert "sums: 2000 calls, 0 failures" in result.detail


def test_a_wrong_result_in_some_calls_fails_and_says_how_many():
    result = run_stress(PY, StressRule(args=("--wrong", "3")), SCRIPT, [])
    assert result.status == "fail"
    assert "3 wrong results in 2000 calls" in result.detail
    assert "sums: 2000 calls, 3 failures" in result.detail


def test_exit_77_is_skipped_never_pass():
    result = run_stress(PY, StressRule(args=("--skip",)), SCRIPT, [])
    assert result.status == "skipped" and "no GPU" in result.summary


def test_a_missing_script_fails():
    result = run_stress(PY, StressRule(), SCRIPT.with_name("nope.py"), [])
    assert result.status == "fail" and "not found" in result.summary


def test_sanitizer_verdicts():
    ok = sanitized_verdict(0, "pass: 40 calls\n", "========= ERROR SUMMARY: 0 errors\n",
                           seconds=12.0, timeout=600)
    assert ok.check == "sanitize" and ok.status == "pass" and "0 errors" in ok.summary
    bad = sanitized_verdict(99, "", "========= Invalid __global__ read of size 4 bytes\n"
                            "========= ERROR SUMMARY: 2 errors\n", seconds=5, timeout=600)
    assert bad.status == "fail" and "2 errors" in bad.summary and "Invalid __global__" in bad.detail
    # the script's own failure under the sanitizer is a failure too, even with 0 errors
    wrong = sanitized_verdict(1, "", "fail: 1 wrong results in 40 calls\n"
                              "========= ERROR SUMMARY: 0 errors\n", seconds=5, timeout=600)
    assert wrong.status == "fail"
    # no summary at all: the sanitizer did not run the program (no GPU, wrong binary)
    assert sanitized_verdict(0, "pass: ok", "", seconds=1, timeout=9).status == "fail"
    assert sanitized_verdict(None, "", "", seconds=9, timeout=9).status == "fail"
    assert sanitizer_errors("x\n========= ERROR SUMMARY: 1 error\n") == 1


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_the_sanitizer_is_found_where_it_can_launch_a_program(tmp_path, monkeypatch):
    monkeypatch.delenv("CUFORGE_COMPUTE_SANITIZER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    binary = _executable(tmp_path / "site" / "nvidia" / "cu13" / "bin" / "compute-sanitizer")
    _executable(binary.with_name("TreeLauncherSubreaper"))
    assert find_sanitizer([tmp_path / "site"]) == binary
    # a toolkit's bin/ links to compute-sanitizer/, where the helper is
    tool = _executable(tmp_path / "cuda" / "compute-sanitizer" / "compute-sanitizer")
    _executable(tool.with_name("TreeLauncherSubreaper"))
    (tmp_path / "cuda" / "bin").mkdir()
    (tmp_path / "cuda" / "bin" / "compute-sanitizer").symlink_to(tool)
    assert find_sanitizer([], tmp_path / "cuda" / "bin") == tmp_path / "cuda" / "bin" / "compute-sanitizer"


def test_pypis_sanitizer_without_its_launcher_is_one_clear_error(tmp_path, monkeypatch):
    """nvidia-cuda-sanitizer-api 13.0.85 lays out bin/compute-sanitizer and lib/*.so, no
    TreeLauncherSubreaper: on the H100 every run ended "couldn't find exit code" (session 23)."""
    monkeypatch.delenv("CUFORGE_COMPUTE_SANITIZER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    binary = _executable(tmp_path / "site" / "nvidia" / "cu13" / "bin" / "compute-sanitizer")
    (binary.parent.parent / "lib").mkdir()
    (binary.parent.parent / "lib" / "libTreeLauncherTargetInjection.so").write_bytes(b"")
    with pytest.raises(ToolchainError) as err:
        find_sanitizer([tmp_path / "site"])
    assert err.value.exit_code == 3 and "cannot launch a program" in str(err.value)
    assert "CUFORGE_COMPUTE_SANITIZER" in err.value.hint


def test_no_sanitizer_is_one_error_naming_the_wheel(tmp_path, monkeypatch):
    monkeypatch.delenv("CUFORGE_COMPUTE_SANITIZER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ToolchainError) as err:
        find_sanitizer([tmp_path / "site"], tmp_path / "cuda" / "bin")
    assert err.value.exit_code == 3 and "nvidia-cuda-sanitizer-api" in str(err.value)
    monkeypatch.setenv("CUFORGE_COMPUTE_SANITIZER", str(tmp_path / "missing"))
    with pytest.raises(ToolchainError, match="not a file"):
        find_sanitizer([])


def test_a_run_on_the_wheels_ptx_is_a_check_of_its_own():
    result = run_stress(PY, StressRule(), SCRIPT, [], check=check_name(ptx_jit=True))
    assert result.check == "stress-ptx-jit" and result.status == "pass"
    assert check_name(sanitize=True, ptx_jit=True) in CHECK_NAMES


def test_ptx_jit_without_a_stress_is_one_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "cuforge", "verify", "--ptx-jit",
                           str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == ConfigError.exit_code
    assert "--ptx-jit says how the stress runs" in proc.stderr and "Traceback" not in proc.stderr
