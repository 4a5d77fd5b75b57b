"""verify_wheel + context_from on wheels assembled here, with the torch interpreter: one
good wheel (C extension + sm_90 kernel library) and one bad one (old-ABI library, segfault
at import); then the table, the JSON and the failures they name."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "verify"))
import verify_builders as vb  # noqa: E402

from cuforge.config.arches import parse_arch_list  # noqa: E402
from cuforge.env.torchinfo import probe_interpreter  # noqa: E402
from cuforge.verify import context_from, render_table, reports_to_json, verify_wheel  # noqa: E402

pytestmark = [
    pytest.mark.skipif(vb.torch_python() is None, reason=vb.NO_TORCH),
    pytest.mark.skipif(not vb.have("nvcc"), reason="needs nvcc"),
]


@pytest.fixture(scope="module")
def ctx():
    return context_from(probe_interpreter(vb.torch_python()), parse_arch_list("9.0"))


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    build = tmp_path_factory.mktemp("build")
    house = tmp_path_factory.mktemp("wheelhouse")
    ext = vb.c_extension(build, vb.torch_python(), package="goodpkg")
    kernel = vb.nvcc_shared(["kernel.cu"], build / "libkernel.so", "-gencode", "arch=compute_90,code=sm_90")
    vb.make_wheel(house, "goodpkg", {"goodpkg/__init__.py": "from ._hello import answer\n",
                                     f"goodpkg/{ext.name}": ext, "goodpkg/libkernel.so": kernel},
                  tag="cp311-cp311-linux_x86_64")
    old_abi = vb.gxx_shared(["abi_lib.cpp"], build / "libabi0.so", "-D_GLIBCXX_USE_CXX11_ABI=0")
    vb.make_wheel(house, "badpkg", {"badpkg/__init__.py": "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n",
                                    "badpkg/libabi0.so": old_abi}, top_level=["badpkg"])
    return house


def test_the_context_reads_torch(ctx):
    assert ctx.torch_version and ctx.cxx11_abi is True
    assert ctx.lib_dirs[0].name == "lib" and ctx.lib_dirs[0].parent.name == "torch"
    assert any("nvidia" in str(d) for d in ctx.lib_dirs[1:])


def test_good_wheel(ctx, wheelhouse):
    report = verify_wheel(wheelhouse / "goodpkg-0.1-cp311-cp311-linux_x86_64.whl", ctx,
                          smoke=vb.SMOKE / "passes.py", timeout=120)
    statuses = {r.check: r.status for r in report.results}
    assert statuses == {"abi": "pass", "symbols": "pass", "cudart": "pass", "fatbin": "pass",
                        "glibc": statuses["glibc"], "import": "pass", "smoke": statuses["smoke"]}
    # a build here needs the machine's glibc (2.34+), above torch's tag: a warning, not a fault
    assert statuses["glibc"] in ("pass", "warn"), report.result("glibc").detail
    assert report.result("import").detail == ("imported torch, then goodpkg, goodpkg._hello; also "
                                              "without torch imported first")
    assert "goodpkg/libkernel.so [pass]: SASS sm_90; PTX none" in report.result("fatbin").detail
    assert report.ok
    assert statuses["smoke"] in ("skipped", "pass")  # "skipped: no GPU" on GPU-less machines


def test_bad_wheel_and_outputs(ctx, wheelhouse):
    reports = [verify_wheel(w, ctx, timeout=120) for w in sorted(wheelhouse.glob("*.whl"))]
    bad = next(r for r in reports if r.package == "badpkg")
    assert not bad.ok
    assert bad.result("abi").summary.startswith("badpkg/libabi0.so: built with _GLIBCXX_USE_CXX11_ABI=0")
    assert bad.result("import").summary == "crashed with SIGSEGV while importing badpkg"
    assert bad.result("smoke").detail == "skipped: no smoke script in the recipe"
    doc = json.loads(reports_to_json(reports))
    assert doc["ok"] is False and {w["package"] for w in doc["wheels"]} == {"badpkg", "goodpkg"}
    text = _render(render_table(reports))
    assert "badpkg" in text and "FAILED" in text and "crashed with SIGSEGV" in text
    failed = [f"{r.package}: {c.check}: {c.summary}" for r in reports for c in r.failures()]
    assert "badpkg: import: crashed with SIGSEGV while importing badpkg" in failed
    assert not any(f.startswith("goodpkg") for f in failed)


def _render(table) -> str:
    console = Console(width=200, record=True, file=open("/dev/null", "w"))
    console.print(table)
    return console.export_text()
