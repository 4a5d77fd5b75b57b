"""Build dependencies (cumm under spconv) are installed once: a wheel whose files are already
in the env, byte for byte, is not installed again.

``pip install --force-reinstall`` of the same wheel rewrites every file with a new time, and
ninja decides by time: every object that includes one of cumm's headers (almost all of
spconv's 775) was out of date after it, so a killed spconv build started again from [1/765]
(docs/troubleshooting.md has the experiment). Comparing the wheel's ``RECORD`` hashes with the
installed files costs a few milliseconds; when they all match, the install is skipped and the
files keep their times. A wheel that differs is installed as before (its files did change).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import zipfile
from pathlib import Path


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
        raw = hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return "missing"
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
