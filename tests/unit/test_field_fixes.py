"""The field fixes (patches/field-*): each finds the files it concerns itself, edits them so
the build compiles, leaves the rest alone, and says "applied" the second time. The texts are
ours, in the shapes the issue trackers report (a 2DGS header without <cstdint>, a
pointnet2_ops setup.py that overwrites TORCH_CUDA_ARCH_LIST, -std=c++14, AT_CHECK, THC,
cub::Max)."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from cuforge import patching
from cuforge.discovery.fixes import field_fixes

PATCHES = Path(__file__).resolve().parents[2] / "patches"


def tree(root: Path, **files: str) -> Path:
    for rel, text in files.items():
        path = root / rel.replace("__", "/").replace("_DOT_", ".")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def apply(name: str, root: Path) -> None:
    patching.apply(patching.load_patch_set(name, patches_dir=PATCHES), root)


def test_cstdint_goes_where_fixed_width_integers_are_used_without_it(tmp_path):
    root = tree(tmp_path, cuda_rasterizer__rasterizer_impl_DOT_h="""\
        #pragma once
        #include <vector>
        struct Tile { uint32_t start, end; };
        """, cuda_rasterizer__forward_DOT_h="""\
        #include <cstdint>
        uint64_t key;
        """, ext_DOT_cpp="int main() { return 0; }\n")
    assert [(f.name, f.files) for f in field_fixes(PATCHES, root)] == [
        ("field-cstdint", ("cuda_rasterizer/rasterizer_impl.h",))]
    apply("field-cstdint", root)
    impl = (root / "cuda_rasterizer" / "rasterizer_impl.h").read_text()
    assert impl.splitlines()[0].startswith("#include <cstdint>  // cuforge:")
    assert (root / "cuda_rasterizer" / "forward.h").read_text().count("cstdint") == 1
    assert field_fixes(PATCHES, root) == []          # applied: nothing left to fix


def test_a_setup_py_that_picks_its_own_arches_gets_the_combos_back(tmp_path):
    root = tree(tmp_path, setup_DOT_py="""\
        import os
        from setuptools import setup
        from torch.utils.cpp_extension import BuildExtension, CUDAExtension
        os.environ["TORCH_CUDA_ARCH_LIST"] = "3.7+PTX;5.0;6.0;6.1;6.2;7.0;7.5"
        setup(name="pointnet2_ops",
              ext_modules=[CUDAExtension("pointnet2_ops._ext", ["k.cu"],
                  extra_compile_args={"cxx": ["-O3", "-std=c++14"],
                                      "nvcc": ["-O3", "-gencode", "arch=compute_70,code=sm_70",
                                               "-gencode=arch=compute_75,code=sm_75", "-Xfatbin"]})],
              cmdclass={"build_ext": BuildExtension})
        """)
    assert [f.name for f in field_fixes(PATCHES, root)] == ["field-arch-list", "field-cxx17"]
    apply("field-arch-list", root)
    apply("field-cxx17", root)
    text = (root / "setup.py").read_text()
    ast.parse(text)                                  # still Python
    assert 'os.environ["TORCH_CUDA_ARCH_LIST"]' not in text
    assert "compute_70" not in text and "compute_75" not in text and "arch=" not in text
    assert '"-Xfatbin"' in text and '"-std=c++17"' in text


def test_apis_torch_and_cccl_removed_are_renamed(tmp_path):
    root = tree(tmp_path, src__ops_DOT_cpp="""\
        #include <THC/THC.h>
        void f(at::Tensor x) {
          AT_CHECK(x.is_cuda(), "x must be a CUDA tensor");
          AT_DISPATCH_FLOATING_TYPES(x.type(), "f", [&] {});
          float *p = x.data<float>();
        }
        """, src__reduce_DOT_cu="""\
        #include <cub/cub.cuh>
        void g() { auto m = cub::Max(); (void)m; thrust::device; }
        """)
    assert [f.name for f in field_fixes(PATCHES, root)] == ["field-cccl", "field-torch-api"]
    apply("field-torch-api", root)
    apply("field-cccl", root)
    ops = (root / "src" / "ops.cpp").read_text()
    assert "THC/THC.h" not in ops and "#include <c10/cuda/CUDAException.h>" in ops
    assert "TORCH_CHECK(" in ops and "AT_CHECK(" not in ops.replace("/* cuforge: AT_CHECK */", "")
    assert "x.scalar_type()" in ops and "x.data_ptr<float>()" in ops
    reduce = (root / "src" / "reduce.cu").read_text()
    assert "cuda::maximum<>()" in reduce and "#include <cuda/functional>" in reduce
    assert "#include <thrust/execution_policy.h>" in reduce
    assert field_fixes(PATCHES, root) == []


# one file each field fix must find and fix (the sets tested above have theirs there too)
CASES = {"field-cstdint": ("rasterizer_impl.h", "struct T { uint32_t a; };\n"),
         "field-cstdio": ("log.cpp", 'void f() { printf("%d", 1); }\n'),
         "field-cfloat": ("spatial.cu", "float best = FLT_MAX;\n"),
         "field-arch-list": ("setup.py", 'import os\nos.environ["TORCH_CUDA_ARCH_LIST"] = "7.5"\n'),
         "field-cxx17": ("setup.py", 'args = {"cxx": ["-std=c++14"]}\n'),
         "field-torch-api": ("ops.cpp", 'void f() { AT_CHECK(true, "x"); }\n'),
         "field-cccl": ("sort.cu", "auto m = cub::Max();\n")}


def test_every_field_fix_has_its_case_and_fixes_it(tmp_path):
    names = sorted(n for n in patching.available_sets(PATCHES) if n.startswith("field-"))
    assert names == sorted(CASES)
    for name, (file, text) in CASES.items():
        root = tree(tmp_path / name, **{file.replace(".", "_DOT_"): text})
        assert [f.name for f in field_fixes(PATCHES, root)] == [name], name
        apply(name, root)
        assert field_fixes(PATCHES, root) == [], name
