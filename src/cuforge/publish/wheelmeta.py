"""What a published wheel says it was built against, written into the wheel at publish.

A wheel built here only works with the torch it was compiled against (``undefined symbol:
_ZN3c10...`` otherwise), yet upstream metadata says ``Requires-Dist: torch`` or nothing at all
(MILo's rasterizers). Installed from our index next to another torch (a ``+cpu`` build, another
version), a resolver would take any torch and the import would fail. So, before a wheel enters
the wheelhouse, its METADATA is rewritten (``cuforge.publish.rewrite``):

- ``Requires-Dist: torch==<the env's torch distribution version>`` for a wheel that links torch,
  naming its CUDA build: PEP 440 lets ``==2.14.1`` match ``2.14.1+cpu``, ``+cu126`` and
  ``+rocm6.4`` alike, so every other build's label PyTorch uses (``data/torch_builds.toml``)
  is excluded (``!=2.14.1+cu126, ...``), and the build torch's own requirement on its CUDA
  runtime (``cuda-toolkit[...]==13.0.3``) is copied, which any other CUDA build of that version
  conflicts with, whatever its label. A torch with a label of its own (``2.11.0+cu130``) is
  pinned as exactly that;
- a local version label naming CUDA and torch, as prebuilt-wheel projects do:
  ``0.1.0+cu130torch2.14.1`` (``+cu130`` for compiled code that does not link torch); the
  upstream version before the ``+`` stays as it was;
- every requirement on a package of the same wheelhouse directory (and every recipe dependency
  found there) pinned to that wheel's exact version (``cumm-cu130==0.8.2+cu130``);
- for a wheel that links torch, the import guard (cuforge.publish.importguard), which refuses the
  import when torch was swapped after the install by a command that did not resolve these pins.

The wheel's file name and ``.dist-info`` directory take the new version, and RECORD is written
anew, so pip and uv accept it. This module says what the pins are and reads them back:
:func:`check` holds a wheel against the directory it sits in (``<cuXYZ>/torch<V>-cp<XY>``):
``cuforge verify`` and the build both run it.

>>> local_label("cu130", "2.14.1", links_torch=True)
'cu130torch2.14.1'
>>> torch_requirement("2.11.0+cu130")
'torch==2.11.0+cu130'
>>> admitted_builds(torch_requirement("2.14.1", own="cu130"), "2.14.1")
['', 'cu130']
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from cuforge import data
from cuforge.core.digest import record_digest
from cuforge.verify.runtimedeps import base_name

# torch's own libraries: a .so that needs one of these was compiled against torch
_TORCH_LIBS = re.compile(r"^lib(c10|torch)(_\w+)?\.so")
_TORCH_SYMBOLS = ("_ZN3c10", "_ZN2at", "_ZN5torch")
_COMBO_DIR = re.compile(r"^torch(?P<torch>[^-]+)-cp(?P<py>\d+)$")
SIGNATURES = ("RECORD.jws", "RECORD.p7s")


@dataclass(frozen=True)
class BuiltAgainst:
    """What the wheels of one wheelhouse directory are built against."""

    accel: str      # cu130
    torch: str      # the torch distribution version of the env (2.14.1; 2.11.0+cu130)
    python: str     # cp311


def built_against_of(directory: Path) -> BuiltAgainst | None:
    """``.../cu130/torch2.14.1-cp311`` -> BuiltAgainst("cu130", "2.14.1", "cp311"); None
    elsewhere."""
    m = _COMBO_DIR.match(directory.name)
    accel = directory.parent.name
    if not m or not re.fullmatch(r"cu\d+|cpu", accel):
        return None
    return BuiltAgainst(accel, m["torch"], f"cp{m['py']}")


# A discovered fork's local label ends with its content (``+cu130torch2.14.1.src1a2b3c4d``):
# two checkouts' ``diff_gaussian_rasterization`` wheels never share a file name
VARIANT = re.compile(r"src[0-9a-f]{8}")


def local_label(accel: str, torch: str, *, links_torch: bool) -> str:
    """The local version label: ``cu130torch2.14.1``, or ``cu130`` without torch."""
    return f"{accel}torch{Version(torch).public}" if links_torch else accel


@dataclass(frozen=True)
class TorchBuild:
    """The torch a wheel is built against, as an index lists it."""

    version: str                  # the distribution version: 2.14.1, or 2.11.0+cu130
    runtime: tuple[str, ...] = ()   # its Requires-Dist lines that fix its CUDA runtime

    def label(self, accel: str) -> str:
        """Its build's local label: its own (``+cu130``), else the CUDA of its runtime
        requirement (``cuda-toolkit==13.0.3`` -> ``cu130``), else the combo's ``accel``."""
        version = Version(self.version)
        if version.local:
            return version.local
        for line in self.runtime:
            exact = [s.version for s in Requirement(line).specifier if s.operator == "=="]
            if exact:
                cuda = Version(exact[0]).release
                return f"cu{cuda[0]}{cuda[1] if len(cuda) > 1 else 0}"
        return accel


def _builds_table() -> dict:
    return data.table("torch_builds")


def known_labels() -> tuple[str, ...]:
    """The local labels PyTorch publishes builds under (``data/torch_builds.toml``)."""
    return tuple(_builds_table()["labels"])


def cuda_runtime_lines(requires: Iterable[str]) -> tuple[str, ...]:
    """The lines of torch's Requires-Dist that fix its CUDA runtime (``data/torch_builds.toml``)."""
    names = {canonicalize_name(n) for n in _builds_table()["runtime"]}
    out = []
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) in names and not (req.marker and "extra" in str(req.marker)):
            out.append(line)
    return tuple(out)


def torch_requirement(torch: str, *, own: str | None = None) -> str:
    """The exact torch build: ``torch==2.14.1`` with every known label but ``own`` excluded
    (``==2.14.1`` alone matches ``2.14.1+cpu`` and ``2.14.1+cu126`` too); a version with a
    label of its own (``2.11.0+cu130``) matches only itself."""
    version = Version(torch)
    if version.local:
        return f"torch=={version}"
    spec = [f"=={version}", *(f"!={version}+{label}" for label in known_labels()
                              if label != own)]
    return f"torch{SpecifierSet(','.join(spec))}"


def admitted_builds(requirement: str | Iterable[str], version: str) -> list[str]:
    """Which builds of torch ``version`` a torch requirement (or the torch lines of a
    Requires-Dist) lets in: ``""`` for the plain version, else the known labels it admits."""
    lines = [requirement] if isinstance(requirement, str) else list(requirement)
    spec = SpecifierSet()
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) == "torch" and not req.marker:
            spec &= req.specifier
    public = Version(version).public
    return [label for label in ("", *known_labels())
            if spec.contains(f"{public}+{label}" if label else public, prereleases=True)]


def loosely_pinned(requires: Iterable[str]) -> bool:
    """Whether a published Requires-Dist pins torch's version but lets in more than one labelled
    build of it (wheels published before pins named the CUDA build:
    ``torch!=2.14.1+cpu,==2.14.1``). The plain version and one label (PyPI's 2.14.1 and the
    same cu130 build from download.pytorch.org) are one build."""
    lines = list(requires)
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        exact = [s.version for s in req.specifier if s.operator == "=="]
        if canonicalize_name(req.name) == "torch" and exact:
            return len([b for b in admitted_builds(lines, exact[0]) if b]) > 1
    return False


# -- reading a wheel ------------------------------------------------------------------------------
def dist_info(names: Iterable[str]) -> str:
    """The wheel's top-level ``NAME-VERSION.dist-info`` directory."""
    found = {n.split("/", 1)[0] for n in names
             if n.count("/") == 1 and n.endswith(".dist-info/METADATA")}
    if len(found) != 1:
        raise ValueError(f"expected one .dist-info directory, found {sorted(found) or 'none'}")
    return found.pop()


_SHARED_OBJECT = re.compile(r"\.so(\.\d+)*$")   # a wheel member that is a shared object


def links_torch(wheel: Path) -> bool:
    """Whether any ``.so`` in ``wheel`` was compiled against torch: it needs a torch library
    (``libc10.so``, ``libtorch_cpu.so``...) or leaves c10/at/torch symbols undefined."""
    from cuforge.core.elf import ELF_MAGIC, ElfLib
    with zipfile.ZipFile(wheel) as zf:   # read in memory: no second unpack of the wheel
        for member in zf.namelist():
            if not _SHARED_OBJECT.search(member):
                continue
            data = zf.read(member)
            if not data.startswith(ELF_MAGIC):
                continue
            with ElfLib(Path(member), data) as lib:
                if any(_TORCH_LIBS.match(n) for n in lib.needed) or any(
                        s.startswith(_TORCH_SYMBOLS) for s in lib.undefined()):
                    return True
    return False


def has_compiled_code(wheel: Path) -> bool:
    with zipfile.ZipFile(wheel) as zf:
        return any(_SHARED_OBJECT.search(n) for n in zf.namelist())


def metadata(wheel: Path) -> tuple[str, list[str]]:
    """(Version, Requires-Dist lines) of ``wheel``'s METADATA."""
    with zipfile.ZipFile(wheel) as zf:
        text = zf.read(f"{dist_info(zf.namelist())}/METADATA").decode()
    headers = text.split("\n\n", 1)[0].splitlines()
    version = next(h.split(":", 1)[1].strip() for h in headers if h.startswith("Version:"))
    return version, [h.split(":", 1)[1].strip() for h in headers
                     if h.startswith("Requires-Dist:")]


def versions_in(directory: Path, *, leave_out: str = "") -> dict[str, str]:
    """Canonical project name -> version of each wheel in a wheelhouse directory: the newest
    manifest line's wheel per package when there is a manifest, else every wheel file."""
    from cuforge.publish.wheelhouse import Wheelhouse
    names = [e.wheel for e in Wheelhouse(directory).latest().values()
             if e.wheel and (directory / e.wheel).is_file()]
    if not names:
        names = [w.name for w in sorted(directory.glob("*.whl")) if not w.name.startswith(".")]
    out = {}
    for filename in names:
        if filename == leave_out:
            continue
        name, version, _, _ = parse_wheel_filename(filename)
        out[canonicalize_name(name)] = str(version)
    return out


def house_name(requirement_name: str, house: Mapping[str, str]) -> str | None:
    """The wheelhouse project a requirement (or recipe dependency) names: ``cumm`` and
    ``cumm-cu126<0.8`` both find ``cumm-cu130``."""
    name = canonicalize_name(requirement_name)
    if name in house:
        return name
    return next((h for h in house if base_name(h) == base_name(name)), None)


# -- checking --------------------------------------------------------------------------------------
def record_problems(wheel: Path) -> list[str]:
    """Files whose bytes do not match RECORD, or that RECORD does not list."""
    problems = []
    with zipfile.ZipFile(wheel) as zf:
        info = dist_info(zf.namelist())
        listed = {}
        for line in zf.read(f"{info}/RECORD").decode().splitlines():
            path, _, rest = line.rpartition(",")[0].partition(",")
            if path:
                listed[path] = rest.removeprefix("sha256=")
        for name in zf.namelist():
            skip = name.endswith("/") or name == f"{info}/RECORD"
            if skip or name.rsplit("/", 1)[-1] in SIGNATURES:
                continue
            if name not in listed:
                problems.append(f"{name} is not in RECORD")
            elif listed[name] != record_digest(zf.read(name)):
                problems.append(f"{name} does not match its RECORD hash")
    return problems


def check(wheel: Path, directory: Path | None = None, *, house: Mapping[str, str] | None = None):
    """The ``pins`` check of a wheel in a wheelhouse directory (``<cuXYZ>/torch<V>-cp<XY>``):
    its torch pin, local label, Python tag and wheelhouse pins match the directory, and RECORD
    matches its files. None when the wheel sits in no such directory."""
    from cuforge.verify import CheckResult
    directory = directory or wheel.parent
    built = built_against_of(directory)
    if built is None:
        return None
    if house is None:
        house = versions_in(directory, leave_out=wheel.name)
    project = canonicalize_name(parse_wheel_filename(wheel.name)[0])
    house = {k: v for k, v in house.items() if k != project}
    try:
        problems = _pin_problems(wheel, built, house)
        problems += record_problems(wheel)
    except (ValueError, KeyError, OSError, zipfile.BadZipFile) as err:
        # a tampered or truncated wheel: a failed check (the manifest check names the bytes)
        return CheckResult("pins", "fail", f"cannot read {wheel.name}'s metadata: {err}")
    if problems:
        return CheckResult("pins", "fail", f"{len(problems)} problem(s) with what "
                           f"{wheel.name} pins for {built.accel}/torch{built.torch}-"
                           f"{built.python}: " + "; ".join(problems))
    return CheckResult("pins", "pass", f"pins match {built.accel}/torch{built.torch}-"
                       f"{built.python}; RECORD valid")


def _has_guard(wheel: Path) -> bool:
    from cuforge.publish.importguard import module_name
    module = module_name(canonicalize_name(parse_wheel_filename(wheel.name)[0]))
    with zipfile.ZipFile(wheel) as zf:
        return {f"{module}.py", f"{module}.pth"} <= set(zf.namelist())


def _pin_problems(wheel: Path, built: BuiltAgainst, house: Mapping[str, str]) -> list[str]:
    problems = []
    _, version, _, tags = parse_wheel_filename(wheel.name)
    cps = {t.interpreter for t in tags if t.interpreter.startswith("cp") and t.abi != "abi3"}
    if cps and cps != {built.python}:
        problems.append(f"Python tag {', '.join(sorted(cps))}, not {built.python}")
    meta_version, requires = metadata(wheel)
    if str(Version(meta_version)) != str(version):
        problems.append(f"METADATA says version {meta_version}, the file name {version}")
    torch_linked = links_torch(wheel)
    if has_compiled_code(wheel):
        want = local_label(built.accel, built.torch, links_torch=torch_linked)
        if version.local != want and not VARIANT.fullmatch(
                (version.local or "").removeprefix(want + ".")):
            problems.append(f"local version label +{version.local or ''} is not +{want}")
    reqs = []
    for line in requires:
        try:
            reqs.append(Requirement(line))
        except InvalidRequirement:
            problems.append(f"unreadable Requires-Dist {line!r}")
    torch_reqs = [r for r in reqs if canonicalize_name(r.name) == "torch" and not r.marker]
    if torch_linked and not _has_guard(wheel):
        problems.append("links torch but carries no import guard (cuforge.publish.importguard)")
    if torch_linked:
        exact = [s for r in torch_reqs for s in r.specifier if s.operator == "=="]
        if not exact:
            problems.append("links torch but does not pin it (Requires-Dist: torch==...)")
        elif any(Version(s.version).public != Version(built.torch).public for s in exact):
            problems.append(f"pins {', '.join(str(r) for r in torch_reqs)}, but sits in "
                            f"torch{built.torch}")
        elif loosely_pinned(lines := [str(r) for r in torch_reqs]):
            labels = [f"+{b}" for b in admitted_builds(lines, built.torch) if b]
            problems.append(f"pins {', '.join(lines)}, which lets in {len(labels)} builds of "
                            f"torch {Version(built.torch).public} ({', '.join(labels[:4])}"
                            f"{', ...' if len(labels) > 4 else ''}): publish it again with this "
                            "cuforge (build --rebuild)")
    for req in reqs:
        found = house_name(req.name, house)
        if found is None or (req.marker and "extra" in str(req.marker)):
            continue
        exact = [s.version for s in req.specifier if s.operator == "=="]
        if exact != [house[found]]:
            problems.append(f"requires {req}, but the wheelhouse has {found} {house[found]}")
    return problems


def wheel_requirements(wheel: Path) -> list[str]:
    """The wheel's own ``Requires-Dist`` (extras left out): what ``pip install`` of it would
    bring, so the import check sees what a user's install sees (torch-sparse needs scipy)."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next((n for n in zf.namelist() if n.endswith(".dist-info/METADATA")), None)
        text = zf.read(meta).decode(errors="replace") if meta else ""
    reqs = []
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        try:
            req = Requirement(line.split(":", 1)[1].strip())
        except InvalidRequirement:
            continue
        if req.marker and "extra" in str(req.marker):
            continue
        if req.marker and not req.marker.evaluate():
            continue
        reqs.append(str(req))
    return reqs
