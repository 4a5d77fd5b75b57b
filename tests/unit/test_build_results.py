"""`cuforge build` ends with one table: package, result, time, arches, the C library it needs,
wheel, why it failed."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from cuforge.pipeline.results import results_table
from cuforge.publish.wheelhouse import Entry



def test_every_package_has_a_row_with_its_result_and_why(tmp_path):
    results = {
        "cumm": Entry("cumm", "compiled", wheel="cumm_cu130-0.8.2-cp311-cp311-linux_x86_64.whl",
                      build_seconds=359.4, arches_embedded={"sass": ["120"], "ptx": ["120"]},
                      floor={"text": "glibc >= 2.34, GLIBCXX_3.4.30"}),
        "ccimport": Entry("ccimport", "prebuilt", wheel="ccimport-0.4.4-py3-none-any.whl"),
        "spconv": Entry("spconv", "FAILED", reason="fetch https://x/spconv.git failed: 404\nmore",
                        build_seconds=2.0),
    }
    text = Console(file=io.StringIO(), width=300, record=True, color_system=None)
    text.print(results_table("cuforge build 3.11-cu130", ["ccimport", "cumm", "spconv",
                                                          "pointops"], results,
                             {"ccimport"}, tmp_path / "wh"))
    lines = [" ".join(line.split()) for line in text.export_text().splitlines()]
    assert "package result time arches needs wheel why it failed" in lines
    assert f"ccimport up to date - sass -; ptx - - {tmp_path}/wh/ccimport-0.4.4-py3-none-any.whl" \
        in lines, lines
    assert (f"cumm compiled 5 min 59 s sass 120; ptx 120 glibc >= 2.34, GLIBCXX_3.4.30 {tmp_path}/wh/"
            "cumm_cu130-0.8.2-cp311-cp311-linux_x86_64.whl") in lines, lines
    assert "spconv FAILED 2.0 s - - - fetch https://x/spconv.git failed: 404" in lines, lines
    assert "pointops not started - - - - the build stopped at a failure first" in lines, lines
