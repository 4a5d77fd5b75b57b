"""Check 4: wheels assembled here are imported in a fresh interpreter; a segfault in module
code is reported as a crash (not a traceback), an ImportError by its last line, a hang as a
timeout."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "verify"))
import verify_builders as vb  # noqa: E402

from cuforge.verify.importer import check_import  # noqa: E402
from cuforge.verify.wheel import default_modules, import_roots, unpack  # noqa: E402

SEGFAULT = "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n"
BROKEN = ("raise ImportError('/x/_C.so: undefined symbol: "
          "_ZN3c106detail14torchCheckFailEPKcS2_jRKSs')\n")


def unpacked(tmp_path: Path, name: str, files: dict) -> Path:
    wheel = vb.make_wheel(tmp_path, name, files)
    return unpack(wheel, tmp_path / "unpacked")


@pytest.mark.skipif(not vb.have("gcc"), reason="needs gcc")
def test_wheel_with_c_extension_imports(tmp_path):
    build = tmp_path / "build"
    ext = vb.c_extension(build, vb.this_python(), package="goodpkg")
    root = unpacked(tmp_path, "goodpkg", {"goodpkg/__init__.py": "from ._hello import answer\n",
                                          f"goodpkg/{ext.name}": ext})
    modules = default_modules(root)
    assert modules == ["goodpkg", "goodpkg._hello"]  # top level from RECORD, then extensions
    result = check_import(vb.this_python(), import_roots(root), modules, import_torch=False)
    assert (result.status, result.detail) == ("pass", "imported goodpkg, goodpkg._hello")


def test_segfault_at_import_is_a_crash(tmp_path):
    root = unpacked(tmp_path, "crashy", {"crashy/__init__.py": SEGFAULT})
    result = check_import(vb.this_python(), [root], ["crashy"], import_torch=False)
    assert result.status == "fail"
    assert result.summary == "crashed with SIGSEGV while importing crashy"
    assert "Traceback" not in result.summary


def test_import_error_reports_its_last_line(tmp_path):
    root = unpacked(tmp_path, "broken", {"broken/__init__.py": BROKEN})
    result = check_import(vb.this_python(), [root], ["broken"], import_torch=False)
    assert result.status == "fail"
    assert result.summary == ("import broken failed: ImportError: /x/_C.so: undefined symbol: "
                              "_ZN3c106detail14torchCheckFailEPKcS2_jRKSs")


def test_hanging_import_times_out(tmp_path):
    root = unpacked(tmp_path, "sleepy", {"sleepy.py": "import time\ntime.sleep(120)\n"})
    result = check_import(vb.this_python(), [root], ["sleepy"], import_torch=False, timeout=2)
    assert (result.status, result.summary) == ("fail", "timed out after 2 s while importing sleepy")


def test_wheel_module_shadows_nothing_from_cwd(tmp_path, monkeypatch):
    # the subprocess runs in a scratch dir: a same-named module in the caller's cwd is not seen
    (tmp_path / "cwdonly.py").write_text("")
    monkeypatch.chdir(tmp_path)
    result = check_import(vb.this_python(), [], ["cwdonly"], import_torch=False)
    assert result.status == "fail" and "ModuleNotFoundError" in result.summary


@pytest.mark.skipif(vb.torch_python() is None, reason=vb.NO_TORCH)
def test_imports_torch_first(tmp_path):
    root = unpacked(tmp_path, "needs_torch", {
        "needs_torch/__init__.py": "import sys\nassert 'torch' in sys.modules, 'torch not imported first'\n"})
    result = check_import(vb.torch_python(), [root], ["needs_torch"], timeout=120)
    assert result.status == "pass"
    assert result.detail.startswith("imported torch, then needs_torch; without torch imported "
                                    "first, needs_torch fails: AssertionError")


@pytest.mark.skipif(vb.torch_python() is None, reason=vb.NO_TORCH)
def test_segfault_after_torch_is_a_crash(tmp_path):
    root = unpacked(tmp_path, "crashy", {"crashy/__init__.py": SEGFAULT})
    result = check_import(vb.torch_python(), [root], ["crashy"], timeout=120)
    assert result.summary == "crashed with SIGSEGV while importing crashy"


# A native module whose PyInit dies the way spconv's core_cc did on the H200: inside C code,
# before Python sees anything. `how` is the body of PyInit.
CRASHING_EXT = """\
#include <Python.h>
#include <signal.h>
#include <stdlib.h>
PyMODINIT_FUNC PyInit__core(void) { %s; return NULL; }
"""


def native_module(tmp_path: Path, package: str, body: str, *extra: str) -> Path:
    """``package/_core<EXT_SUFFIX>`` built from ``body`` with gcc, in an unpacked wheel."""
    import sysconfig
    src = tmp_path / "core.c"
    src.write_text(body)
    so = tmp_path / f"_core{sysconfig.get_config_var('EXT_SUFFIX')}"
    vb.run(["gcc", "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}", str(src),
            "-o", str(so), *extra])
    return unpacked(tmp_path, package, {f"{package}/__init__.py": "",
                                        f"{package}/{so.name}": so})


@pytest.mark.skipif(not vb.have("gcc"), reason="needs gcc")
@pytest.mark.parametrize(("body", "signal"), [("raise(SIGSEGV)", "SIGSEGV"),
                                              ("abort()", "SIGABRT")])
def test_native_crash_in_pyinit_is_reported_as_its_signal(tmp_path, body, signal):
    root = native_module(tmp_path, "natcrash", CRASHING_EXT % body)
    result = check_import(vb.this_python(), [root], ["natcrash", "natcrash._core"],
                          import_torch=False)
    assert result.status == "fail"
    assert result.summary == f"crashed with {signal} while importing natcrash._core"
    assert "Fatal Python error" in result.detail   # faulthandler's stack follows the summary


NEEDS_LIB = """\
#include <Python.h>
int helper_value(void);
static struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "_core", NULL, -1, NULL};
PyMODINIT_FUNC PyInit__core(void) { helper_value(); return PyModule_Create(&m); }
"""


@pytest.mark.skipif(not vb.have("gcc"), reason="needs gcc")
@pytest.mark.skipif(vb.torch_python() is None, reason=vb.NO_TORCH)
def test_library_found_only_through_the_environment_is_a_warning(tmp_path, monkeypatch):
    """cumm's core_cc found libnvrtc.so.13 only because torch (or LD_LIBRARY_PATH) had loaded
    it: the verdict must say so instead of passing silently."""
    libdir = tmp_path / "libs"
    libdir.mkdir()
    (libdir / "helper.c").write_text("int helper_value(void) { return 7; }\n")
    vb.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcfhelper.so.1", str(libdir / "helper.c"),
            "-o", str(libdir / "libcfhelper.so.1")])
    root = native_module(tmp_path, "needslib", NEEDS_LIB, f"-L{libdir}", "-l:libcfhelper.so.1")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(libdir))
    result = check_import(vb.torch_python(), [root], ["needslib._core"], timeout=120)
    assert result.status == "warn"
    assert result.summary.startswith("imported torch, then needslib._core; resolves only after "
                                     "`import torch`")
    assert "libcfhelper.so.1 does not resolve" in result.summary


@pytest.mark.skipif(not vb.have("gcc"), reason="needs gcc")
def test_an_extension_named_by_path_loads_without_its_package(tmp_path):
    """Swin3D's top level imports MinkowskiEngine: its recipe names the extension files as
    paths, which load on their own, while the dotted name runs the package's __init__."""
    ext = vb.c_extension(tmp_path / "build", vb.this_python(), package="needsmore")
    root = unpacked(tmp_path, "needsmore", {
        "needsmore/__init__.py": "import MinkowskiEngine\n",
        f"needsmore/ops/{ext.name}": ext})
    alone = check_import(vb.this_python(), import_roots(root), ["needsmore/ops/_hello"],
                         import_torch=False)
    assert (alone.status, alone.detail) == ("pass", "imported needsmore/ops/_hello")
    dotted = check_import(vb.this_python(), import_roots(root), ["needsmore.ops._hello"],
                          import_torch=False)
    assert dotted.status == "fail" and "MinkowskiEngine" in dotted.summary
    missing = check_import(vb.this_python(), import_roots(root), ["needsmore/ops/_absent"],
                           import_torch=False)
    assert missing.status == "fail" and "no extension file needsmore/ops/_absent" in missing.summary


def _default(sig: str) -> str:
    """The line that gives ``sig`` its default action in the check: started with ``&`` from a
    script (as CI may be), a process inherits SIGINT ignored, and the kill would do nothing."""
    return "" if sig == "SIGKILL" else f"signal.signal(signal.{sig}, signal.SIG_DFL)\n"


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT", "SIGKILL"])
def test_an_import_killed_from_outside_is_no_verdict(tmp_path, sig):
    """A check interpreter ended by a signal someone sent (a kill, cuforge's own interrupt) did
    not crash: there is no verdict, and the check unwinds as an interrupt (issue 43)."""
    from cuforge.core.runner import Interrupted
    root = unpacked(tmp_path, "killedpkg", {"killedpkg/__init__.py":
                                            f"import os, signal\n{_default(sig)}"
                                            f"os.kill(os.getpid(), signal.{sig})\n"})
    with pytest.raises(Interrupted, match=sig):
        check_import(vb.this_python(), import_roots(root), ["killedpkg"], import_torch=False)
