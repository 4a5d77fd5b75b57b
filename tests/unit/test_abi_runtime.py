from cuforge.verify.abi import abi_of, is_runtime_symbol


def test_runtime_vs_own_symbols():
    # std::string's own members (what a statically linked libstdc++ part defines)
    assert is_runtime_symbol("_ZNSs4swapERSs")
    assert is_runtime_symbol("_ZNKSbIwSt11char_traitsIwESaIwEE12find_last_ofEPKwm")
    assert is_runtime_symbol("_ZN9__gnu_cxxeqIPKcSsEEbRKNS_17__normal_iteratorIT_T0_EESB_")
    # the extension's own function taking an old-ABI string: a real mismatch
    assert not is_runtime_symbol("_Z5greetRKSs")
    assert not is_runtime_symbol("_ZN3c106detail14torchCheckFailEPKcS2_jRKSs")
    assert abi_of("_ZN3c106detail14torchCheckFailEPKcS2_jRKSs") == "old"


def test_special_names_are_not_old_strings():
    """typeinfo names of builtin types (seen defined in a gcc 13 build on the H200)."""
    assert abi_of("_ZTSs") is None          # typeinfo name for short
    assert abi_of("_ZTSb") is None          # typeinfo name for bool
    assert abi_of("_ZTISs") == "old"        # typeinfo for std::string (old ABI)
    assert abi_of("_ZTINSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE") == "new"
