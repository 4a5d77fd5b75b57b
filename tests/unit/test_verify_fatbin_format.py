"""The fatbin container format and the compatibility rules, on synthetic bytes (no nvcc)."""

from __future__ import annotations

import struct

import pytest

from cuforge.config.arches import Arch, parse_arch_list
from cuforge.verify.fatbin import (
    FLAG_ARCH_SPECIFIC, FLAG_FAMILY, FLAG_ZSTD, FatbinContainer, FatbinEntry, coverage,
    parse_fatbin, runs_on,
)


def entry(kind: int, arch: int, payload: bytes = b"\0" * 8, flags: int = 0x11,
          header_size: int = 64, compressed: int = 0) -> bytes:
    head = struct.pack("<HHIQIIHHIIIQQQ", kind, 0x101, header_size, len(payload), compressed, 0,
                       8, 1, arch, 0, 0, flags, 0, 0)
    return head + b"\0" * (header_size - 64) + payload


def container(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def group(sass=(), ptx=(), index=0) -> FatbinContainer:
    entries = [FatbinEntry("sass", a, (1, 8), 0, 0, True, None) for a in sass]
    entries += [FatbinEntry("ptx", a, (9, 0), 0, 0, True, None) for a in ptx]
    return FatbinContainer(index, 0, tuple(entries))


def test_parses_containers_entries_and_flags():
    data = (container(entry(2, 90), entry(1, 90, flags=0x8011, compressed=8))
            + container(entry(2, 120, header_size=112, flags=0x1100011), entry(2, 100, flags=0x1200011)))
    first, second = parse_fatbin(data)
    assert [e.label for e in first.entries] == ["sm_90", "compute_90"]
    assert first.entries[1].compressed and first.entries[1].flags & FLAG_ZSTD
    assert [e.label for e in second.entries] == ["sm_120a", "sm_100f"]
    assert second.entries[0].flags & FLAG_ARCH_SPECIFIC and second.entries[1].flags & FLAG_FAMILY
    assert second.offset == len(container(entry(2, 90), entry(1, 90, flags=0x8011, compressed=8)))


def test_uncompressed_garbage_cubin_has_unknown_kernels():
    (c,) = parse_fatbin(container(entry(2, 75, payload=b"not an elf")))
    assert c.entries[0].kernels is None and not c.is_link_stub


def test_bad_magic_and_truncation_are_errors():
    with pytest.raises(ValueError, match="bad fatbin magic"):
        parse_fatbin(b"\x01" * 32)
    with pytest.raises(ValueError, match="runs past"):
        parse_fatbin(container(entry(2, 90))[:-4])
    assert parse_fatbin(container(entry(2, 90)) + b"\0" * 8)  # trailing zero padding is fine


@pytest.mark.parametrize("device, expected", [
    (Arch(9, 0), ("native", Arch(9, 0))),
    (Arch(12, 0), ("native", Arch(12, 0))),
    (Arch(12, 1), ("compatible", Arch(12, 0))),  # same major, older minor: NVIDIA's rule
    (Arch(10, 0), ("ptx", Arch(9, 0))),  # PTX JIT runs forward across majors
    (Arch(8, 6), None),
])
def test_runs_on(device, expected):
    assert runs_on(group(sass=(Arch(9, 0), Arch(12, 0)), ptx=(Arch(9, 0),)), device) == expected


def test_arch_specific_sass_runs_only_on_its_arch():
    g = group(sass=(Arch(9, 0, "a"),))
    assert runs_on(g, Arch(9, 0)) == ("native", Arch(9, 0, "a"))
    assert runs_on(group(sass=(Arch(12, 0, "a"),)), Arch(12, 1)) is None


def test_coverage_compatible_sass_warns_and_extra_arches_are_listed():
    notes = coverage([group(sass=(Arch(12, 0), Arch(7, 5)))], parse_arch_list("12.1"))
    assert notes[0][0] == "warn"
    assert notes[0][1].startswith("12.1: group #1: no sm_121 SASS; runs sm_120 SASS by same-major")
    assert notes[-1] == ("pass", "extra arches not requested: sm_75 sm_120 (sm_75 is nvcc's default "
                                 "arch: unless requested on purpose, a .cu was compiled without "
                                 "the requested -gencode flags: the silent arch trap)")


def test_coverage_groups_findings_per_target():
    groups = [group(sass=(Arch(7, 5),), ptx=(Arch(7, 5),)) for _ in range(5)]
    groups = [FatbinContainer(i, 0, g.entries) for i, g in enumerate(groups)]
    notes = coverage(groups, parse_arch_list("12.0;12.1+PTX"))
    assert notes[0] == ("warn", "12.0: 5 kernel groups [group #1, group #2, group #3 +2 more]: runs "
                                "by PTX JIT from compute_75 at first load (slow first start, "
                                "different code path)")
    assert notes[1][0] == "fail" and "no compute_121 PTX (12.1+PTX requested)" in notes[1][1]


def test_coverage_without_request_only_lists():
    assert coverage([group(sass=(Arch(9, 0),))], None) == [("pass", "no requested arch list: listing only")]


def test_zero_padding_to_a_wide_alignment_between_containers_is_skipped():
    """aarch64-linux-gnu-ld keeps each object's .nv_fatbin at a 256-byte alignment: the
    section of simple-knn's aarch64 .so has 80 zero bytes before its second container."""
    first = container(entry(2, 120), entry(1, 121))
    pad = b"\0" * (256 - len(first) % 256)
    one, two = parse_fatbin(first + pad + container(entry(2, 121)))
    assert two.offset == len(first) + len(pad) and two.offset % 256 == 0
    assert [e.label for e in two.entries] == ["sm_121"]
    with pytest.raises(ValueError, match="bad fatbin magic"):   # non-zero junk is still an error
        parse_fatbin(first + b"\x01" * 24 + container(entry(2, 121)))
