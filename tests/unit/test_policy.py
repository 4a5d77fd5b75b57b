from cuforge.config.combos import select_combo, with_overrides
from cuforge.pipeline.request import BuildRequest
from cuforge.pipeline.plan import effective_policy, package_arches
from cuforge.core.project import find_project
from cuforge.config.arches import ArchRule
from cuforge.config.recipes import Recipe, Source

CUMM = ("7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0")


def _recipe(policy: str, native_patches=()) -> Recipe:
    return Recipe(name="cumm", kind="setuptools", source=Source(path="x"),
                  arches=ArchRule(policy, CUMM, native_patches=tuple(native_patches)))


def _combo(arches: str, accel: str = "cu130"):
    combo = select_combo(find_project(), python="3.12", accel=accel)
    return with_overrides(combo, arches=arches)


def test_auto_is_native_when_patched_and_the_toolkit_compiles_it():
    combo = _combo("12.0;12.1+PTX")
    recipe = _recipe("auto", ["cumm-native-arches"])
    req = BuildRequest(combo=combo)
    assert effective_policy(recipe, combo, req) == "native"
    assert package_arches(recipe, combo, req).torch() == "12.0;12.1+PTX"


def test_auto_is_ptx_without_a_native_patch():
    combo = _combo("12.0;12.1+PTX")
    recipe = _recipe("auto")
    req = BuildRequest(combo=combo)
    assert effective_policy(recipe, combo, req) == "ptx"
    assert package_arches(recipe, combo, req).torch() == "12.0+PTX"


def test_command_line_policy_wins():
    combo = _combo("12.0;12.1+PTX")
    recipe = _recipe("auto", ["cumm-native-arches"])
    req = BuildRequest(combo=combo, arch_policy="ptx")
    assert effective_policy(recipe, combo, req) == "ptx"


def test_no_ptx_package_and_skip():
    combo = _combo("12.0+PTX;8.0-virtual")
    rule = ArchRule("skip", ("8.0", "9.0", "10.0", "12.0"), ptx=False)
    recipe = Recipe(name="sass-only", kind="setuptools", source=Source(path="x"), arches=rule)
    assert package_arches(recipe, combo, BuildRequest(combo=combo)).torch() == "12.0;8.0"
    only_121 = _combo("12.1")
    assert len(package_arches(recipe, only_121, BuildRequest(combo=only_121))) == 0


def test_append_gencode_reaches_every_nvcc_call_with_the_compiler_cache_off():
    from dataclasses import replace as dc_replace
    from pathlib import Path

    from cuforge.pipeline.plan import job_env
    from cuforge.env.toolchain import Toolkit
    from cuforge.env.torchinfo import TorchInfo
    from cuforge.env.venv import ComboEnv
    combo = _combo("12.0;12.1+PTX")
    info = TorchInfo(python=Path("/x/bin/python"), py_version="3.12", site_packages=Path("/x"),
                     machine="x86_64", torch="2.14.1", cuda="13.0")
    from cuforge.core.project import find_project
    from cuforge.env.target import resolve
    combo_env = ComboEnv(combo, info, Toolkit(Path("/x/cuda"), combo.accel.cuda), None, True,
                   resolve(find_project(), combo))
    recipe = _recipe("ptx")
    plain = dict(job_env(combo_env, recipe, combo.arches, 2))
    assert plain["NVCC_APPEND_FLAGS"] == "-t 2" and "TORCH_NO_COMPILER_WRAPPER" not in plain
    rule = dc_replace(recipe.arches, append_gencode=True)
    env_vars = dict(job_env(combo_env, dc_replace(recipe, arches=rule), combo.arches, 2))
    assert "-gencode=arch=compute_121,code=[sm_121,compute_121]" in env_vars["NVCC_APPEND_FLAGS"]
    assert env_vars["TORCH_NO_COMPILER_WRAPPER"] == "1"
