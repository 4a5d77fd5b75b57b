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
