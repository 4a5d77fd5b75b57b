"""smoke/stress_gaussian-rasterizer.py's oracle, on the CPU with torch: a renderer that blends
each pixel's Gaussians front to back (what the rasterizers' sorted tile lists give) passes the
same scene in another order; one that blends them in the order they came (a sort that did not
happen) fails it, and so do radii that did not follow their Gaussians. The scenes are the
script's own (``random_scene``): distinct depths, so the order is the depth order alone."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from conftest import torch_python

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(torch_python() is None, reason="needs CUFORGE_TEST_TORCH_PYTHON")

CHECKS = textwrap.dedent("""
    import runpy, torch
    lib = runpy.run_path("smoke/stress_gaussian-rasterizer.py", run_name="oracle")
    compare, compare_grads, random_scene = lib["compare"], lib["compare_grads"], lib["random_scene"]
    SPEC = (("color", (3, "H", "W")), ("radii", ("P",)))
    H = W = 24

    def splat(scene, sort=True):
        # isotropic footprints on a pinhole image; alpha blending front to back
        m = scene["means3D"]
        u = (m[:, 0] / m[:, 2] / lib["TAN_HALF"] + 1) * W / 2
        v = (m[:, 1] / m[:, 2] / lib["TAN_HALF"] + 1) * H / 2
        r = scene["scales"].mean(1) / m[:, 2] * W
        keys = m[:, 2] if sort else torch.arange(len(m), dtype=m.dtype)
        idx = torch.argsort(keys, stable=True)
        ys, xs = torch.meshgrid(torch.arange(H) + 0.5, torch.arange(W) + 0.5, indexing="ij")
        image, left = torch.zeros(3, H, W), torch.ones(H, W)
        for i in idx.tolist():
            g = torch.exp(-((xs - u[i]) ** 2 + (ys - v[i]) ** 2) / (2 * r[i] ** 2 + 1e-6))
            a = (scene["opacities"][i, 0] * g).clamp(max=0.99)
            image = image + scene["colors_precomp"][i][:, None, None] * (a * left)
            left = left * (1 - a)
        radii = (3 * r).ceil().int() * ((u >= 0) & (u <= W) & (v >= 0) & (v <= H))
        return {"color": image, "radii": radii}

    gen = torch.Generator().manual_seed(0)
    scene = random_scene(300, gen)
    depth = scene["means3D"][:, 2]
    assert depth.unique().numel() == 300 and bool(((depth >= 1) & (depth <= 20)).all())
    order = torch.randperm(300, generator=gen)
    moved = {k: v[order] for k, v in scene.items()}
    assert compare(splat(scene), splat(moved), order, SPEC) == []
    # blended in arrival order, not depth order: the image depends on the order
    problems = compare(splat(scene, sort=False), splat(moved, sort=False), order, SPEC)
    assert [p.split(":")[0] for p in problems] == ["color"], problems
    # radii that stayed where they were while their Gaussians moved
    stuck = dict(splat(moved), radii=splat(scene)["radii"])
    assert [p.split(":")[0] for p in compare(splat(scene), stuck, order, SPEC)] == ["radii"]
    # gradients: equal after the permutation, within 1e-3; a wrong one is seen
    g = {"colors_precomp": torch.rand(300, 3, generator=gen)}
    assert compare_grads(g, {"colors_precomp": g["colors_precomp"][order]}, order) == []
    bad = g["colors_precomp"][order].clone(); bad[5] += 1
    assert len(compare_grads(g, {"colors_precomp": bad}, order)) == 1
    print("ok")
    """)


def test_the_oracle_passes_a_sorted_blend_and_fails_an_unsorted_one():
    proc = subprocess.run([str(torch_python()), "-c", CHECKS], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
