"""cuforge.discovery.buildfiles on build files in the field's shapes: what makes a folder a
torch extension build, its name, and the file:line that says so (a commented-out call too)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from cuforge.config.recipes import BuildKind
from cuforge.discovery.buildfiles import read_folder

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "checkouts" / "gaussian_splatting"
RASTERIZER = "submodules/diff-gaussian-rasterization"
GOF_TETRA = FIXTURE.parent / "gof_tetra"


def write(folder: Path, **files: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("__", ".")).write_text(textwrap.dedent(text))
    return folder


def test_a_3dgs_rasterizer_is_found_by_its_multi_line_call():
    build = read_folder(FIXTURE / RASTERIZER, RASTERIZER)
    assert build.kind is BuildKind.SETUPTOOLS
    assert build.name == "diff_gaussian_rasterization"
    assert build.modules == ("diff_gaussian_rasterization._C", "diff_gaussian_rasterization")
    assert [c.text() for c in build.calls] == [
        f"{RASTERIZER}/setup.py:13 CUDAExtension(diff_gaussian_rasterization._C)"]


def test_gof_tetra_triangulation_commented_out_ext_modules_and_a_cmake_build():
    folder = GOF_TETRA
    build = read_folder(folder, "submodules/tetra-triangulation")
    assert build.kind is BuildKind.CMAKE and build.name == "tetra-nerf"
    assert [c.text() for c in build.calls] == [
        "submodules/tetra-triangulation/CMakeLists.txt:4 find_package(Torch)",
        "submodules/tetra-triangulation/setup.py:10 CMakeExtension(cmake_example) (commented out)"]


def test_a_commented_out_cuda_extension_is_still_found(tmp_path):
    folder = write(tmp_path / "ext", setup__py="""\
        from setuptools import setup
        from torch.utils.cpp_extension import BuildExtension, CUDAExtension
        setup(name="fancy_ext",
              # ext_modules=[CUDAExtension(
              #     name="fancy_ext._C", sources=["k.cu"])],
              cmdclass={"build_ext": BuildExtension})
        """)
    build = read_folder(folder, "ext")
    assert build.kind is BuildKind.SETUPTOOLS
    assert [c.text() for c in build.calls] == ["ext/setup.py:4 CUDAExtension(fancy_ext._C) "
                                               "(commented out)"]


def test_folders_that_build_no_torch_extension_say_why(tmp_path):
    plain = read_folder(write(tmp_path / "plain", setup__py="""\
        from setuptools import setup
        setup(name="helpers", packages=["helpers"])
        """), "plain")
    assert plain.kind is None and "no torch.utils.cpp_extension" in plain.why_not
    glm = read_folder(write(tmp_path / "glm", CMakeLists__txt="""\
        project(glm)
        # find_package(Torch) would be a torch build; this one is commented out
        """), "third_party/glm")
    assert glm.kind is None and glm.why_not == "its CMakeLists.txt does not find Torch"
    assert read_folder(tmp_path, "") is None    # no build file at all
