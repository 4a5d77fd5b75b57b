"""A wheel's floor (the C library it needs) read from real ELF files compiled here with gcc, the
manylinux tag it earns at publish, and the ``glibc`` check that holds it to a ceiling; a team
wheel whose floor is above this machine's glibc is refused before anything installs (issue 63).

Each shared object is a few lines of C or C++ (no torch, no CUDA headers): ``pthread_join``
binds to ``GLIBC_2.34`` where glibc is 2.34 or newer (libpthread was merged into libc then),
``memcpy`` to ``GLIBC_2.14`` on x86_64, an ``std::ostringstream`` to a ``GLIBCXX_3.4.2x``.
"""

from __future__ import annotations

import platform
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "verify"))
import verify_builders as vb  # noqa: E402

from cuforge.publish import rewrite, teamwheels, wheelmeta  # noqa: E402
from cuforge.verify.checklist import CheckStatus  # noqa: E402
from cuforge.verify.floor import (Ceiling, floor_of_tree, floor_of_wheel, machine_glibc,  # noqa: E402
                                  policies, torch_ceiling)
from cuforge.verify.glibc import check_glibc  # noqa: E402

MACHINE = platform.machine()
HERE = machine_glibc()
TREE = Path(f"linux-{MACHINE}") / "cu130" / "torch2.14.1-cp311"
TAG = f"cp311-cp311-linux_{MACHINE}"
THREADS_C = """#include <pthread.h>
#include <string.h>
static void *run(void *p) { return p; }
int tiny_copy(char *d, const char *s, unsigned long n) {
    pthread_t t; pthread_create(&t, 0, run, 0); pthread_join(t, 0); memcpy(d, s, n); return 0; }
"""
STREAM_CPP = """#include <sstream>
#include <string>
extern "C" int tiny_len(const char *s) { std::ostringstream o; o << s; return (int)o.str().size(); }
"""
needs_234 = pytest.mark.skipif(HERE is None or HERE < (2, 34),
                               reason="pthread_join binds to GLIBC_2.34 only on glibc >= 2.34")


def _compile(out: Path, source: str, *flags: str, cxx: bool = False) -> Path:
    src = out.with_suffix(".cpp" if cxx else ".c")
    src.write_text(source)
    subprocess.run(["g++" if cxx else "gcc", "-shared", "-fPIC", "-O1", str(src), "-o", str(out),
                    *flags], check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """The module's shared objects, compiled once (well under a second in all)."""
    d = tmp_path_factory.mktemp("elf")
    libs = {"threads": _compile(d / "libthreads.so", THREADS_C),
            "stream": _compile(d / "libstream.so", STREAM_CPP, cxx=True),
            "c10": _compile(d / "libc10.so", "int c10_add(int a, int b) { return a + b; }\n"),
            "odd": _compile(d / "libodd.so", "int odd_add(int a, int b) { return a + b; }\n")}
    libs["uses_c10"] = _compile(d / "uses_c10.so", "int c10_add(int, int);\n"
                                "int f(int a) { return c10_add(a, 1); }\n", f"-L{d}", "-lc10")
    libs["uses_odd"] = _compile(d / "uses_odd.so", "int odd_add(int, int);\n"
                                "int g(int a) { return odd_add(a, 1); }\n", f"-L{d}", "-lodd")
    return libs


def _ext_wheel(dest: Path, files: dict[str, Path], version: str = "0.1.0") -> Path:
    return vb.make_wheel(dest, "tinyext", {f"tinyext/{k}": v for k, v in files.items()},
                         version=version, tag=TAG, description="tinyext, built by the test")


def _tree(tmp_path: Path, *libs: Path) -> Path:
    root = tmp_path / "tree"
    root.mkdir(parents=True, exist_ok=True)
    for lib in libs:
        (root / lib.name).write_bytes(lib.read_bytes())
    return root


@needs_234
def test_the_floor_names_each_symbol_version_with_its_library_and_symbols(built, tmp_path):
    floor = floor_of_tree(_tree(tmp_path, built["threads"]))
    assert floor.glibc == (2, 34) and floor.glibcxx is None
    assert floor.text() == "glibc >= 2.34"
    need = next(n for n in floor.needs if n.version == "GLIBC_2.34")
    assert need.library == "libc.so.6" and {"pthread_create", "pthread_join"} <= set(need.symbols)
    assert need.files == ("libthreads.so",)
    if MACHINE == "x86_64":   # memcpy's own version there
        assert any(n.version == "GLIBC_2.14" and "memcpy" in n.symbols for n in floor.needs)
    assert floor.tag() == f"manylinux_2_34_{MACHINE}" and floor.why == ""


def test_libstdcxx_versions_choose_the_level_too(built, tmp_path):
    """A C++ file's GLIBCXX_ need picks the lowest level whose libstdc++ defines it."""
    floor = floor_of_tree(_tree(tmp_path, built["stream"]))
    assert floor.glibcxx is not None and floor.glibcxx >= (3, 4, 21)
    assert "libstdc++.so.6" in floor.libraries
    assert floor.text().endswith(f"GLIBCXX_{'.'.join(map(str, floor.glibcxx))}")
    levels = policies(MACHINE)
    chosen = floor.policy
    assert chosen.limit("GLIBCXX") >= floor.glibcxx
    lower = [p for p in levels if p.glibc < chosen.glibc]
    assert all(p.limit("GLIBCXX") < floor.glibcxx or (floor.glibc or ()) > p.glibc
               for p in lower), "a lower level would hold"


def test_torchs_libraries_are_left_out_and_noted_and_a_foreign_one_keeps_linux(built, tmp_path):
    """libc10.so comes with torch's wheel: left out of the floor, noted. libodd.so comes from
    nowhere a manylinux wheel may link: the tag stays linux_*, saying why. A library the wheel
    carries itself is its own."""
    with_torch = floor_of_tree(_tree(tmp_path / "a", built["uses_c10"]))
    assert with_torch.left_out == ("libc10.so",) and "libc10.so" not in with_torch.libraries
    assert with_torch.policy is not None
    foreign = floor_of_tree(_tree(tmp_path / "b", built["uses_odd"]))
    assert foreign.policy is None and foreign.tag() == f"linux_{MACHINE}"
    assert "libodd.so" in foreign.why
    carried = floor_of_tree(_tree(tmp_path / "c", built["uses_odd"], built["odd"]))
    assert carried.policy is not None and carried.foreign == ()


@needs_234
def test_publishing_retags_the_wheel_and_keeps_record_pins_and_bytes(built, tmp_path):
    upstream = _ext_wheel(tmp_path / "up", {"_ext.so": built["threads"]})
    house = tmp_path / "wh" / TREE
    house.mkdir(parents=True)
    out, pins, floor = rewrite.for_wheelhouse(upstream, house, house, accel="cu130",
                                              torch="2.14.1")
    assert out.name == f"tinyext-0.1.0+cu130-cp311-cp311-manylinux_2_34_{MACHINE}.whl"
    assert floor.tag() == f"manylinux_2_34_{MACHINE}"
    with zipfile.ZipFile(out) as zf:
        wheel_file = zf.read("tinyext-0.1.0+cu130.dist-info/WHEEL").decode()
    assert [ln for ln in wheel_file.splitlines() if ln.startswith("Tag:")] == \
        [f"Tag: cp311-cp311-manylinux_2_34_{MACHINE}"]
    assert wheelmeta.record_problems(out) == []          # every hash matches the new bytes
    assert pins is not None and pins.status is CheckStatus.PASS, pins.detail
    again, _, _ = rewrite.for_wheelhouse(upstream, house, tmp_path / "again", accel="cu130",
                                         torch="2.14.1")
    assert again.read_bytes() == out.read_bytes()        # the same inputs, the same bytes


def test_a_level_with_an_alias_writes_both_tags(built, tmp_path):
    """A wheel that needs nothing newer than 2.17 gets manylinux_2_17 and manylinux2014."""
    lib = _compile(tmp_path / "libplain.so", "int plain(int a) { return a + 1; }\n")
    upstream = _ext_wheel(tmp_path / "up", {"_plain.so": lib})
    out = rewrite.pin(upstream, tmp_path / "out", accel="cu130", torch="2.14.1", house={})
    assert out.name.endswith(f"-manylinux_2_17_{MACHINE}.manylinux2014_{MACHINE}.whl")
    with zipfile.ZipFile(out) as zf:
        tags = [ln for ln in zf.read("tinyext-0.1.0+cu130.dist-info/WHEEL").decode().splitlines()
                if ln.startswith("Tag:")]
    assert tags == [f"Tag: cp311-cp311-manylinux_2_17_{MACHINE}",
                    f"Tag: cp311-cp311-manylinux2014_{MACHINE}"]
    assert wheelmeta.record_problems(out) == []


@needs_234
def test_the_ceiling_check_fails_a_234_wheel_against_a_231_floor_naming_symbols(built, tmp_path):
    floor = floor_of_tree(_tree(tmp_path, built["threads"]))
    declared = check_glibc(floor, Ceiling((2, 31), "combo ci's glibc_floor", declared=True))
    assert declared.status is CheckStatus.FAIL
    assert "GLIBC_2.34 from libc.so.6: pthread_create, pthread_join" in declared.detail
    assert "glibc 2.31 (combo ci's glibc_floor)" in declared.detail
    assert "GLIBC_2.14" not in declared.detail          # what 2.31 holds is not named
    torchs = check_glibc(floor, Ceiling((2, 28), "torch 2.14.1's tag manylinux_2_28_x86_64"))
    assert torchs.status is CheckStatus.WARN and "pthread_join" in torchs.detail
    fits = check_glibc(floor, Ceiling((2, 36), "combo's glibc_floor", declared=True))
    assert fits.status is CheckStatus.PASS and fits.detail.startswith("glibc >= 2.34 (manylinux_2_34")
    lying = check_glibc(floor, None, [f"manylinux_2_28_{MACHINE}"])
    assert lying.status is CheckStatus.FAIL and "tagged for glibc 2.28" in lying.detail


def test_the_default_ceiling_is_torchs_own_tag(tmp_path):
    info = tmp_path / "site" / "torch-2.14.1.dist-info"
    info.mkdir(parents=True)
    (info / "WHEEL").write_text("Wheel-Version: 1.0\nRoot-Is-Purelib: false\n"
                                "Tag: cp311-cp311-manylinux_2_28_x86_64\n")
    ceiling = torch_ceiling(tmp_path / "site")
    assert ceiling == Ceiling((2, 28), "torch 2.14.1's tag manylinux_2_28_x86_64")
    assert not ceiling.declared


def test_a_team_wheel_above_this_machines_glibc_is_refused_naming_both(built, tmp_path):
    """The wheel's .so is a real one whose GLIBC_ need is edited to a glibc no machine has
    yet (what a wheel built on a newer distribution needs): refused in one line."""
    if HERE is None:
        pytest.skip("this machine's C library is not glibc")
    data = built["threads"].read_bytes()
    need = b"GLIBC_2.34" if b"GLIBC_2.34" in data else b"GLIBC_2.2.5"
    future = b"GLIBC_2.99" if need == b"GLIBC_2.34" else b"GLIBC_2.999"   # the same length
    edited = tmp_path / "libthreads.so"
    edited.write_bytes(data.replace(need, future))
    team = _ext_wheel(tmp_path / "team", {"_ext.so": edited})
    why = teamwheels.beyond_this_machine(team)
    here = ".".join(map(str, HERE))
    assert why.startswith(f"team wheel {team.name} needs glibc 2.99") and "\n" not in why
    assert why.endswith(f"but this machine has glibc {here}"), why
    fits = _ext_wheel(tmp_path / "fits", {"_ext.so": built["threads"]})
    assert teamwheels.beyond_this_machine(fits) == ""
    assert floor_of_wheel(fits).glibc == floor_of_tree(_tree(tmp_path, built["threads"])).glibc
