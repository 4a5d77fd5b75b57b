"""Entering the emulation root as the target (cuforge.env.rootrun), without entering it: the
native toolchain as the table declares it, paths seen the way the chroot sees them (real
symlinks in a real directory tree), and what the entry shows of the host and passes in."""


from cuforge.env import emulation, emulation_setup, rootrun
from root_paths import host_path
from cuforge.config.combos import load_combos
from cuforge.core.project import find_project


def _aarch64() -> emulation.Emulator:
    return emulation.load(find_project())["linux-aarch64"]


def test_native_toolchain_is_the_roots_suite_and_architecture_with_a_shell_and_venv():
    emu = _aarch64()
    assert emu.toolchain is not None
    assert (emu.toolchain.suite, emu.toolchain.arch) == (emu.root.suite, emu.root.arch)
    assert {"g++", "binutils", "dash", "python3.11-venv"} <= set(emu.toolchain.packages)
    assert emu.toolchain_links["bin/sh"] == "dash"       # nvcc runs its steps through /bin/sh


def test_spark_311_is_the_spark_combo_with_the_roots_python_and_no_emulation():
    combos = {c.id: c for c in load_combos(find_project())}
    near, spark = combos["spark-3.11"], combos["spark"]
    assert near.python in _aarch64().pythons and not near.emulate and not near.host_cxx
    assert (near.target_platform, near.accel, str(near.arches)) == (
        spark.target_platform, spark.accel, str(spark.arches))


def test_host_path_follows_links_as_the_root_sees_them(tmp_path):
    root, bound = tmp_path / "root", tmp_path / "proj"
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "bin").mkdir()
    (root / "usr" / "bin" / "python3.11").write_text("target python")
    (root / "bin" / "dash").write_text("target dash")
    (root / "bin" / "sh").symlink_to("dash")
    (bound / "venv" / "bin").mkdir(parents=True)
    # an absolute link in a bound dir means the root's file, not the host's /usr/bin
    (bound / "venv" / "bin" / "python").symlink_to("/usr/bin/python3.11")
    e = rootrun.RootEntry(str(root), (str(bound),), str(bound), ("true",), {})
    assert host_path(e, f"{bound}/venv/bin/python").read_text() == "target python"
    assert host_path(e, "venv/bin/python").read_text() == "target python"
    assert host_path(e, "/bin/sh") == root / "bin" / "dash"
    assert host_path(e, f"{bound}/venv/../venv/bin") == bound / "venv" / "bin"


def test_entry_shows_the_project_and_data_and_passes_no_host_path(tmp_path, monkeypatch):
    project = find_project()
    monkeypatch.setenv("PATH", "/host/only/bin:/usr/bin")
    monkeypatch.setenv("LD_LIBRARY_PATH", "/host/lib")
    monkeypatch.setenv("CUFORGE_WHEELHOUSE", str(tmp_path))
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path))
    e = rootrun.entry(project.state_dir, _aarch64(), project.root, ["cuforge", "build"])
    here = str(project.root.resolve())
    assert "/tmp" in e.binds and any(here == b or here.startswith(b + "/") for b in e.binds)
    assert e.env["PATH"] == rootrun.PATH                # the target's programs only
    assert "LD_LIBRARY_PATH" not in e.env
    assert e.env["CUFORGE_WHEELHOUSE"] == e.env["UV_CACHE_DIR"] == str(tmp_path)
    assert e.root == str(_aarch64().root_dir(project.state_dir).resolve())
    assert rootrun.command(e)[:5] == ["unshare", "--mount", "--propagation", "private",
                                          "--fork"]


def test_unusable_names_what_is_missing(tmp_path):
    emu = _aarch64()
    why = rootrun.unusable(tmp_path / "state", emu)
    if emulation_setup.registered_emulators(emu):
        assert "no native toolchain yet" in why and str(tmp_path) in why
    else:
        assert why == "no binfmt_misc registration runs linux-aarch64 programs"


def test_a_local_simple_index_is_shown_with_the_files_it_links_beside_it(tmp_path):
    """This machine's mirror is file:///opt/pypi/simple, whose pages link ../files/*.whl: with
    only simple/ bound, uv in the root failed to open the wheels (CI, the Spark-path test)."""
    mirror = tmp_path / "pypi"
    (mirror / "simple").mkdir(parents=True)
    (mirror / "files").mkdir()
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    found = rootrun.local_indexes({"UV_EXTRA_INDEX_URL": f"file://{mirror}/simple/ https://x/",
                                   "PIP_FIND_LINKS": str(wheels), "HOME": str(tmp_path)})
    assert found == [str(mirror), str(wheels)]
