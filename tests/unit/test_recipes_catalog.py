"""The package recipes in recipes/: they parse, pin their sources, order their dependencies
and map arches the way each package needs (pure logic, no network, no GPU)."""

from __future__ import annotations

import re
import tomllib

import pytest

from cuforge.config.arches import parse_arch_list
from cuforge.core.project import find_project
from cuforge.config.recipes import Recipe, load_recipes, build_order


@pytest.fixture(scope="module")
def recipes() -> dict[str, Recipe]:
    return load_recipes(find_project())


MILO = ("diff-gaussian-rasterization", "diff-gaussian-rasterization_ms",
        "diff-gaussian-rasterization_gof", "simple-knn", "fused-ssim", "nvdiffrast",
        "tetra-triangulation")
POINTCEPT = ("pccm", "ccimport", "cumm", "spconv", "torch-scatter", "torch-sparse",
             "torch-cluster", "torch-geometric", "flash-attn", "ocnn", "swin3d", "pointops",
             "pointops2", "pointgroup_ops", "pointseg", "pointrope")


def test_every_stack_package_has_a_recipe(recipes):
    missing = [n for n in (*MILO, *POINTCEPT) if n not in recipes]
    assert not missing


def test_git_sources_pin_a_full_commit(recipes):
    for r in recipes.values():
        if r.source.git:
            assert re.fullmatch(r"[0-9a-f]{40}", r.source.commit), r.name


def test_sdist_sources_carry_a_sha256(recipes):
    for r in recipes.values():
        if r.source.sdist:
            assert r.source.sdist.startswith("https://"), r.name
            assert re.fullmatch(r"[0-9a-f]{64}", r.source.sha256), r.name


def test_milo_packages_come_from_the_pinned_milo_tree(recipes):
    for name in ("diff-gaussian-rasterization", "diff-gaussian-rasterization_ms",
                 "diff-gaussian-rasterization_gof", "simple-knn", "fused-ssim"):
        src = recipes[name].source
        assert src.git == "https://github.com/Anttwo/MILo.git"
        assert src.commit == "0c38aa65f8b768513964f13246ef1ae54f001c70"
        assert src.subdir == f"submodules/{name}"


def test_pointcept_libs_come_from_the_pinned_pointcept_tree(recipes):
    for name in ("pointops", "pointops2", "pointgroup_ops", "pointseg", "pointrope"):
        src = recipes[name].source
        assert src.commit == "d74c646db6abec569d0f23e0c34e7ddfce142789"
        assert src.subdir == f"libs/{name}"


def test_spconv_plan_is_pccm_ccimport_cumm_spconv(recipes):
    order = [r.name for r in build_order(recipes, ["spconv"])]
    assert set(order) == {"pccm", "ccimport", "cumm", "spconv"}
    assert order.index("cumm") > max(order.index("pccm"), order.index("ccimport"))
    assert order[-1] == "spconv"


def test_pure_python_packages_are_prebuilt(recipes):
    for name in ("pccm", "ccimport", "torch-geometric", "ocnn"):
        assert recipes[name].kind == "prebuilt" and recipes[name].prebuilt, name
        assert len(recipes[name].prebuilt_sha256) >= 1, name    # pinned: fails closed
    # held below 2.8 (Pointcept's PyG models), pinned to one file
    assert recipes["torch-geometric"].prebuilt == ("torch-geometric==2.7.0",)


def _arch_env(recipe: Recipe, request: str) -> str:
    """What the recipe's {compact_targets} placeholder renders for a request."""
    return recipe.arches.map(parse_arch_list(request)).compact()


def test_flash_attn_passes_12_1_and_ptx_on_and_skips_the_rest(recipes):
    fa = recipes["flash-attn"]
    assert dict(fa.arches.env) == {"FLASH_ATTN_CUDA_ARCHS": "{compact_targets}"}
    assert _arch_env(fa, "12.1+PTX;12.0") == "121+PTX;120"       # the spark combos
    assert _arch_env(fa, "8.0-virtual") == "80-virtual"          # the H200 JIT run
    assert _arch_env(fa, "8.6;9.0;10.0") == "90;100"
    assert len(fa.arches.map(parse_arch_list("7.5"))) == 0      # -> a `skipped` manifest entry


def test_cumm_maps_unknown_arches_to_the_newest_below_with_ptx(recipes):
    from dataclasses import replace
    assert recipes["cumm"].arches.policy == "auto"      # native when patched + compilable
    cumm = replace(recipes["cumm"], arches=replace(recipes["cumm"].arches, policy="ptx"))
    assert str(cumm.arches.map(parse_arch_list("12.1"))) == "12.0+PTX"
    assert str(cumm.arches.map(parse_arch_list("12.0;12.1+PTX"))) == "12.0+PTX"
    assert str(cumm.arches.map(parse_arch_list("10.3;9.0"))) == "10.0+PTX;9.0"
    env = dict(cumm.env)
    assert env["CUMM_CUDA_VERSION"] == "{cuda}" and env["CUMM_DISABLE_JIT"] == "1"
    assert dict(cumm.arches.env) == {"CUMM_CUDA_ARCH_LIST": "{torch_list}"}
    assert dict(recipes["spconv"].env)["SPCONV_DISABLE_JIT"] == "1"


def test_pyg_sdists_force_cuda(recipes):
    for name in ("torch-scatter", "torch-sparse", "torch-cluster"):
        assert dict(recipes[name].env).get("FORCE_CUDA") == "1", name


def test_system_headers_name_their_debian_packages(recipes):
    pg = {h.header: h.debian for h in recipes["pointgroup_ops"].system_headers}
    assert pg == {"google/dense_hash_map": "libsparsehash-dev"}
    tetra = {h.debian for h in recipes["tetra-triangulation"].system_headers}
    assert tetra == {"libcgal-dev", "libgmp-dev", "libmpfr-dev", "libboost-dev"}


def test_referenced_patch_sets_exist(recipes):
    patches = find_project().patches_dir
    for r in recipes.values():
        for p in r.patches:
            assert (patches / p / "patch.toml").is_file(), f"{r.name}: patches/{p}"


def test_every_compiled_package_has_a_smoke_script(recipes):
    for r in recipes.values():
        if r.kind != "prebuilt":
            path = r.smoke.path(find_project(), r.name)
            assert path.is_file(), f"{r.name}: {path}"


def test_tetra_recipe_names_the_upstream_source_for_cmake(recipes):
    tetra = recipes["tetra-triangulation"]
    assert tetra.kind == "cmake" and tetra.source.path == "native/tetra_triangulation"
    # Requested core field (not read yet): the upstream sources, passed as -DTETRA_SOURCE_DIR.
    extra = tomllib.loads(tetra.file.read_text())["extra_sources"]["TETRA_SOURCE_DIR"]
    assert extra["commit"] == "0c38aa65f8b768513964f13246ef1ae54f001c70"
    assert extra["subdir"] == "submodules/tetra_triangulation"


def test_needing_a_gpu_is_declared_per_recipe(recipes):
    """tetra-triangulation's smoke test is CGAL on the CPU: declared GPU-free, with scipy."""
    tetra = recipes["tetra-triangulation"].smoke
    assert (tetra.gpu, tetra.requires) == (False, ("scipy",))
    assert all(r.smoke.gpu for n, r in recipes.items() if n != "tetra-triangulation")
    assert "exit(77)" not in tetra.path(find_project(), "tetra-triangulation").read_text()


def test_smoke_table_and_short_form_parse(tmp_path):
    from cuforge.core.errors import ConfigError
    from cuforge.config.recipes import parse_recipe
    base = 'name = "x"\n[source]\npath = "native/x"\n'
    short = tmp_path / "short.toml"
    short.write_text('smoke = "smoke/other.py"\n' + base)
    assert parse_recipe(short).smoke.script == "smoke/other.py" and parse_recipe(short).smoke.gpu
    table = tmp_path / "table.toml"
    table.write_text(base + '[smoke]\ngpu = false\nrequires = ["scipy"]\n')
    rule = parse_recipe(table).smoke
    assert (rule.script, rule.gpu, rule.requires) == ("", False, ("scipy",))
    assert rule.path(find_project(), "x").name == "check_x.py"
    bad = tmp_path / "bad.toml"
    bad.write_text(base + '[smoke]\ngpus = 0\n')
    with pytest.raises(ConfigError, match="unknown \\[smoke\\] keys"):
        parse_recipe(bad)


def test_manifest_says_how_targets_outside_cumms_table_were_handled():
    """12.1 is not in cumm's table: the manifest's reason names the policy and the mapping."""
    from cuforge.config.arches import parse_arch_list
    from cuforge.core.project import find_project
    from cuforge.config.recipes import load_recipes
    rule = load_recipes(find_project())["spconv"].arches
    asked = parse_arch_list("12.0;12.1+PTX")
    assert rule.explain(asked, "ptx") == "arch policy ptx: outside its arch table: 12.1 -> 12.0+PTX"
    assert rule.explain(asked, "native") == ("arch policy native: outside its arch table: "
                                             "12.1 kept (table patched)")
    assert rule.explain(asked, "skip").endswith("12.1 dropped")
    assert rule.explain(parse_arch_list("9.0;12.0"), "ptx") == ""
