from pathlib import Path

from cuforge.verify.runtimedeps import base_name, install_step, split


def test_torch_and_wheelhouse_packages_never_come_from_an_index():
    install, left = split(["scipy>=1.10", "torch>=2.0", "Torch_Scatter", "cumm-cu130<0.8.0",
                           "numpy"], ["torch-scatter", "cumm", "spconv"])
    assert install == ["scipy>=1.10", "numpy"]
    assert left == ["torch>=2.0", "Torch_Scatter", "cumm-cu130<0.8.0"]


def test_names_are_normalised_and_cuda_suffixes_dropped():
    assert base_name("spconv-cu126==2.3.8") == "spconv"
    assert base_name("Torch_Geometric") == "torch-geometric"


def test_install_pins_the_envs_torch():
    step = install_step(Path("/env/bin/python"), "x.whl", ["scipy"], "2.14.1")
    assert step.argv[-2:] == ("scipy", "torch==2.14.1")
    assert "pip" in step.argv and "install" in step.argv
