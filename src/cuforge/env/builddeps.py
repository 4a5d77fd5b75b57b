"""Build dependencies (cumm under spconv) are installed once: a wheel whose files are already
in the env, byte for byte, is not installed again.

``pip install --force-reinstall`` of the same wheel rewrites every file with a new time, and
ninja decides by time: every object that includes one of cumm's headers (almost all of
spconv's 775) was out of date after it, so a killed spconv build started again from [1/765]
(docs/troubleshooting.md has the experiment). Comparing the wheel's ``RECORD`` hashes with the
installed files costs a few milliseconds; when they all match, the install is skipped and the
files keep their times. A wheel that differs is installed as before (its files did change).

They go into the package's own overlay, never into the combo env: one ``pip install --no-deps
--target`` directory per dependency under the package's work dir, put on ``PYTHONPATH`` for
that package's build and verification only. On the H200 (combo env = the machine's python3)
cumm's wheel, installed into site-packages for spconv's build, was what ``import cumm`` found
during a later rebuild of cumm itself: cumm's setup.py only appends its source dir to
``sys.path``, pccm strips the ``cumm.`` prefix only from files under that dir, and the rebuilt
wheel had ``cumm.core_cc.cumm.tensorview_bind`` instead of ``cumm.core_cc.tensorview_bind``
(docs/troubleshooting.md). An overlay per dependency also leaves no stale copy behind: a wheel
that differs replaces its whole directory.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

from cuforge.core.digest import record_digest
from cuforge.core.errors import BuildError
from cuforge.core.runner import Step

OVERLAY = "build-deps"   # under the package's work dir: <work>/build-deps/<dependency>


def overlay_dirs(work: Path, depends: tuple[str, ...]) -> list[Path]:
    """The ``--target`` directory of each dependency of the package built in ``work``."""
    return [work / OVERLAY / dep for dep in depends]


def overlay_pythonpath(work: Path, depends: tuple[str, ...], theirs: str | None) -> str:
    """``PYTHONPATH`` for the package's build: its dependencies' overlays (ahead of
    site-packages, so an older copy there never wins), then the user's own."""
    return os.pathsep.join([*map(str, overlay_dirs(work, depends)), *([theirs] if theirs else [])])


def install_step(python: Path, wheel: Path, target: Path, env: tuple[tuple[str, str], ...] = ()) -> Step | None:
    """``pip install --no-deps --target`` of ``wheel`` into its own empty ``target``; None when
    ``target`` has it already, file for file (its files keep their times: ninja). A target
    holding anything else (another version, edited files) is emptied first: no stale copy."""
    if installed_identically(wheel, target):
        return None
    shutil.rmtree(target, ignore_errors=True)
    return Step((str(python), "-m", "pip", "install", "--no-deps", "--disable-pip-version-check",
                 "--target", str(target), str(wheel)), env,
                description=f"install {wheel.name} into {target}")


# Prints, for each top-level name, where the interpreter imports it from and which
# distribution installed it; cwd and '' are dropped (the build's own tree is not the question).
_PROBE = """import importlib.util, json, os, sys
sys.path[:] = [p for p in sys.path if p not in ('', os.getcwd())]
try:
    from importlib.metadata import packages_distributions
    owners = packages_distributions()
except Exception:
    owners = {}
found = {}
for name in sys.argv[1:]:
    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        spec = None
    if spec is not None:
        where = spec.origin or next(iter(spec.submodule_search_locations or []), '?')
        found[name] = [where, (owners.get(name) or [name])[0]]
print(json.dumps(found))
"""


def require_not_installed(python: Path, names: list[str], package: str,
                          env: tuple[tuple[str, str], ...] = ()) -> None:
    """Refuse to build ``package`` while the build interpreter imports one of its top-level
    ``names`` from outside its source tree (site-packages, user site, an editable install).

    Refused, not hidden: a setup.py that imports itself (cumm's, through pccm) would pick the
    installed copy up and build a broken wheel without an error. Uninstalling it ourselves
    would change an interpreter cuforge may not own (on the H200 it is the machine's python3,
    and the copy may be someone's), and hiding it with an import hook would make the build
    differ from a plain ``pip wheel`` of upstream. One command, named here, fixes it for good:
    cuforge itself no longer installs build dependencies into the env."""
    if not names:
        return
    environ = {k: v for k, v in {**os.environ, **dict(env)}.items() if k != "PYTHONPATH"}
    try:
        out = subprocess.run([str(python), "-c", _PROBE, *names], capture_output=True,
                             text=True, env=environ, timeout=60, check=True).stdout
        found = json.loads(out.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return   # the env check has already vetted the interpreter; no answer, no verdict
    if not found:
        return
    where = "; ".join(f"{name} from {origin}" for name, (origin, _) in sorted(found.items()))
    dists = sorted({dist for _, dist in found.values()})
    raise BuildError(
        f"{package}: the build interpreter {python} already imports {where}: the build would "
        "use that copy instead of the source being built (a broken wheel, silently: "
        "docs/troubleshooting.md, 'cannot import name tensorview_bind')",
        hint=f"uninstall it from the build interpreter: {python} -m pip uninstall -y "
        f"{' '.join(dists)} (older cuforge versions installed build dependencies there)")


def installed_identically(wheel: Path, site_packages: Path) -> bool:
    """Whether every file ``wheel`` installs into ``site_packages`` is there with the hash its
    ``RECORD`` lists (files pip writes itself - RECORD, INSTALLER - and ``.data`` files, which
    pip moves elsewhere, are not compared)."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            record = next((n for n in zf.namelist() if n.endswith(".dist-info/RECORD")
                           and n.count("/") == 1), None)
            if record is None:
                return False
            rows = list(csv.reader(io.StringIO(zf.read(record).decode())))
    except (OSError, zipfile.BadZipFile):
        return False
    if not (site_packages / record.split("/")[0]).is_dir():
        return False   # not installed, or another version
    for row in rows:
        if len(row) < 2 or not row[1] or row[0].split("/", 1)[0].endswith(".data"):
            continue
        algo, _, digest = row[1].partition("=")
        if algo != "sha256" or _sha256(site_packages / row[0]) != digest:
            return False
    return True


def _sha256(path: Path) -> str:
    try:
        return record_digest(path.read_bytes())
    except OSError:
        return "missing"
