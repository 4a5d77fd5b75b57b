import subprocess
import sys

import pytest

from cuforge.config.combos import load_combos, select_combo, with_overrides
from cuforge.core.errors import ConfigError
from cuforge.core.project import find_project


def test_declared_combos_and_defaults():
    combos = {c.id: c for c in load_combos(find_project())}
    assert {"3.11-cu130", "3.12-cu130", "3.12-cu128", "3.12-cu129"} <= set(combos)
    assert combos["3.12-cu128"].arches.torch() == "12.0+PTX"
    assert combos["3.12-cu130"].arches.torch() == "12.0;12.1+PTX"
    assert combos["3.11-cu130"].env_id == "3.11-cu130-torch2.14.1"


def test_override_is_validated_against_the_combo_cuda():
    combo = select_combo(find_project(), python="3.12", accel="cu128")
    with pytest.raises(ConfigError, match="needs CUDA >= 12.9"):
        with_overrides(combo, arches="12.1")


def test_unknown_combo_names_the_fix():
    with pytest.raises(ConfigError, match="no combo '3.9-cu130'"):
        select_combo(find_project(), python="3.9", accel="cu130")


@pytest.mark.parametrize("arch,code,needle", [
    ("12.1+PTXX", 2, "bad CUDA arch"),
    ("sm121", 2, "bad CUDA arch"),
    ("12.1", 2, "needs CUDA >= 12.9"),
    ("6.1", 2, "can no longer compile"),
])
def test_cli_arch_errors_are_one_message_without_traceback(arch, code, needle, tmp_path):
    accel = "cu128" if arch == "12.1" else "cu130"
    proc = subprocess.run([sys.executable, "-m", "cuforge", "build", "--python", "3.12",
                           "--accel", accel, "--cuda-arch", arch, "--dry-run"],
                          capture_output=True, text=True,
                          env={"CUFORGE_WHEELHOUSE": str(tmp_path / "wh"),
                               "PATH": "/usr/bin:/bin", "COLUMNS": "200"})
    assert proc.returncode == code
    assert needle in proc.stderr
    assert "fix:" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "wh").exists()


def test_cuda12_accels_build_with_the_system_toolkit(tmp_path):
    """nvidia-cuda-nvcc-cu12 has no nvcc driver: CUDA 12 combos default to the installed
    toolkit, and asking for a PyPI one is a configuration error that names the fix."""
    from cuforge.core.project import Project
    combos = {c.id: c for c in load_combos(find_project())}
    assert combos["3.12-cu128"].toolkit == combos["3.12-cu128-pypi"].toolkit == "system"
    assert combos["3.12-cu128-pypi"].torch_index == ""          # PyPI's torch 2.9.1 is cu128
    assert combos["3.12-cu130"].toolkit == "pypi"
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "accels.toml").write_text(
        (find_project().envs_dir / "accels.toml").read_text())
    (tmp_path / "envs" / "combos.toml").write_text(
        '[[combo]]\npython = "3.12"\naccel = "cu128"\ntorch = "2.9.1"\ntoolkit = "pypi"\n')
    with pytest.raises(ConfigError, match="cu128 has no PyPI toolkit") as err:
        load_combos(Project(tmp_path))
    assert 'toolkit = "system"' in str(err.value)


def test_glibc_floor_is_a_quoted_glibc_version(tmp_path):
    """A combo's glibc_floor (issue 63): "2.31" is read as it is; a bare number (TOML reads
    2.31 as a float) is a configuration error that names the fix."""
    from cuforge.core.project import Project
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "accels.toml").write_text(
        (find_project().envs_dir / "accels.toml").read_text())
    row = '[[combo]]\npython = "3.11"\naccel = "cu130"\ntorch = "2.14.1"\n'
    (tmp_path / "envs" / "combos.toml").write_text(row + 'glibc_floor = "2.31"\n')
    assert load_combos(Project(tmp_path))[0].glibc_floor == "2.31"
    assert load_combos(find_project())[0].glibc_floor == ""   # default: torch's own tag
    (tmp_path / "envs" / "combos.toml").write_text(row + "glibc_floor = 2.31\n")
    with pytest.raises(ConfigError, match='glibc_floor must be a glibc version in quotes'):
        load_combos(Project(tmp_path))
