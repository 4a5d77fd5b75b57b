"""mesh-convert on generated meshes: duplicates, a floater, colours; every output loads back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

trimesh = pytest.importorskip("trimesh")
pytest.importorskip("fast_simplification")
np = pytest.importorskip("numpy")

from cuforge.core.errors import ConfigError  # noqa: E402
from cuforge.workstation.mesh import MeshOptions, convert, vertex_colors  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def messy_mesh(path: Path, *, colors: bool = True) -> tuple[int, int]:
    """A sphere (1280 faces) plus a tiny far floater (80 faces), written as a triangle soup
    (every face has its own three vertices) with 7 repeated faces and per-vertex colours.
    Returns (faces of the clean sphere, faces of the floater)."""
    body = trimesh.creation.icosphere(subdivisions=3, radius=1.0)
    floater = trimesh.creation.icosphere(subdivisions=1, radius=0.01)
    floater.apply_translation([4.0, 0, 0])
    both = trimesh.util.concatenate([body, floater])
    soup = both.vertices[both.faces].reshape(-1, 3)
    faces = np.arange(len(soup)).reshape(-1, 3)
    faces = np.vstack([faces, faces[:7]])
    rgba = None
    if colors:   # colour from position: merged duplicates agree on their colour
        rgb = ((soup - soup.min(0)) / np.ptp(soup, 0) * 255).astype(np.uint8)
        rgba = np.hstack([rgb, np.full((len(soup), 1), 255, np.uint8)])
    mesh = trimesh.Trimesh(soup, faces, vertex_colors=rgba, process=False)
    path.write_bytes(mesh.export(file_type="ply"))
    return len(body.faces), len(floater.faces)


def reload(path: Path):
    return trimesh.load(str(path), force="mesh", process=False)


def test_clean_drops_duplicates_and_floater_keeps_colours(tmp_path: Path) -> None:
    body, floater = messy_mesh(tmp_path / "mesh.ply")
    result = convert(tmp_path / "mesh.ply", None, MeshOptions(keep_components=0.05))
    assert [p.name for p in result.outputs] == ["mesh.clean.ply", "mesh.obj", "mesh.glb"]
    ply, obj, glb = (reload(p) for p in result.outputs)
    assert len(ply.faces) == body          # 7 repeats and the floater gone
    assert len(ply.vertices) == 642        # the icosphere's vertex count: duplicates merged
    assert ply.is_watertight
    for colored in (ply, glb):
        assert vertex_colors(colored) is not None and len(np.unique(vertex_colors(colored), axis=0)) > 50
    assert len(glb.faces) == body and len(obj.faces) == body
    assert vertex_colors(obj) is None
    assert any("mesh.obj: vertex colours dropped" in n for n in result.notes)
    assert any("kept 1 of 2" in n for n in result.notes)
    assert floater > 0


def test_simplify_to_n_faces_keeps_colours(tmp_path: Path) -> None:
    messy_mesh(tmp_path / "mesh.ply")
    result = convert(tmp_path / "mesh.ply", tmp_path / "out", MeshOptions(simplify=300, obj=False))
    assert [p.name for p in result.outputs] == ["mesh.clean.ply", "mesh.glb"]
    for path in result.outputs:
        mesh = reload(path)
        assert 250 <= len(mesh.faces) <= 300
        colors = vertex_colors(mesh)
        assert colors is not None and len(colors) == len(mesh.vertices)


def test_no_colours_no_note(tmp_path: Path) -> None:
    messy_mesh(tmp_path / "grey.ply", colors=False)
    result = convert(tmp_path / "grey.ply", None, MeshOptions(glb=False))
    assert [p.name for p in result.outputs] == ["grey.clean.ply", "grey.obj"]
    assert not any("colours dropped" in n for n in result.notes)


def test_bad_fraction_and_missing_file_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="fraction"):
        convert(tmp_path / "x.ply", None, MeshOptions(keep_components=1.5))
    with pytest.raises(ConfigError, match="no mesh at"):
        convert(tmp_path / "x.ply", None, MeshOptions())


def test_cli(tmp_path: Path) -> None:
    messy_mesh(tmp_path / "mesh.ply")
    out = subprocess.run([sys.executable, "-m", "cuforge", "mesh-convert", "--in",
                          str(tmp_path / "mesh.ply"), "--simplify", "200", "--no-glb"],
                         capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert "vertex colours dropped" in out.stdout
    assert (tmp_path / "mesh.obj").is_file() and not (tmp_path / "mesh.glb").exists()
