"""The emulation table (envs/emulation.toml) read for real: the binfmt pattern against real
ELF headers, the emulated combo's wheelhouse path, the private apt that leaves the host's
package state alone, and the sysroot compiler wrappers."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cuforge.env import emulation, emulation_setup
from cuforge.config.combos import load_combos
from cuforge.core.project import find_project


def _aarch64() -> emulation.Emulator:
    return emulation.load(find_project())["linux-aarch64"]


def _matches(emu: emulation.Emulator, header: bytes) -> bool:
    return all((h & m) == (g & m) for h, g, m in
               zip(header, emu.binfmt_magic, emu.binfmt_mask, strict=False))


def test_binfmt_pattern_matches_aarch64_executables_and_objects_only(tmp_path):
    emu = _aarch64()
    assert len(emu.binfmt_magic) == len(emu.binfmt_mask) == 20
    native = Path(sys.executable).resolve().read_bytes()[:20]
    assert not _matches(emu, native)                       # this machine's python: not ours
    gcc = shutil.which("aarch64-linux-gnu-gcc")
    if gcc is None:
        pytest.skip("aarch64-linux-gnu-gcc not installed (apt-get install g++-aarch64-linux-gnu)")
    src = tmp_path / "main.c"
    src.write_text("int main(void) { return 0; }\n")
    subprocess.run([gcc, str(src), "-o", str(tmp_path / "main")], check=True)
    assert _matches(emu, (tmp_path / "main").read_bytes()[:20])


def test_emulated_combo_targets_aarch64_with_python_the_root_has():
    combo = {c.id: c for c in load_combos(find_project())}["spark-emulated"]
    emu = _aarch64()
    assert combo.emulate and combo.target_platform.name == "linux-aarch64"
    assert combo.python in emu.pythons                     # Debian bookworm's 3.11
    assert combo.host_cxx in emu.cross_compilers           # the sysroot wrapper's name
    assert combo.wheel_dir(Path("wh")) == Path("wh/linux-aarch64/cu130/torch2.14.1-cp311")
    assert str(combo.arches.sass[0]) == "12.1"
    assert emu.qemu.suite == "trixie" and emu.min_qemu.major >= 10   # 7.2 crashes in torch


def test_private_apt_options_never_name_the_hosts_state(tmp_path):
    emu = _aarch64()
    opts = emulation_setup.apt_options(emu, emu.root, tmp_path)
    values = [o.split("=", 1)[1] for o in opts if "=" in o]
    paths = [v for v in values if v.startswith("/") and not v.startswith(emulation_setup.KEYRING)]
    assert paths and all(Path(v).is_relative_to(tmp_path) for v in paths)
    assert "APT::Architecture=arm64" in opts
    assert f"{emu.root.suite} main" in (tmp_path / "sources.list").read_text()


def test_wrappers_put_the_target_root_in_front_as_sysroot(tmp_path):
    emu = _aarch64()
    emulation_setup.write_wrappers(emu, tmp_path)
    wrapper = emu.wrappers(tmp_path) / "aarch64-linux-gnu-g++"
    text = wrapper.read_text()
    assert f"--sysroot={emu.root_dir(tmp_path)}" in text and wrapper.stat().st_mode & 0o111
    if shutil.which("aarch64-linux-gnu-g++") is None:
        return
    # the sysroot is real: <aarch64-linux-gnu/python3.11/pyconfig.h>, which <Python.h>
    # includes, is found in the root's /usr/include, which the plain cross compiler lacks
    header = emu.root_dir(tmp_path) / "usr/include/aarch64-linux-gnu/probe/marker.h"
    header.parent.mkdir(parents=True)
    header.write_text("#define CUFORGE_MARKER 1\n")
    src = tmp_path / "x.c"
    src.write_text("#include <aarch64-linux-gnu/probe/marker.h>\nint f(void) { return "
                   "CUFORGE_MARKER; }\n")
    argv = ["-c", str(src), "-o", str(tmp_path / "x.o")]
    assert subprocess.run([str(wrapper), *argv], capture_output=True).returncode == 0
    plain = subprocess.run(["aarch64-linux-gnu-g++", *argv], capture_output=True, text=True)
    assert plain.returncode != 0 and "marker.h" in plain.stderr


def test_overlay_links_native_files_without_touching_linked_wheel_dirs(tmp_path):
    """The layout links whole wheel directories (nvvm/bin): replacing cicc in the toolkit root
    must not replace it in the wheel."""
    emu = _aarch64()
    wheel = tmp_path / "site" / "nvidia" / "cu13"
    native = tmp_path / "native" / "nvidia" / "cu13"
    for rel in emu.native_files:
        for base, text in ((wheel, "target"), (native, "native")):
            (base / rel).parent.mkdir(parents=True, exist_ok=True)
            (base / rel).write_text(text)
    root = tmp_path / "cuda"
    (root / "bin").mkdir(parents=True)
    (root / "nvvm").mkdir()
    (root / "nvvm" / "bin").symlink_to(wheel / "nvvm" / "bin")
    for rel in emu.native_files:
        if rel.startswith("bin/"):
            (root / rel).hardlink_to(wheel / rel)
    done = emulation.overlay_native_tools(emu, tmp_path / "native", root)
    assert sorted(done) == sorted(emu.native_files)
    assert all((root / rel).read_text() == "native" for rel in emu.native_files)
    assert all((wheel / rel).read_text() == "target" for rel in emu.native_files)
    assert emulation.overlay_native_tools(emu, tmp_path / "native", root) == []   # idempotent


def test_unprovisioned_state_is_reported_with_the_package_and_how_to_register(tmp_path):
    """A fresh state dir has no aarch64 root: whatever this machine's binfmt_misc holds, the
    check says what is missing and the fix names trixie's qemu-user and the registration."""
    emu = _aarch64()
    bad = [f for f in emulation_setup.check(tmp_path, emu) if not f.ok]
    assert bad
    fix = bad[0].fix
    assert "cuforge emulation setup" in fix and "trixie's qemu-user" in fix
    assert "binfmt_misc" in fix and "QEMU >= 10.0" in fix


def test_another_checkouts_registration_is_not_this_ones(tmp_path, monkeypatch):
    """binfmt_misc is one per machine: a registration whose QEMU lies in another clone's
    state dir runs aarch64 code today, but this checkout has no QEMU of its own (delete that
    clone and every build here breaks). status says "not yet", in doctor's words."""
    emu = _aarch64()
    other = tmp_path / "other-clone" / ".cuforge" / "emulation" / emu.platform / "qemu" / \
        emu.qemu_binary
    other.parent.mkdir(parents=True)
    other.write_text("#!/bin/sh\necho 'qemu-aarch64 version 10.0.13'\n")
    other.chmod(0o755)
    binfmt = tmp_path / "binfmt_misc"
    binfmt.mkdir()
    (binfmt / "cuforge-aarch64").write_text(
        f"enabled\ninterpreter {other}\nflags: F\noffset 0\nmagic {emu.binfmt_magic.hex()}\n"
        f"mask {emu.binfmt_mask.hex()}\n")
    monkeypatch.setattr(emulation_setup, "BINFMT", binfmt)
    first = emulation_setup.check(tmp_path / "this-clone" / ".cuforge", emu)[0]
    assert not first.ok and "another checkout's QEMU" in first.what, first
    assert "cuforge emulation setup" in first.fix
    # the clone that provisioned it: its own registration is fine
    mine = emulation_setup.check(tmp_path / "other-clone" / ".cuforge", emu)[0]
    assert mine.ok, mine
    # a state dir whose emulation folder links to that clone's (the bench's throw-away state)
    linked = tmp_path / "bench" / "cuforge"
    linked.mkdir(parents=True)
    (linked / "emulation").symlink_to(tmp_path / "other-clone" / ".cuforge" / "emulation")
    assert emulation_setup.check(linked, emu)[0].ok
    assert emulation_setup.verdict(False) == "not yet" and emulation_setup.verdict(True) == "ok"
