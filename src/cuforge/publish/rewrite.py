"""The wheel rewritten at publish (``cuforge.publish.wheelmeta`` says what it is written to say,
and reads it back): METADATA's Requires-Dist with torch's exact build and its CUDA runtime line
and every wheelhouse package pinned, the local version label, the import guard of a wheel that
links torch, the platform tag its ELF files earn (``manylinux_2_X_<arch>``, the lowest level
their symbol versions and libraries hold: ``verify.floor``; ``linux_<arch>`` stays when none
does, and the manifest says why) in the file name and WHEEL's ``Tag:`` lines, the new file
name, ``.dist-info`` and RECORD.

>>> pinned_requirements(["torch>=2", "scipy", "cumm-cu126<0.8.0"],
...                     torch=TorchBuild("2.11.0+cu130", ("nvidia-cuda-runtime==13.0.96",)),
...                     house={"cumm-cu130": "0.8.2+cu130"}, depends=["pccm"])
['scipy', 'cumm-cu130==0.8.2+cu130', 'torch==2.11.0+cu130', 'nvidia-cuda-runtime==13.0.96']
"""

from __future__ import annotations

import json
import time
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from cuforge.core.digest import record_digest
from cuforge.verify.floor import Floor, floor_of_wheel
from cuforge.publish.wheelmeta import (SIGNATURES, TorchBuild, admitted_builds, check,
                                       cuda_runtime_lines, dist_info, has_compiled_code,
                                       house_name, links_torch, local_label, metadata,
                                       torch_requirement, versions_in)


def _as_build(torch: str | TorchBuild) -> TorchBuild:
    return torch if isinstance(torch, TorchBuild) else TorchBuild(torch)


# -- rewriting -------------------------------------------------------------------------------------
def pinned_requirements(requires: list[str], *, torch: str | TorchBuild | None,
                        house: Mapping[str, str], depends: Iterable[str] = (),
                        own: str | None = None) -> list[str]:
    """The Requires-Dist list with torch (when given: its exact build, ``own`` its label, and
    its CUDA runtime line) and wheelhouse packages pinned exactly (the module's example)."""
    out, pinned = [], set()
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            out.append(line)
            continue
        if req.marker and "extra" in str(req.marker):
            out.append(line)                      # optional extras stay as they were
            continue
        if canonicalize_name(req.name) == "torch" and torch is not None:
            continue                              # replaced by the exact pin below
        found = house_name(req.name, house)
        if found is None:
            out.append(line)
            continue
        if found not in pinned:
            marker = f"; {req.marker}" if req.marker else ""
            out.append(f"{found}=={house[found]}{marker}")
            pinned.add(found)
    for dep in depends:
        found = house_name(dep, house)
        if found is not None and found not in pinned:
            out.append(f"{found}=={house[found]}")
            pinned.add(found)
    if torch is not None:
        build = _as_build(torch)
        out.append(torch_requirement(build.version, own=own))
        out += [line for line in build.runtime if line not in out]
    return out


def _rewrite_metadata(text: str, version: str, requires: list[str]) -> str:
    head, sep, body = text.partition("\n\n")
    lines, kept = head.splitlines(), []
    skipping = False
    for line in lines:
        if line[:1] in (" ", "\t") and kept:       # a continuation of the previous header
            if not skipping:
                kept.append(line)
            continue
        skipping = line.startswith("Requires-Dist:")
        if skipping:
            continue
        kept.append(f"Version: {version}" if line.startswith("Version:") else line)
    kept += [f"Requires-Dist: {r}" for r in requires]
    return "\n".join(kept) + "\n" + (sep[1:] + body if sep else "")


def platform_tag(wheel_platform: str, floor: Floor | None) -> str:
    """The platform part of the published file name: what the floor earns for a wheel built
    for one Linux machine (``linux_x86_64`` or a manylinux tag of it); any other (``any``,
    another OS, a floor of another machine) stays as it is.

    >>> platform_tag("any", None)
    'any'
    """
    if floor is None:
        return wheel_platform
    parts = wheel_platform.split(".")
    machine = floor.machine
    ours = all(p == f"linux_{machine}" or (p.startswith("manylinux") and p.endswith(f"_{machine}"))
               for p in parts)
    return floor.tag() if ours else wheel_platform


def _retag_wheel_file(text: str, platform: str) -> str:
    """WHEEL with one ``Tag:`` line per interpreter-abi pair and platform of ``platform``
    (``manylinux_2_17_x86_64.manylinux2014_x86_64``: two), where the old ones stood.

    >>> _retag_wheel_file("Wheel-Version: 1.0\\nTag: cp311-cp311-linux_x86_64\\n",
    ...                   "manylinux_2_17_x86_64.manylinux2014_x86_64").splitlines()[1:]
    ['Tag: cp311-cp311-manylinux_2_17_x86_64', 'Tag: cp311-cp311-manylinux2014_x86_64']
    """
    lines, tags, at = [], [], None
    for line in text.splitlines():
        if not line.startswith("Tag:"):
            lines.append(line)
            continue
        at = len(lines) if at is None else at
        interp, abi, _ = line.split(":", 1)[1].strip().split("-", 2)
        tags += [t for plat in platform.split(".")
                 if (t := f"Tag: {interp}-{abi}-{plat}") not in tags]
    if at is not None:
        lines[at:at] = tags
    return "\n".join(lines) + "\n"


def pin(wheel: Path, dest: Path, *, accel: str, torch: str | TorchBuild,
        house: Mapping[str, str], depends: Iterable[str] = (), epoch: int | None = None,
        floor: Floor | None | bool = True, variant: str = "") -> Path:
    """Write ``wheel`` into ``dest`` with its pins (module docstring); returns the new file.
    A pure-Python wheel keeps its version; its wheelhouse requirements are still pinned.
    ``floor``: the wheel's (``verify.floor``), which picks its platform tag (True: read it
    from the wheel here).
    The zip is written the same for the same content (``zip_entry``): entries in name order
    (``.dist-info`` last, RECORD at the end), each dated ``epoch`` (the source's time; None:
    as the wheel had it), with normalised permissions and compression. ``variant`` (a
    discovered fork's content, ``src1a2b3c4d``) ends the local label of compiled code."""
    build = _as_build(torch)
    torch_linked = links_torch(wheel)
    version, requires = metadata(wheel)
    if has_compiled_code(wheel):
        label = local_label(accel, build.version, links_torch=torch_linked)
        version = f"{version.partition('+')[0]}+{label}" + (f".{variant}" if variant else "")
    requires = pinned_requirements(requires, torch=build if torch_linked else None, house=house,
                                   depends=depends, own=build.label(accel))
    if floor is True:
        floor = floor_of_wheel(wheel)
    name, _old_version, *rest = wheel.name.removesuffix(".whl").split("-")
    platform = platform_tag(rest[-1], floor or None)
    rest[-1] = platform
    out = dest / ("-".join([name, str(Version(version)), *rest]) + ".whl")
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w") as dst:
        guard = _guard(wheel, src.namelist(), str(Version(version)), build, accel, requires) \
            if torch_linked else {}
        old_info = dist_info(src.namelist())
        project = old_info.removesuffix(".dist-info").rpartition("-")[0]
        new_prefix = f"{project}-{Version(version)}"
        renames = {old_info: f"{new_prefix}.dist-info",
                   old_info.removesuffix(".dist-info") + ".data": f"{new_prefix}.data"}
        record_name = f"{new_prefix}.dist-info/RECORD"
        record = []
        for arcname, data in guard.items():   # first: verify's import check imports it first
            dst.writestr(zip_entry(arcname, GUARD_TIME, epoch=epoch), data)
            record.append(f"{arcname},sha256={record_digest(data)},{len(data)}")
        renamed = {renames.get(top, top) + slash + rest_path: info
                   for info in src.infolist()
                   for top, slash, rest_path in [info.filename.partition("/")]
                   if not (rest_path in SIGNATURES and top == old_info)}   # signatures die
        for arcname in sorted(renamed, key=lambda n: (n.startswith(f"{new_prefix}.dist-info/"), n)):
            if arcname == record_name or arcname in guard:
                continue                          # RECORD is written anew
            info = renamed[arcname]
            data = src.read(info)
            if arcname == f"{new_prefix}.dist-info/METADATA":
                data = _rewrite_metadata(data.decode(), str(Version(version)), requires).encode()
            elif arcname == f"{new_prefix}.dist-info/WHEEL":
                data = _retag_wheel_file(data.decode(), platform).encode()
            dst.writestr(zip_entry(arcname, info.date_time, info.external_attr >> 16,
                                   epoch=epoch), data)
            if not arcname.endswith("/"):
                record.append(f"{arcname},sha256={record_digest(data)},{len(data)}")
        record.append(f"{record_name},,")
        dst.writestr(zip_entry(record_name, GUARD_TIME, epoch=epoch), "\n".join(record) + "\n")
    return out


GUARD_TIME = (2020, 1, 1, 0, 0, 0)   # the files cuforge writes, when no source time is given
ZIP_MIN = 315532800                   # 1980-01-01: a zip holds no earlier time


def zip_entry(name: str, date_time: tuple, mode: int = 0, *, epoch: int | None) -> zipfile.ZipInfo:
    """A wheel entry that says only what its content needs: dated ``epoch`` (UTC; None keeps
    ``date_time``), a Unix regular file 0644 or, when any execute bit is set in ``mode``, 0755
    (a directory 0755), deflated. Nothing of the machine, the umask or the time of the build
    that wrote it.

    >>> e = zip_entry("a/b.so", (2026, 12, 6, 0, 57, 48), 0o100775, epoch=315532800)
    >>> e.date_time, oct(e.external_attr >> 16), e.create_system
    ((1980, 1, 1, 0, 0, 0), '0o100755', 3)
    """
    if epoch is not None:
        date_time = time.gmtime(max(epoch, ZIP_MIN))[:6]
    info = zipfile.ZipInfo(name, date_time)
    info.create_system = 3                      # Unix: the permissions below are read
    if name.endswith("/"):
        info.external_attr = (0o40755 << 16) | 0x10
    else:
        info.external_attr = (0o100755 if mode & 0o111 else 0o100644) << 16
    info.compress_type = zipfile.ZIP_DEFLATED   # at zlib's default level
    return info


def _guard(wheel: Path, names: list[str], version: str, build: TorchBuild, accel: str,
           requires: list[str]) -> dict[str, bytes]:
    """The import guard's files (cuforge.publish.importguard) for a wheel that links torch: it
    accepts the builds its torch pin admits, nothing else."""
    from cuforge.publish import importguard
    dist = canonicalize_name(parse_wheel_filename(wheel.name)[0])
    public = Version(build.version).public
    torch_lines = [r for r in requires if canonicalize_name(Requirement(r).name) == "torch"]
    return importguard.files(dist, f"{dist} {version}", importguard.top_level_names(names),
                             public, admitted_builds(torch_lines, public), build.label(accel))


def torch_build(python: Path, fallback: str,
                env: tuple[tuple[str, str], ...] = ()) -> TorchBuild:
    """The torch of an env as an index lists it: its *distribution* version (``2.14.1``, what a
    pin must name; ``torch.__version__`` says ``2.14.1+cu130`` for the same PyPI wheel) and
    its CUDA runtime requirement. ``fallback`` (its public part) serves when the metadata
    cannot be read (a source build of torch without dist-info)."""
    from cuforge.core.errors import VerifyError
    from cuforge.core.runner import capture
    code = ("import importlib.metadata as m, json; d = m.distribution('torch'); "
            "print(json.dumps([d.version, d.requires or []]))")
    try:
        version, requires = json.loads(capture([str(python), "-c", code], error=VerifyError,
                                               env=dict(env)))
    except (VerifyError, ValueError):
        return TorchBuild(fallback)
    return TorchBuild(version or fallback, cuda_runtime_lines(requires))


def for_wheelhouse(wheel: Path, directory: Path, dest: Path, *, accel: str,
                   torch: str | TorchBuild, depends: Iterable[str] = (),
                   epoch: int | None = None, variant: str = ""):
    """The pinned copy of ``wheel`` for ``directory`` (in ``dest``), its ``pins`` check and its
    floor (``verify.floor``: None for a pure-Python wheel, what its tag was chosen from),
    made before it is published; VerifyError if the check fails (nothing is published).
    ``epoch``: the source's time, every entry's date (``pin``)."""
    from cuforge.core.errors import VerifyError
    house = versions_in(directory) if directory.is_dir() else {}
    floor = floor_of_wheel(wheel)
    out = pin(wheel, dest, accel=accel, torch=torch, house=house, depends=depends, epoch=epoch,
              floor=floor, variant=variant)
    result = check(out, directory, house=house)
    if result is not None and result.failed:
        raise VerifyError(result.detail, hint="a cuforge bug: report it with the wheel")
    return out, result, floor
