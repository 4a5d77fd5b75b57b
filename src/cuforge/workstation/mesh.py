"""``invoke mesh-convert``: MILo's extracted PLY mesh -> a cleaned PLY, an OBJ and a GLB.

Cleaning: merge duplicate vertices, drop duplicate and degenerate faces and unreferenced
vertices; optionally drop connected components whose bounding-box diagonal is below a fraction
of the whole mesh's (floaters), and quadric-simplify to N faces. Vertex colours survive in PLY
and GLB; OBJ has no vertex colours, so the OBJ is written without them and the result says so.

Libraries (the ``mesh`` extra): trimesh for I/O, cleaning and components; fast-simplification
(the quadric decimator trimesh itself calls) for simplification; scipy's k-d tree to carry the
colours over to the simplified vertices. See docs/workstation.md for why these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cuforge.core.errors import ConfigError, ToolchainError


@dataclass(frozen=True)
class MeshOptions:
    simplify: int = 0                 # target face count; 0 keeps every face
    keep_components: float = 0.0      # drop components smaller than this x bbox diagonal
    obj: bool = True
    glb: bool = True


@dataclass
class MeshResult:
    outputs: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)     # what was done or dropped, for people
    faces_in: int = 0
    faces_out: int = 0
    has_colors: bool = False


def _trimesh():
    try:
        import trimesh
    except ImportError:
        raise ToolchainError("mesh conversion needs trimesh and fast-simplification",
                             hint="pip install 'cuforge[mesh]'") from None
    return trimesh


def load(path: Path):
    """One triangle mesh from ``path`` (PLY, OBJ, GLB, ...), without trimesh's automatic
    processing so that the cleaning below is what happens, and is reported."""
    trimesh = _trimesh()
    if not path.is_file():
        raise ConfigError(f"no mesh at {path}", hint="pass --in PATH to an existing .ply file")
    try:
        mesh = trimesh.load(str(path), force="mesh", process=False)
    except Exception as err:   # trimesh raises many kinds for unreadable files
        raise ConfigError(f"cannot read {path} as a mesh: {err}") from None
    if len(mesh.faces) == 0:
        raise ConfigError(f"{path} has no faces (a point cloud?)",
                          hint="mesh-convert needs a triangle mesh, e.g. MILo's mesh output")
    return mesh


def vertex_colors(mesh):
    """The mesh's per-vertex RGBA colours, or None when it has none."""
    visual = mesh.visual
    return visual.vertex_colors if getattr(visual, "kind", None) == "vertex" else None


def clean(mesh, notes: list[str]):
    """Merge duplicate vertices, drop duplicate / degenerate faces and loose vertices."""
    v0, f0 = len(mesh.vertices), len(mesh.faces)
    mesh.merge_vertices()
    mesh.update_faces(mesh.unique_faces())
    mesh.update_faces(mesh.nondegenerate_faces())
    mesh.remove_unreferenced_vertices()
    notes.append(f"cleaned: {v0 - len(mesh.vertices)} duplicate/loose vertices and "
                 f"{f0 - len(mesh.faces)} duplicate/degenerate faces removed")
    return mesh


def keep_large_components(mesh, fraction: float, notes: list[str]):
    """Drop connected components whose bbox diagonal is below ``fraction`` of the mesh's."""
    trimesh = _trimesh()
    whole = float((mesh.bounds[1] - mesh.bounds[0]) @ (mesh.bounds[1] - mesh.bounds[0])) ** 0.5
    parts = mesh.split(only_watertight=False)
    kept = [p for p in parts
            if float(((p.bounds[1] - p.bounds[0]) ** 2).sum()) ** 0.5 >= fraction * whole]
    if not kept:
        raise ConfigError(f"--keep-components {fraction} drops every component",
                          hint="use a smaller fraction (e.g. 0.05)")
    notes.append(f"components: kept {len(kept)} of {len(parts)} (bbox diagonal >= "
                 f"{fraction:g} x {whole:.3g})")
    return trimesh.util.concatenate(kept) if len(kept) > 1 else kept[0]


def simplify(mesh, faces: int, notes: list[str]):
    """Quadric decimation to about ``faces`` faces; colours re-sampled from the nearest
    original vertex (the decimator returns positions only)."""
    if faces >= len(mesh.faces):
        notes.append(f"simplify: {len(mesh.faces)} faces already <= {faces}; kept as is")
        return mesh
    colors = vertex_colors(mesh)
    before = len(mesh.faces)
    out = mesh.simplify_quadric_decimation(face_count=faces)
    if colors is not None:
        from scipy.spatial import cKDTree
        _, nearest = cKDTree(mesh.vertices).query(out.vertices)
        out.visual.vertex_colors = colors[nearest]
    notes.append(f"simplified: {before} -> {len(out.faces)} faces (quadric)")
    return out


def convert(src: Path, out_dir: Path | None, opts: MeshOptions) -> MeshResult:
    """Write ``<stem>.clean.ply`` and (unless disabled) ``<stem>.obj`` and ``<stem>.glb``."""
    if opts.simplify < 0:
        raise ConfigError("--simplify must be a positive face count")
    if not 0 <= opts.keep_components < 1:
        raise ConfigError("--keep-components is a fraction of the bbox diagonal in [0, 1)",
                          hint="e.g. --keep-components 0.05 drops floaters smaller than 5 %")
    result = MeshResult()
    mesh = load(src)
    result.faces_in = len(mesh.faces)
    mesh = clean(mesh, result.notes)
    if opts.keep_components:
        mesh = keep_large_components(mesh, opts.keep_components, result.notes)
    if opts.simplify:
        mesh = simplify(mesh, opts.simplify, result.notes)
    result.faces_out = len(mesh.faces)
    result.has_colors = vertex_colors(mesh) is not None
    dest = out_dir or src.parent
    dest.mkdir(parents=True, exist_ok=True)
    stem = src.stem.removesuffix(".clean")
    ply = dest / f"{stem}.clean.ply"
    _write(ply, mesh.export(file_type="ply", encoding="binary"))
    result.outputs.append(ply)
    if opts.obj:
        obj = dest / f"{stem}.obj"
        # OBJ has no vertex colours (the `v x y z r g b` form is an unofficial extension many
        # readers reject): written without them, and said so
        _write(obj, mesh.export(file_type="obj", include_color=False, include_normals=False))
        result.outputs.append(obj)
        if result.has_colors:
            keep = f"{ply.name} and the GLB keep them" if opts.glb else f"{ply.name} keeps them"
            result.notes.append(f"{obj.name}: vertex colours dropped (OBJ has none; {keep})")
    if opts.glb:
        glb = dest / f"{stem}.glb"
        _write(glb, mesh.export(file_type="glb"))
        result.outputs.append(glb)
    return result


def _write(path: Path, data: bytes | str) -> None:
    """Write via a temporary name: a failed export leaves no half-written mesh."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    tmp.replace(path)
