"""Unit tests of the patch engine on small, synthetic patch sets (milliseconds each)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuforge.core.errors import ConfigError, PatchError
from cuforge.patching import PatchStatus, apply, check, load_patch_set, render, revert
from cuforge.patching.commands import run_patch_command
from cuforge.patching.store import STORE_DIRNAME

MANIFEST = '''
[set]
name = "demo"
description = "test set"

[[patch]]
id = "swap-call"
kind = "replace_text"
file = "src/kernel.cu"
find = "Reduce(x, cub::Max());"
replace = "Reduce(x, cuda::maximum<>{});  // cuforge: cub::Max is gone"
why = "CCCL 3 removed cub::Max."

[[patch]]
id = "cstdint"
kind = "insert_include"
file = "src/impl.h"
include = "#include <cstdint>"
after = "#include <vector>"
note = "uint32_t is used"
why = "gcc 13 no longer pulls in <cstdint>."

[[patch]]
id = "abi-header"
kind = "insert_file"
file = "src/force_abi.h"
payload = "payload/force_abi.h"
why = "force the ABI"

[[patch]]
id = "abi-first"
kind = "insert_include"
file = "src/binding.cpp"
include = '#include "force_abi.h"'
note = "first"
why = "must come first"
'''

KERNEL = "int main() {\n    y = Reduce(x, cub::Max());\n}\n"
IMPL = "#pragma once\n#include <vector>\n\nuint32_t f();\n"
BINDING = "#include <string>\nint g();\n"


def make_set(tmp_path: Path, manifest: str = MANIFEST) -> Path:
    """Write the demo patch set; return the patches directory."""
    directory = tmp_path / "patches" / "demo"
    (directory / "payload").mkdir(parents=True)
    (directory / "patch.toml").write_text(manifest)
    (directory / "payload" / "force_abi.h").write_text("#define _GLIBCXX_USE_CXX11_ABI 1\n")
    return tmp_path / "patches"


def make_tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "src").mkdir(parents=True)
    (root / "src" / "kernel.cu").write_text(KERNEL)
    (root / "src" / "impl.h").write_text(IMPL)
    (root / "src" / "binding.cpp").write_text(BINDING)
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under root (the backup store included), by relative path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def demo(tmp_path: Path):
    return load_patch_set("demo", make_set(tmp_path)), make_tree(tmp_path)


def statuses(results) -> dict[str, PatchStatus]:
    return {r.patch_id: r.status for r in results}


def test_check_reports_not_applied_then_applied(demo) -> None:
    ps, root = demo
    assert set(statuses(check(ps, root)).values()) == {PatchStatus.NOT_APPLIED}
    apply(ps, root)
    assert set(statuses(check(ps, root)).values()) == {PatchStatus.APPLIED}


def test_apply_edits_files(demo) -> None:
    ps, root = demo
    apply(ps, root)
    assert "cuda::maximum<>{}" in (root / "src/kernel.cu").read_text()
    impl = (root / "src/impl.h").read_text().splitlines()
    assert impl[2] == "#include <cstdint>  // cuforge: uint32_t is used"
    binding = (root / "src/binding.cpp").read_text().splitlines()
    assert binding[0].startswith('#include "force_abi.h"')
    assert (root / "src/force_abi.h").read_text() == "#define _GLIBCXX_USE_CXX11_ABI 1\n"


def test_second_apply_changes_nothing_and_says_so(demo) -> None:
    ps, root = demo
    apply(ps, root)
    before = snapshot(root)
    results = apply(ps, root)
    assert snapshot(root) == before
    assert {r.action for r in results} == {"already applied"}
    assert not any(r.changed for r in results)


def test_revert_restores_original_bytes_exactly(demo) -> None:
    ps, root = demo
    before = snapshot(root)
    apply(ps, root)
    results = revert(ps, root)
    assert {r.action for r in results} == {"reverted"}
    assert snapshot(root) == before  # the added file and the backup store are gone too
    assert not (root / STORE_DIRNAME).exists()


def test_dry_run_writes_nothing(demo) -> None:
    ps, root = demo
    before = snapshot(root)
    results = apply(ps, root, dry_run=True)
    assert {r.action for r in results} == {"would apply"}
    assert snapshot(root) == before
    apply(ps, root)
    patched = snapshot(root)
    assert {r.action for r in revert(ps, root, dry_run=True)} == {"would revert"}
    assert snapshot(root) == patched


def test_drift_raises_names_file_and_snippet_and_writes_nothing(demo) -> None:
    ps, root = demo
    (root / "src/kernel.cu").write_text("y = Reduce(x, SomethingElse());\n")
    before = snapshot(root)
    with pytest.raises(PatchError) as err:
        apply(ps, root)
    message = str(err.value)
    assert "src/kernel.cu" in message and "Reduce(x, cub::Max());" in message
    assert "nothing was written" in message
    assert snapshot(root) == before  # not even the other, matching files
    assert statuses(check(ps, root))["swap-call"] is PatchStatus.DRIFTED


def test_snippet_must_occur_exactly_once(demo) -> None:
    ps, root = demo
    (root / "src/kernel.cu").write_text(KERNEL + KERNEL)
    with pytest.raises(PatchError, match="occurs 2 times"):
        apply(ps, root)


def test_a_repeated_snippet_is_replaced_everywhere_when_the_patch_says_how_often(
        tmp_path: Path) -> None:
    """``occurrences = N``: upstream repeats the line word for word (spconv's three sorts);
    each copy is replaced, a revert restores each, and another count is drift."""
    manifest = MANIFEST.replace('why = "CCCL 3 removed cub::Max."',
                                'why = "CCCL 3 removed cub::Max."\noccurrences = 2', 1)
    ps, root = load_patch_set("demo", make_set(tmp_path, manifest)), make_tree(tmp_path)
    before = KERNEL + KERNEL
    (root / "src/kernel.cu").write_text(before)
    apply(ps, root)
    after = (root / "src/kernel.cu").read_text()
    assert after.count("cuda::maximum<>{}") == 2 and "cub::Max()" not in after
    assert statuses(check(ps, root))["swap-call"] is PatchStatus.APPLIED
    revert(ps, root)
    assert (root / "src/kernel.cu").read_text() == before
    (root / "src/kernel.cu").write_text(KERNEL * 3)
    with pytest.raises(PatchError, match="occurs 3 times; cuforge needs exactly 2"):
        apply(ps, root)


@pytest.mark.parametrize("bad", ["0", "1.5", "true", '"2"'])
def test_occurrences_is_a_whole_number_from_one(tmp_path: Path, bad: str) -> None:
    manifest = MANIFEST.replace('why = "CCCL 3 removed cub::Max."',
                                f'why = "CCCL 3 removed cub::Max."\noccurrences = {bad}', 1)
    with pytest.raises(ConfigError, match="'occurrences' is how many times the snippet occurs"):
        load_patch_set("demo", make_set(tmp_path, manifest))


def test_revert_keeps_later_user_edits(demo) -> None:
    """After cuforge patched a file and the user edited it, revert undoes only cuforge's edit."""
    ps, root = demo
    apply(ps, root)
    kernel = root / "src/kernel.cu"
    kernel.write_text(kernel.read_text() + "// my note\n")
    revert(ps, root)
    assert kernel.read_text() == KERNEL + "// my note\n"


def test_revert_without_backup_reverses_text_edits(demo) -> None:
    ps, root = demo
    before = snapshot(root)
    apply(ps, root)
    import shutil

    shutil.rmtree(root / STORE_DIRNAME)
    revert(ps, root)
    assert snapshot(root) == before


def test_crlf_files_are_patched_in_their_style(demo) -> None:
    ps, root = demo
    original = IMPL.replace("\n", "\r\n").encode()
    (root / "src/impl.h").write_bytes(original)
    apply(ps, root)
    assert b"#include <cstdint>  // cuforge: uint32_t is used\r\n" in (root / "src/impl.h").read_bytes()
    revert(ps, root)
    assert (root / "src/impl.h").read_bytes() == original


def test_include_already_upstream_is_not_needed(demo) -> None:
    ps, root = demo
    (root / "src/impl.h").write_text(IMPL.replace("#include <vector>", "#include <vector>\n#include <cstdint> // fixed"))
    before = (root / "src/impl.h").read_bytes()
    results = apply(ps, root)
    assert statuses(results)["cstdint"] is PatchStatus.NOT_NEEDED
    assert (root / "src/impl.h").read_bytes() == before
    revert(ps, root)
    assert (root / "src/impl.h").read_bytes() == before  # upstream's own include stays


def test_existing_different_file_is_drift(demo) -> None:
    ps, root = demo
    (root / "src/force_abi.h").write_text("// someone else's fix\n")
    with pytest.raises(PatchError, match="force_abi.h"):
        apply(ps, root)


def test_variants_fixed_if_and_optional(tmp_path: Path) -> None:
    manifest = '''
[set]
name = "demo"

[[patch]]
id = "flags"
kind = "replace_text"
file = "setup.py"
why = "two upstream spellings"
[[patch.variant]]
find = 'args=["-I" + glm]'
replace = 'include_dirs=[glm], args=[]  # cuforge: a'
[[patch.variant]]
find = 'args=["-X", "-I" + glm]'
replace = 'include_dirs=[glm], args=["-X"]  # cuforge: b'

[[patch]]
id = "ptr"
kind = "replace_text"
file = "spatial.cu"
find = "x.data<float>()"
replace = "x.data_ptr<float>()  /* cuforge */"
fixed_if = ".data_ptr<float>()"
why = "removed API"

[[patch]]
id = "maybe"
kind = "replace_text"
file = "extra/hooks.py"
find = "np.in1d("
replace = "np.isin(  # cuforge"
optional = true
why = "only in newer checkouts"
'''
    ps = load_patch_set("demo", make_set(tmp_path, manifest))
    root = tmp_path / "tree2"
    root.mkdir()
    (root / "setup.py").write_text('setup(args=["-X", "-I" + glm])\n')
    (root / "spatial.cu").write_text("f(x.data_ptr<float>());\n")
    results = statuses(apply(ps, root))
    assert results == {"flags": PatchStatus.NOT_APPLIED, "ptr": PatchStatus.NOT_NEEDED, "maybe": PatchStatus.NOT_NEEDED}
    assert (root / "setup.py").read_text() == 'setup(include_dirs=[glm], args=["-X"]  # cuforge: b)\n'


def test_render_makes_a_table(demo) -> None:
    ps, root = demo
    table = render(check(ps, root))
    assert table.row_count == len(ps.patches)


def test_run_patch_command(demo, capsys) -> None:
    ps, root = demo
    patches_dir = ps.directory.parent
    assert run_patch_command("demo", root, check=False, revert=False, dry_run=False, patches_dir=patches_dir) == 0
    assert run_patch_command("demo", root, check=False, revert=False, dry_run=False, patches_dir=patches_dir) == 0
    assert "nothing changed" in capsys.readouterr().out
    assert run_patch_command("demo", root, check=True, revert=False, dry_run=False, patches_dir=patches_dir) == 0
    (root / "src/kernel.cu").write_text("changed upstream\n")
    with pytest.raises(PatchError, match="drifted"):
        run_patch_command("demo", root, check=True, revert=False, dry_run=False, patches_dir=patches_dir)


def test_check_calls_a_missing_file_missing_and_names_a_real_command(demo, capsys) -> None:
    """Issue 50 point 8: a target file not in the tree was "drifted", and the fix said "run
    apply", a command cuforge does not have."""
    ps, root = demo
    (root / "src/kernel.cu").unlink()
    results = check(ps, root)
    gone = [r for r in results if r.file == "src/kernel.cu"]
    assert gone and all(r.status is PatchStatus.MISSING for r in gone)
    assert PatchStatus.DRIFTED not in set(statuses(results).values())
    with pytest.raises(PatchError) as err:
        run_patch_command("demo", root, check=True, revert=False, dry_run=False,
                          patches_dir=ps.directory.parent)
    text = str(err.value)
    assert "missing files (" in text and "src/kernel.cu" in text and "drifted" not in text
    assert "run apply" not in text and "is a demo checkout" in text
    table = capsys.readouterr().out
    assert " missing " in table and "drifted" not in table, table
    (root / "src/kernel.cu").write_text("changed upstream\n")   # a drift names the command
    with pytest.raises(PatchError) as err:
        run_patch_command("demo", root, check=True, revert=False, dry_run=False,
                          patches_dir=ps.directory.parent)
    assert f"`cuforge patch demo {root}` (without --check)" in str(err.value)
    assert "run apply" not in str(err.value)


def test_sets_are_found_through_cuforge_root(tmp_path: Path, monkeypatch) -> None:
    make_set(tmp_path)
    monkeypatch.setenv("CUFORGE_ROOT", str(tmp_path))
    assert load_patch_set("demo").name == "demo"
    with pytest.raises(ConfigError, match="known sets: demo"):
        load_patch_set("nope")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ('why = "CCCL 3 removed cub::Max."', "'why' must be a non-empty string"),
        ('kind = "replace_text"', "unknown kind"),
        ('file = "src/kernel.cu"', "inside the patched tree"),
    ],
)
def test_manifest_errors_are_config_errors(tmp_path: Path, change: str, message: str) -> None:
    bad = {
        "'why' must be a non-empty string": 'why = ""',
        "unknown kind": 'kind = "sed"',
        "inside the patched tree": 'file = "../outside.cu"',
    }[message]
    with pytest.raises(ConfigError, match=message):
        load_patch_set("demo", make_set(tmp_path, MANIFEST.replace(change, bad, 1)))


def test_replacement_must_be_recognisable(tmp_path: Path) -> None:
    manifest = MANIFEST.replace(
        'replace = "Reduce(x, cuda::maximum<>{});  // cuforge: cub::Max is gone"',
        'replace = "Reduce(x, cub::Max()); // extra"',
    )
    with pytest.raises(ConfigError, match="recognisable"):
        load_patch_set("demo", make_set(tmp_path, manifest))
