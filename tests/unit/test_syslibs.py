import pytest

from cuforge.errors import ToolchainError
from cuforge.recipes import Recipe, Source, SystemHeader
from cuforge.syslibs import missing_headers, require_headers


def _recipe(*headers: SystemHeader) -> Recipe:
    return Recipe(name="pointgroup_ops", kind="setuptools", source=Source(path="x"),
                  system_headers=headers)


def test_missing_header_names_the_debian_package(tmp_path, monkeypatch):
    monkeypatch.setenv("CPATH", str(tmp_path))
    need = SystemHeader("google/dense_hash_map_cuforge_test", "libsparsehash-dev")
    with pytest.raises(ToolchainError) as err:
        require_headers(_recipe(need))
    assert "<google/dense_hash_map_cuforge_test>" in str(err.value)
    assert "apt-get install libsparsehash-dev" in str(err.value)


def test_header_found_on_cpath(tmp_path, monkeypatch):
    (tmp_path / "google").mkdir()
    (tmp_path / "google" / "dense_hash_map_cuforge_test").write_text("// header\n")
    monkeypatch.setenv("CPATH", str(tmp_path))
    need = SystemHeader("google/dense_hash_map_cuforge_test", "libsparsehash-dev")
    assert missing_headers(_recipe(need)) == []
    assert missing_headers(_recipe(SystemHeader("stdio.h", "libc6-dev"))) == []
