"""A team's wheels (``build --wheels`` / ``setup --wheels``): what ``cuforge index`` or CI
publish, read from a PEP 503 simple index (``file://.../simple/``, ``http://host/simple/``,
pypiserver) or a directory of wheels, and offered to the build before it compiles.

Nothing here decides whether a wheel is used: the pipeline downloads the best candidate,
refuses it before anything is installed when its floor (``verify.floor``) is above this
machine's glibc (:func:`beyond_this_machine`), and runs the same checks a wheel built here gets
(pins and RECORD, then ABI, symbols, CUDA runtime, fatbin, glibc, import, smoke); one that
fails is refused with the reason and the package is built here.
"""

from __future__ import annotations

import hashlib
import shutil
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from cuforge.config.inputs import local_path
from cuforge.core.errors import ConfigError, SourceError


@dataclass(frozen=True)
class TeamWheel:
    filename: str
    url: str          # where to fetch it (file:// or http(s)://)
    sha256: str       # from the index's #sha256= fragment ("" when the index gives none)


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        if tag == "a":
            self.hrefs += [v for k, v in attrs if k == "href" and v]


def _read(url: str) -> str:
    if url.startswith("file:") and url.endswith("/"):
        url += "index.html"   # what a web server answers for a directory of a static index
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as err:
        raise SourceError(f"the team index {url} cannot be read: {err}",
                          hint="check --wheels (a simple index URL such as "
                               "http://host:8080/simple/, file:///.../simple/, or a directory "
                               "of wheels)") from None


def _links(url: str) -> list[str]:
    parser = _Links()
    parser.feed(_read(url))
    return [urllib.parse.urljoin(url, h) for h in parser.hrefs]


def list_wheels(source: str) -> list[TeamWheel]:
    """Every wheel the team's index (or directory) offers."""
    path = local_path(source)
    if path is not None and any(path.glob("*.whl")):
        return [TeamWheel(w.name, w.resolve().as_uri(), "") for w in sorted(path.glob("*.whl"))]
    if path is not None and (path / "simple" / "index.html").is_file():
        source = (path / "simple").resolve().as_uri()
    elif path is not None and (path / "index.html").is_file():
        source = path.resolve().as_uri()
    elif path is not None:
        raise ConfigError(f"--wheels {source}: no wheels and no simple index there",
                          hint="pass the directory `cuforge build` publishes to, or its "
                               "simple/ index (`cuforge index`)")
    root = source if source.endswith("/") else source + "/"
    wheels = []
    for project in _links(root):
        page = project if project.endswith("/") else project + "/"
        for href in _links(page):
            url, _, fragment = href.partition("#")
            name = urllib.parse.unquote(url.rsplit("/", 1)[-1])
            if name.endswith(".whl"):
                sha = fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else ""
                wheels.append(TeamWheel(name, url, sha))
    return wheels


def candidates(wheels: list[TeamWheel], package: str, *, accel: str, labels: tuple[str, ...],
               python: str, platform_ok: Callable[[str], bool]) -> list[TeamWheel]:
    """The wheels that could be ``package``'s for this combo, newest first: the project is
    the package or ``<package>-<accel>`` (``cumm-cu130``), the local label one of ``labels``
    (``cu130torch2.14.1``, ``cu130``, or none for pure Python), a tag for ``python`` (cp311)
    and a platform ``platform_ok`` accepts.

    >>> ws = [TeamWheel(n, "", "") for n in ("cumm_cu130-0.8.2+cu130-cp311-cp311-linux_x86_64.whl",
    ...       "cumm_cu130-0.8.2+cu130-cp312-cp312-linux_x86_64.whl", "pccm-0.4.16-py3-none-any.whl")]
    >>> [w.filename for w in candidates(ws, "cumm", accel="cu130", labels=("cu130", ""),
    ...                                 python="cp311", platform_ok=lambda n: True)]
    ['cumm_cu130-0.8.2+cu130-cp311-cp311-linux_x86_64.whl']
    """
    names = {canonicalize_name(package), canonicalize_name(f"{package}-{accel}")}
    found = []
    for w in wheels:
        try:
            name, version, _, wtags = parse_wheel_filename(w.filename)
        except InvalidWheelFilename:
            continue
        runs = any(t.interpreter in (python, "py3") and t.abi in (python, "abi3", "none")
                   or t.interpreter.startswith("cp3") and t.abi == "abi3" for t in wtags)
        if (name in names and (version.local or "") in labels and runs
                and platform_ok(w.filename)):
            found.append((version, w))
    return [w for _, w in sorted(found, key=lambda p: p[0], reverse=True)]


def download(wheel: TeamWheel, dest: Path) -> Path:
    """The wheel's bytes into ``dest`` (replacing an earlier copy), checked against the index's
    sha256 when it gives one."""
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / wheel.filename
    tmp = dest / f".{wheel.filename}.part"
    try:
        with urllib.request.urlopen(wheel.url, timeout=120) as resp, open(tmp, "wb") as f:
            shutil.copyfileobj(resp, f)
    except (urllib.error.URLError, OSError) as err:
        tmp.unlink(missing_ok=True)
        raise SourceError(f"{wheel.url} cannot be downloaded: {err}") from None
    digest = hashlib.sha256(tmp.read_bytes()).hexdigest()
    if wheel.sha256 and digest != wheel.sha256:
        tmp.unlink()
        raise SourceError(f"{wheel.filename}: sha256 {digest} is not the index's {wheel.sha256}")
    tmp.replace(out)
    return out


def beyond_this_machine(wheel: Path, floor=None, here: tuple[int, ...] | None = None) -> str:
    """Why a downloaded team wheel cannot run on this machine: its files need a newer glibc
    than this machine's (``floor``: the wheel's, read here when None; ``here``: this
    machine's glibc, asked of it when None). One line naming both versions, or ``""`` when it
    fits (or either is unknown: the checks decide)."""
    from cuforge.verify.floor import dotted, floor_of_wheel, machine_glibc
    here = here or machine_glibc()
    floor = floor or floor_of_wheel(wheel)
    if here is None or floor is None or floor.glibc is None or floor.glibc <= here:
        return ""
    top = max((n for n in floor.needs if n.namespace == "GLIBC"), key=lambda n: n.number or ())
    return (f"team wheel {wheel.name} needs glibc {dotted(floor.glibc)} ({top.words(2)}), "
            f"but this machine has glibc {dotted(here)}")
