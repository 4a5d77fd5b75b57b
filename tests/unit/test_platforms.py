"""Target platforms: wheelhouse paths, wheel tags, and the refusal to cross-compile."""

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from cuforge.config import platforms
from cuforge.config.combos import load_combos
from cuforge.core.errors import ConfigError
from cuforge.core.project import find_project
from cuforge.env.target import require_native, resolve


def _other_platform() -> platforms.Platform:
    here = platforms.build_platform()
    return next(p for p in platforms.known().values() if p.machine != here.machine)


def test_wheel_tags_follow_the_platform():
    arm, x86 = platforms.get("linux-aarch64"), platforms.get("linux-x86_64")
    manylinux = "torch-2.14.1-cp312-cp312-manylinux_2_28_aarch64.whl"
    assert arm.accepts(manylinux) and not x86.accepts(manylinux)
    assert x86.accepts("demo-0.1-cp311-cp311-linux_x86_64.whl")
    assert arm.accepts("pccm-0.4.16-py3-none-any.whl") and x86.accepts("pccm-0.4.16-py3-none-any.whl")
    assert arm.uv_platform == "aarch64-manylinux_2_28"


def test_unknown_platform_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown platform 'linux-arm64'.*\n  fix: use one of"):
        platforms.get("linux-arm64")


def test_spark_combos_are_aarch64_with_sm121_first():
    combos = {c.id: c for c in load_combos(find_project())}
    spark = [c for c in combos.values() if c.platform == "linux-aarch64"]
    assert {c.id for c in spark} >= {"spark", "spark-torch2.9"}
    for c in spark:
        assert str(c.arches.sass[0]) == "12.1", c.id
        assert c.wheel_dir(Path("wh")).parts[:2] == ("wh", "linux-aarch64")
    assert combos["spark"].wheel_dir(Path("wh")) == Path("wh/linux-aarch64/cu130/torch2.14.1-cp312")
    # a combo without a platform key builds for (and is filed under) this machine
    assert combos["3.11-cu130"].target_platform == platforms.build_platform()
    assert combos["3.11-cu130"].wheel_dir(Path("wh")).parts[1] == platforms.build_platform().name


def test_require_native_refuses_another_machine():
    other = _other_platform()
    project = find_project()
    combo = next(c for c in load_combos(project) if c.target_platform.machine == other.machine
                 and not c.emulate)
    with pytest.raises(ConfigError) as err:
        require_native(combo, platforms.build_platform())
    text = str(err.value)
    assert f"{other.machine} wheels are built on {other.machine}" in text
    assert "\n  fix: pass --emulate" in text and "run the same command on a" in text
    require_native(combo, other)   # on its own machine it is fine
    require_native(replace(combo, emulate=True), platforms.build_platform())   # asked for: allowed


def test_the_target_refuses_another_platform(tmp_path):
    other = _other_platform()
    project = find_project()
    combo = next(c for c in load_combos(project) if c.target_platform.machine == other.machine
                 and not c.emulate)
    with pytest.raises(ConfigError, match="does not cross-compile"):
        resolve(project, combo)   # decided once, before any env is made
    assert not (project.state_dir / "envs" / combo.env_id).exists()   # nothing created


@pytest.mark.skipif(platforms.build_platform().machine == "aarch64",
                    reason="this machine builds aarch64")
def test_cli_build_of_an_aarch64_combo_is_one_clear_message(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "cuforge", "build", "--combo", "spark",
                           "--dry-run"], capture_output=True, text=True,
                          env={**os.environ, "CUFORGE_STATE": str(tmp_path)})
    assert proc.returncode == ConfigError.exit_code, proc.stderr
    assert "aarch64 wheels are built on aarch64" in " ".join(proc.stderr.split())
    assert "Traceback" not in proc.stderr


@pytest.mark.skipif(platforms.build_platform().machine == "aarch64",
                    reason="this machine builds aarch64")
def test_an_emulated_target_names_why_no_gpu_is_visible_and_where_its_headers_are():
    """What verification and the header check read off the target: under QEMU no GPU (the
    smoke is skipped without a probe) and the emulation root as the cross compiler's
    sysroot; natively neither."""
    project = find_project()
    combos = {c.id: c for c in load_combos(project)}
    emulated = resolve(project, combos["spark-emulated"])
    assert emulated.no_device == "linux-aarch64 code runs under QEMU here, which reaches no GPU"
    assert emulated.sysroot == project.state_dir / "emulation" / "linux-aarch64" / "root"
    here = platforms.build_platform()
    native = resolve(project, next(c for c in combos.values()
                                   if c.target_platform == here and not c.interpreter))
    assert native.no_device == "" and native.sysroot is None
