"""patches/spconv's narrower kernel set (``--kernels 3d``, issue 51), through real pccm code
generation on the upstream-shaped fixture: unset variables (every other build, and run time)
generate upstream's code, every dimension and key type; the 3d set's variables generate the 3-D
ops only and uint32 sorts only; and spconv.utils imports from a core_cc without the 1-, 2- and
4-D modules once patched (upstream's would not)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixture_sets import fixture_tree

pytest.importorskip("pccm")

SET_3D = {"CUFORGE_SPCONV_NDIMS": "3", "CUFORGE_SPCONV_SORT_KEYS": "uint32"}


def generated(tmp_path: Path, patched: bool, env: dict[str, str]) -> dict[str, str]:
    """The units pccm generates for SpconvOps of the (patched) fixture, the module read with
    ``env`` set, as spconv's setup.py reads it in a build: {file name: C++ text}."""
    from pccm.core import CodeGenerator
    root = fixture_tree("spconv", tmp_path / f"tree-{patched}-{len(env)}", patched)
    # one module name for every tree: pccm names the C++ namespace after it
    spec = importlib.util.spec_from_file_location("spconv_all", root / "spconv/csrc/sparse/all.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # pccm finds a class's namespace from its module's file
    saved = {k: os.environ.pop(k, None) for k in SET_3D}
    os.environ.update(env)
    try:
        spec.loader.exec_module(module)   # the patch reads the variables here
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v
    try:
        gen = CodeGenerator([], verbose=False)
        _, impls, *_ = gen.code_generation_v2(gen.build_graph([module.SpconvOps()], None))
    finally:
        del sys.modules[spec.name]
    return {Path(k).name if "sort" in k else k: v.to_string() for k, v in impls.items()}


def dimensions(units: dict[str, str]) -> list[str]:
    return sorted({p for name in units for p in Path(name).parts if p.startswith("ops")})


def test_unset_the_patched_tree_generates_upstreams_code(tmp_path: Path) -> None:
    upstream = generated(tmp_path, patched=False, env={})
    patched = generated(tmp_path, patched=True, env={})
    assert dimensions(upstream) == dimensions(patched) == ["ops1d", "ops2d", "ops3d", "ops4d"]
    assert patched == upstream


def test_the_3d_set_generates_3d_ops_and_uint32_sorts_only(tmp_path: Path) -> None:
    units = generated(tmp_path, patched=True, env=SET_3D)
    assert dimensions(units) == ["ops3d"]
    sorts = {name: text for name, text in units.items() if "sort_1d_by_key" in name}
    assert len(sorts) == 4
    for name, text in sorts.items():
        assert "uint32" in text and "int64" not in text and "int32_t, " not in text, name
    assert "tv::dispatch<uint32_t>(data.dtype()" in sorts["SpconvOps_sort_1d_by_key_split.cc"]
    assert "sort_keys<uint32_t>(keys, 0);" in sorts["SpconvOps_sort_1d_by_key_allocator.cc"]


def test_a_set_without_3d_stops_the_build(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="CUFORGE_SPCONV_NDIMS must hold 3"):
        generated(tmp_path, patched=True, env={"CUFORGE_SPCONV_NDIMS": "2"})


def _import_utils(root: Path, dims: tuple[int, ...]) -> subprocess.CompletedProcess:
    """Import spconv.utils of ``root`` over a core_cc that has the ops of ``dims`` only."""
    pkg = root / "spconv" / "core_cc" / "csrc" / "sparse" / "all"
    pkg.mkdir(parents=True)
    for part in (root / "spconv" / "core_cc", *list(pkg.parents)[:3], pkg):
        (part / "__init__.py").touch()
    for n in dims:
        (pkg / f"ops_cpu{n}d.py").write_text(f"class Point2VoxelCPU:\n    ndim = {n}\n")
        (pkg / f"ops{n}d.py").write_text(f"class Point2Voxel:\n    ndim = {n}\n")
    code = ("import spconv.utils as u; print(sorted(n for n in dir(u) if n.startswith('Point2')),"
            " u.Point2VoxelGPU3d.ndim)")
    return subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(root)})


def test_spconv_utils_imports_from_a_3d_core_cc_once_patched(tmp_path: Path) -> None:
    upstream = _import_utils(fixture_tree("spconv", tmp_path / "up", False), (3,))
    assert upstream.returncode != 0 and "ops_cpu1d" in upstream.stderr
    patched = _import_utils(fixture_tree("spconv", tmp_path / "p", True), (3,))
    assert patched.returncode == 0, patched.stderr
    assert patched.stdout.split() == ["['Point2VoxelCPU3d',", "'Point2VoxelGPU3d']", "3"]
    every = _import_utils(fixture_tree("spconv", tmp_path / "all", True), (1, 2, 3, 4))
    assert every.returncode == 0 and "Point2VoxelGPU4d" in every.stdout
