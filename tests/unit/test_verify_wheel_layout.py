"""Wheel names, module discovery from top_level.txt / RECORD."""

from __future__ import annotations

from pathlib import Path

from cuforge.verify.wheel import import_roots, module_of, package_name, top_level_modules


def test_package_name():
    assert package_name(Path("diff_gaussian_rasterization-0.0.0-cp312-cp312-linux_x86_64.whl")) == \
        "diff-gaussian-rasterization"


def test_module_of():
    assert module_of(Path("spconv/core_cc.cpython-312-x86_64-linux-gnu.so")) == "spconv.core_cc"
    assert module_of(Path("_ext.abi3.so")) == "_ext"
    assert module_of(Path("pkg.libs/libgomp-1a2b.so.1")) is None
    assert module_of(Path("simple_knn/_C.so")) == "simple_knn._C"


def test_top_level_from_top_level_txt(tmp_path):
    info = tmp_path / "x-1.dist-info"
    info.mkdir()
    (info / "top_level.txt").write_text("pointops\n_ext\n")
    assert top_level_modules(tmp_path) == ["pointops", "_ext"]


def test_top_level_from_record(tmp_path):
    info = tmp_path / "x-1.dist-info"
    info.mkdir()
    (info / "RECORD").write_text(
        "fused_ssim/__init__.py,,\nfused_ssim_cuda.cpython-311-x86_64-linux-gnu.so,,\n"
        "helper.py,,\nx-1.dist-info/RECORD,,\nx-1.data/scripts/run,,\n")
    assert top_level_modules(tmp_path) == ["fused_ssim", "fused_ssim_cuda", "helper"]


def test_import_roots_include_data_dirs(tmp_path):
    (tmp_path / "x-1.data" / "platlib").mkdir(parents=True)
    assert import_roots(tmp_path) == [tmp_path, tmp_path / "x-1.data" / "platlib"]
