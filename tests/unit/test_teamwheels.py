"""Reading a team's index (cuforge.publish.teamwheels): a `cuforge index` tree over file://, the bare
directory, and which of its wheels fit a combo. Real wheels and a real index, no network."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "verify"))
import verify_builders as vb  # noqa: E402

from cuforge.config import platforms  # noqa: E402
from cuforge.core.errors import ConfigError, SourceError  # noqa: E402
from cuforge.publish.wheelhouse import write_indexes  # noqa: E402
from cuforge.publish.teamwheels import candidates, download, list_wheels  # noqa: E402

TREE = Path("linux-x86_64") / "cu130" / "torch2.14.1-cp311"
LINUX = "cp311-cp311-linux_x86_64"


@pytest.fixture
def team(tmp_path: Path) -> Path:
    d = tmp_path / "team" / TREE
    for version, tag in (("2.3.8+cu130torch2.14.1", LINUX), ("2.3.9+cu130torch2.13.0", LINUX),
                         ("2.3.8+cu130torch2.14.1", "cp312-cp312-linux_x86_64")):
        vb.make_wheel(d, "spconv-cu130", {"spconv/__init__.py": ""}, version=version, tag=tag)
    vb.make_wheel(d, "cumm-cu130", {"cumm/__init__.py": ""}, version="0.8.2+cu130", tag=LINUX)
    vb.make_wheel(d, "pccm", {"pccm/__init__.py": ""}, version="0.4.16")
    write_indexes([tmp_path / "team"])
    return d


def _fit(wheels, package: str) -> list[str]:
    linux = platforms.known()["linux-x86_64"]
    return [w.filename for w in candidates(wheels, package, accel="cu130",
                                           labels=("cu130torch2.14.1", "cu130", ""),
                                           python="cp311", platform_ok=linux.accepts)]


def test_the_file_index_and_the_directory_offer_the_same_wheels(team: Path) -> None:
    from_index = list_wheels((team / "simple").as_uri() + "/")
    from_dir = list_wheels(str(team))
    assert sorted(w.filename for w in from_index) == sorted(w.filename for w in from_dir)
    assert len(from_index) == 5 and all(len(w.sha256) == 64 for w in from_index)
    assert _fit(from_index, "spconv") == ["spconv_cu130-2.3.8+cu130torch2.14.1-" + LINUX + ".whl"]
    assert _fit(from_index, "cumm") == ["cumm_cu130-0.8.2+cu130-" + LINUX + ".whl"]
    assert _fit(from_index, "pccm") == ["pccm-0.4.16-py3-none-any.whl"]
    assert _fit(from_index, "pointops") == []


def test_a_download_must_match_the_index_hash(team: Path, tmp_path: Path) -> None:
    wheel = next(w for w in list_wheels((team / "simple").as_uri() + "/")
                 if w.filename.startswith("pccm"))
    got = download(wheel, tmp_path / "got")
    assert got.read_bytes() == (team / wheel.filename).read_bytes()
    bad = type(wheel)(wheel.filename, wheel.url, "0" * 64)
    with pytest.raises(SourceError, match="is not the index's"):
        download(bad, tmp_path / "bad")
    assert not any((tmp_path / "bad").iterdir())          # nothing half-written left


def test_a_directory_without_wheels_or_index_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no wheels and no simple index"):
        list_wheels(str(tmp_path))
    with pytest.raises(SourceError, match="cannot be read"):
        list_wheels("http://127.0.0.1:9/simple/")
