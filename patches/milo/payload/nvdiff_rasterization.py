def _cuforge_tri_chunk_size():
    """Triangles per nvdiffrast call, from MILO_RAST_TRI_CHUNK (added by cuforge).

    Unset, empty or 0 turns chunking off: nvdiff_rasterization then makes upstream's single call.
    """
    import os

    raw = os.environ.get("MILO_RAST_TRI_CHUNK", "").strip()
    if not raw:
        return 0
    try:
        chunk = int(raw)
    except ValueError:
        chunk = -1
    if chunk < 0:
        raise ValueError(f"MILO_RAST_TRI_CHUNK must be a number of triangles (0 = off), got {raw!r}")
    return chunk


def _cuforge_merge_nearest(rast_a, rast_b):
    """Per pixel, keep the nearer of two nvdiffrast outputs (added by cuforge).

    Each input is [..., 4] = (u, v, z/w, triangle id + 1), id 0 meaning "no triangle"; a smaller
    z/w (NDC depth) is nearer. On an exact depth tie the first argument wins. torch.where keeps
    the gradient path of whichever value is kept.
    """
    hit_a = rast_a[..., 3] > 0
    hit_b = rast_b[..., 3] > 0
    take_b = hit_b & (~hit_a | (rast_b[..., 2] < rast_a[..., 2]))
    return torch.where(take_b[..., None], rast_b, rast_a)


def _cuforge_rasterize_chunked(glctx, pos, faces, resolution, chunk):
    """Rasterize `chunk` triangles per call and merge the nearest hits (added by cuforge).

    Uses nvdiffrast's range mode: 2-D pos [V, 4] and an int32 CPU tensor ranges [[start, count]].
    With 3-D (instanced) pos nvdiffrast ignores ranges and would draw every triangle in every
    chunk, saving nothing. In range mode the triangle ids it returns are already global, so no
    chunk offset is added.
    """
    pos_2d = pos[0].contiguous()
    merged = None
    for start in range(0, faces.shape[0], chunk):
        count = min(chunk, faces.shape[0] - start)
        ranges = torch.tensor([[start, count]], dtype=torch.int32, device="cpu")
        rast, _ = dr.rasterize(glctx, pos_2d, faces, resolution=resolution, ranges=ranges)
        merged = rast if merged is None else _cuforge_merge_nearest(merged, rast)
        del rast
    return merged


def nvdiff_rasterization(
    camera,
    image_height: int,
    image_width: int,
    verts: torch.Tensor,
    faces: torch.Tensor,
    return_indices_only: bool = False,
    glctx=None,
    return_rast_out: bool = False,
    return_positions: bool = False,
):
    """Rasterize a mesh with nvdiffrast; cuforge: optional chunking by MILO_RAST_TRI_CHUNK.

    MILO_RAST_TRI_CHUNK unset or 0: upstream's single call. N > 0 with more than N faces: N
    triangles per call, merged per pixel by depth, which lowers peak device memory. The return
    values are upstream's for every flag: pix_to_face alone, or (bary_coords, zbuf, pix_to_face)
    plus rast_out and/or pos [1, V, 4].
    """
    # clip-space positions, [1, V, 4] as upstream builds them: callers pass pos on to dr.antialias
    homogeneous = torch.cat([verts, verts.new_ones(verts.shape[0], 1)], dim=1)
    pos = (homogeneous @ camera.full_proj_transform)[None]

    resolution = [image_height, image_width]
    chunk = _cuforge_tri_chunk_size()
    if 0 < chunk < faces.shape[0]:
        rast_out = _cuforge_rasterize_chunked(glctx, pos, faces, resolution, chunk)
    else:
        rast_out, _ = dr.rasterize(glctx, pos=pos, tri=faces, resolution=resolution)
    # channel 3 holds triangle id + 1 (0 = no triangle); MILo wants -1 for background
    pix_to_face = rast_out[..., 3].int() - 1
    if return_indices_only:
        return pix_to_face
    extras = (rast_out,) * bool(return_rast_out) + (pos,) * bool(return_positions)
    return (rast_out[..., :2], rast_out[..., 2], pix_to_face) + extras
