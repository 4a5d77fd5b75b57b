import pytest

from cuforge.config.arches import check_supported, map_to_supported, parse_arch_list
from cuforge.core.errors import ConfigError


def test_parse_and_render_forms():
    archs = parse_arch_list("12.0;12.1+PTX")
    assert archs.torch() == "12.0;12.1+PTX"
    assert archs.cmake() == "120-real;121"
    assert [a.number for a in archs.sass] == ["120", "121"]
    assert [a.number for a in archs.ptx] == ["121"]
    assert archs.gencode_flags()[1] == "-gencode=arch=compute_121,code=[sm_121,compute_121]"


def test_ptx_only_target_renders_for_each_consumer():
    archs = parse_arch_list("12.1+PTX;12.0;8.0-virtual")
    assert archs.torch() == "12.1+PTX;12.0;8.0-virtual"       # keys and manifests keep it apart
    assert archs.torch_env() == "12.1+PTX;12.0;8.0+PTX"       # torch's list has no PTX-only form
    assert archs.cmake() == "121;120-real;80-virtual"
    assert archs.compact() == "121+PTX;120;80-virtual"
    assert [a.number for a in archs.sass] == ["121", "120"]
    assert [a.number for a in archs.ptx] == ["121", "80"]
    assert archs.gencode_flags()[2] == "-gencode=arch=compute_80,code=[compute_80]"


def test_ptx_only_and_sass_merge_into_sass_plus_ptx():
    assert parse_arch_list("8.0-virtual 8.0").torch() == "8.0+PTX"
    assert parse_arch_list("8.0-virtual;8.0-virtual").torch() == "8.0-virtual"


def test_space_separated_and_duplicates_merge():
    assert parse_arch_list("9.0 12.0 12.0+PTX").torch() == "9.0;12.0+PTX"


def test_arch_specific_suffix():
    assert parse_arch_list("12.0a").cmake() == "120a-real"


def test_named_family_expands():
    assert parse_arch_list("Blackwell+PTX").torch() == "10.0;12.0+PTX"


@pytest.mark.parametrize("bad", ["12.1+PTXX", "sm121", "sm_121", "12", "12.1.0", "+PTX", "12.1 +PTX",
                                 "8.0-real", "8.0+PTX-virtual"])
def test_malformed_is_a_config_error_with_a_fix(bad):
    with pytest.raises(ConfigError) as err:
        parse_arch_list(bad)
    assert "fix:" in str(err.value)


def test_unknown_arch():
    with pytest.raises(ConfigError, match="unknown CUDA arch '13.5'"):
        parse_arch_list("13.5")


def test_arch_needing_newer_cuda():
    with pytest.raises(ConfigError, match=r"12.1 needs CUDA >= 12.9.*CUDA 12.8"):
        check_supported(parse_arch_list("12.0;12.1+PTX"), "12.8")
    check_supported(parse_arch_list("12.0;12.1+PTX"), "12.9")


def test_arch_dropped_by_cuda13():
    with pytest.raises(ConfigError, match="CUDA 13.0 .*can no longer compile for arch 7.0"):
        check_supported(parse_arch_list("7.0;9.0"), "13.0")
    with pytest.raises(ConfigError, match="called 11.0 there"):
        check_supported(parse_arch_list("10.1"), "13.0")
    check_supported(parse_arch_list("7.5;8.0"), "13.0")


def test_map_to_supported_policies():
    cumm = ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0"]
    req = parse_arch_list("12.0;12.1+PTX")
    assert map_to_supported(req, cumm, "ptx").torch() == "12.0+PTX"
    assert map_to_supported(req, cumm, "native").torch() == "12.0;12.1+PTX"
    assert map_to_supported(parse_arch_list("12.1"), ["8.0", "9.0", "10.0", "12.0"], "skip").torch() == ""
    with pytest.raises(ConfigError):
        map_to_supported(req, cumm, "error")
