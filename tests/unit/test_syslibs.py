import pytest

from cuforge.core.errors import ToolchainError
from cuforge.config.recipes import Recipe, Source, SystemHeader
from cuforge.env.syslibs import missing_headers, require_headers


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


def test_a_cross_build_looks_for_headers_in_the_target_root_not_on_this_machine(tmp_path,
                                                                                monkeypatch):
    """The cross compiler runs with --sysroot=<root>: this machine's /usr/include is not on
    its path, so a header there does not count, and the hint names the emulation root."""
    monkeypatch.delenv("CPATH", raising=False)
    root = tmp_path / "root"
    (root / "usr/include").mkdir(parents=True)
    stdio = SystemHeader("stdio.h", "libc6-dev")     # on this machine, not in the root yet
    assert missing_headers(_recipe(stdio)) == []
    assert missing_headers(_recipe(stdio), root) == [stdio]
    with pytest.raises(ToolchainError) as err:
        require_headers(_recipe(stdio), root)
    assert str(root) in str(err.value) and "envs/emulation.toml" in err.value.hint
    (root / "usr/include/stdio.h").write_text("/* the target's */\n")
    assert missing_headers(_recipe(stdio), root) == []
