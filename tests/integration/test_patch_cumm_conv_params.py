"""patches/cumm conv-params-inline, through real pccm code generation: upstream gives each
implicit-GEMM kernel's ConvParams a translation unit of its own (194 of spconv's 775 compile
steps, each a full nvcc run for a few lines of host code); patched, the constructor is defined
in its header, as GemmParams' is, and no unit is generated for it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from fixture_sets import fixture_tree

pccm = pytest.importorskip("pccm")


def generated(tmp_path: Path, patched: bool, units_variable: str | None = None
              ) -> tuple[dict, dict]:
    """(headers, units) pccm generates for one kernel from the (patched) fixture tree, with
    CUFORGE_CONV_PARAMS_UNITS as a build sets it (None: unset, as at run time)."""
    import os

    from pccm.core import CodeGenerator
    root = fixture_tree("cumm", tmp_path / ("patched" if patched else "upstream")
                        / str(units_variable), patched)
    spec = importlib.util.spec_from_file_location(f"cumm_kernel_{patched}_{units_variable}",
                                                  root / "cumm/conv/kernel.py")
    kernel = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = kernel   # pccm finds a class's namespace from its module's file
    saved = os.environ.pop("CUFORGE_CONV_PARAMS_UNITS", None)
    if units_variable is not None:
        os.environ["CUFORGE_CONV_PARAMS_UNITS"] = units_variable
    try:
        spec.loader.exec_module(kernel)   # the decorator reads the variable here
    finally:
        os.environ.pop("CUFORGE_CONV_PARAMS_UNITS", None)
        if saved is not None:
            os.environ["CUFORGE_CONV_PARAMS_UNITS"] = saved
    gen = CodeGenerator([], verbose=False)
    units = gen.build_graph([kernel.ConvKernel("tv::half_t")], None)
    headers, impls, *_ = gen.code_generation_v2(units)
    return ({k: v.to_string() for k, v in headers.items()},
            {k: v.to_string() for k, v in impls.items()})


def test_upstream_gives_the_params_a_unit_of_their_own(tmp_path):
    _, units = generated(tmp_path, patched=False)
    assert sorted(Path(k).name for k in units) == ["ConvKernel_run.cu", "ConvParams_ConvParams.cu"]


@pytest.mark.parametrize("units_variable", [None, "0"])   # run time; a lean build
def test_patched_the_constructor_lives_in_its_header(tmp_path, units_variable):
    headers, units = generated(tmp_path, patched=True, units_variable=units_variable)
    assert sorted(Path(k).name for k in units) == ["ConvKernel_run.cu"]
    (params,) = [text for name, text in headers.items() if name.endswith("cp/ConvParams.h")]
    assert "__host__ __device__" in params and "inline" in params
    assert "gemm_k_iterations = (problem + 31) / 32;" in params   # the body, not a declaration


def test_a_full_build_keeps_upstream_s_units(tmp_path):
    _, units = generated(tmp_path, patched=True, units_variable="1")
    assert sorted(Path(k).name for k in units) == ["ConvKernel_run.cu", "ConvParams_ConvParams.cu"]
