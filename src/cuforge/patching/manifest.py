"""Load a patch set from ``patches/<name>/patch.toml``.

The manifest format (see ``docs/patches.md``)::

    [set]
    name = "milo"
    description = "Runtime fixes for an Anttwo/MILo checkout"

    [[patch]]
    id = "tetra-force-abi-header"      # unique within the set
    kind = "insert_file"               # replace_text | insert_include | insert_file | replace_function
                                       # | rename_attribute | include_where_used | replace_pattern
    file = "submodules/tetra_triangulation/src/force_abi.h"   # relative to the patched tree
    # files = "**/*.py"                # the glob kinds: every file it concerns (GLOB_KINDS)
    payload = "payload/force_abi.h"    # relative to the patch set directory
    why = "..."                        # required: a note for people
    optional = false                   # true: a missing target is "not needed", not drift
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from cuforge.core.errors import ConfigError, PatchError
from cuforge.core.tomlfile import read_toml
from cuforge.patching.model import Operation, Patch, PatchSet
from cuforge.patching.pyattr import RenameAttribute
from cuforge.patching.pyfunc import ReplaceFunction
from cuforge.patching.textops import (IncludeWhereUsed, InsertFile, InsertInclude,
                                      ReplacePattern, ReplaceText, Variant)

# kinds that name a glob (``files``) and find the files they concern themselves
GLOB_KINDS = ("rename_attribute", "include_where_used", "replace_pattern")

MANIFEST = "patch.toml"


def default_patches_dir() -> Path:
    """``$CUFORGE_ROOT/patches``, or ``./patches`` when CUFORGE_ROOT is unset."""
    return Path(os.environ.get("CUFORGE_ROOT", Path.cwd())) / "patches"


def available_sets(patches_dir: Path) -> list[str]:
    """Names of the patch sets under ``patches_dir``."""
    if not patches_dir.is_dir():
        return []
    return sorted(p.parent.name for p in patches_dir.glob(f"*/{MANIFEST}"))


def check_named_sets(patches_dir: Path, names: tuple[str, ...], owner: str, fix: str) -> None:
    """The patch sets ``owner`` names exist under ``patches_dir`` and each patch targets a path
    inside the tree (read as TOML only: the full load happens when a set is applied)."""
    for name in names:
        path = patches_dir / name / MANIFEST
        if not path.is_file():
            known = ", ".join(available_sets(patches_dir)) or "none"
            raise ConfigError(f"{owner} names patch set {name!r}, which does not exist under "
                              f"{patches_dir}", hint=f"{fix} (known sets: {known}) or add "
                              f"patches/{name}/{MANIFEST}")
        for i, table in enumerate(read_toml(path, "patch set").get("patch", [])):
            for key in ("file", "files"):
                if isinstance(table.get(key), str):
                    check_target(table[key], key, f"{path} patch {table.get('id', i + 1)!r}")


def _resolve(name_or_path: str | Path, patches_dir: Path | None) -> Path:
    """Find the directory of a patch set given its name or a path to it (or to its manifest)."""
    candidate = Path(name_or_path)
    if candidate.is_file() and candidate.name == MANIFEST:
        return candidate.parent
    if (candidate / MANIFEST).is_file() and (candidate.is_absolute() or os.sep in str(name_or_path)):
        return candidate
    base = patches_dir if patches_dir is not None else default_patches_dir()
    if (base / str(name_or_path) / MANIFEST).is_file():
        return base / str(name_or_path)
    known = ", ".join(available_sets(base)) or "none"
    raise ConfigError(
        f"no patch set named {str(name_or_path)!r} under {base}",
        hint=f"known sets: {known}; set CUFORGE_ROOT to the cuforge checkout",
    )


def _text(table: dict[str, Any], key: str, where: str) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: '{key}' must be a non-empty string")
    return value


def _payload(directory: Path, table: dict[str, Any], where: str) -> str:
    """Read the payload file named by ``payload`` (relative to the set directory)."""
    path = directory / _text(table, "payload", where)
    if not path.is_file():
        raise ConfigError(f"{where}: payload file {path} does not exist")
    return path.read_text(encoding="utf-8")


def _variants(directory: Path, table: dict[str, Any], where: str) -> tuple[Variant, ...]:
    """A replace_text patch has ``find``/``replace`` or a list of ``[[patch.variant]]`` tables."""
    tables = table.get("variant") or [table]
    variants = []
    for i, item in enumerate(tables):
        label = f"{where} variant {i + 1}" if "variant" in table else where
        replace = item.get("replace")
        if replace is None and "replace_payload" in item:
            replace = (directory / item["replace_payload"]).read_text(encoding="utf-8")
        if not isinstance(replace, str):
            raise ConfigError(f"{label}: 'replace' (or 'replace_payload') is required")
        find = _text(item, "find", label)
        if "cuforge" not in replace and find in replace:
            raise ConfigError(f"{label}: the replacement must be recognisable (add a cuforge: marker)")
        variants.append(Variant(find=find, replace=replace))
    return tuple(variants)


def _operation(directory: Path, table: dict[str, Any], where: str) -> Operation:
    """Build the operation object for one ``[[patch]]`` table."""
    kind = _text(table, "kind", where)
    if kind == "replace_text":
        occurrences = table.get("occurrences", 1)
        if not isinstance(occurrences, int) or isinstance(occurrences, bool) or occurrences < 1:
            raise ConfigError(f"{where}: 'occurrences' is how many times the snippet occurs, "
                              f"a whole number from 1, not {occurrences!r}")
        return ReplaceText(_variants(directory, table, where), fixed_if=table.get("fixed_if"),
                           occurrences=occurrences)
    if kind == "insert_include":
        return InsertInclude(
            include=_text(table, "include", where),
            note=_text(table, "note", where),
            after=table.get("after"),
        )
    if kind == "include_where_used":
        uses, unless = _text(table, "uses", where), str(table.get("unless", ""))
        _regex(uses, "uses", where)
        _regex(unless, "unless", where)
        return IncludeWhereUsed(include=_text(table, "include", where),
                                note=_text(table, "note", where), uses=uses, unless=unless)
    if kind == "replace_pattern":
        pattern, replace = _text(table, "pattern", where), _text(table, "replace", where)
        _regex(pattern, "pattern", where)
        return ReplacePattern(pattern, replace)
    if kind == "insert_file":
        return InsertFile(_payload(directory, table, where))
    if kind == "replace_function":
        try:
            return ReplaceFunction(
                qualname=_text(table, "function", where),
                payload=_payload(directory, table, where),
                original_sha256=_text(table, "original_sha256", where),
            )
        except (SyntaxError, PatchError) as err:
            raise ConfigError(f"{where}: bad payload: {err}") from err
    if kind == "rename_attribute":
        note = _text(table, "note", where)
        if not note.startswith("cuforge:"):
            raise ConfigError(f"{where}: 'note' must start with 'cuforge:' (it marks the result)")
        return RenameAttribute(_text(table, "module", where), _text(table, "old", where),
                               _text(table, "new", where), note)
    raise ConfigError(
        f"{where}: unknown kind {kind!r}",
        hint="use replace_text, insert_include, insert_file, replace_function, rename_attribute, "
             "include_where_used or replace_pattern",
    )


def _regex(text: str, key: str, where: str) -> None:
    try:
        re.compile(text)
    except re.error as err:
        raise ConfigError(f"{where}: '{key}' is not a regular expression: {err}") from None


def check_target(file: str, key: str, where: str) -> None:
    """A patch's ``file`` (or ``files`` glob) names a path inside the patched tree."""
    if Path(file).is_absolute() or ".." in Path(file).parts:
        raise ConfigError(f"{where}: '{key}' must be a path inside the patched tree, got {file!r}",
                          hint="write it relative to the tree's root, without '..'")


def _patch(directory: Path, table: dict[str, Any], index: int) -> Patch:
    where = f"{directory / MANIFEST} patch {index + 1}"
    patch_id = _text(table, "id", where)
    where = f"{directory / MANIFEST} patch {patch_id!r}"
    is_glob = table.get("kind") in GLOB_KINDS
    key = "files" if is_glob else "file"
    file = _text(table, key, where)
    check_target(file, key, where)
    return Patch(
        id=patch_id,
        file=file,
        why=_text(table, "why", where).strip(),
        op=_operation(directory, table, where),
        optional=bool(table.get("optional", False)),
        glob=is_glob,
    )


def load_patch_set(name_or_path: str | Path, patches_dir: Path | None = None) -> PatchSet:
    """Load and validate a patch set by name (under ``patches_dir``) or by path."""
    directory = _resolve(name_or_path, patches_dir)
    data = read_toml(directory / MANIFEST, "patch set")
    header = data.get("set", {})
    patches = tuple(_patch(directory, t, i) for i, t in enumerate(data.get("patch", [])))
    if not patches:
        raise ConfigError(f"{directory / MANIFEST} defines no [[patch]] entries")
    ids = [p.id for p in patches]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ConfigError(f"{directory / MANIFEST}: duplicate patch ids {duplicates}")
    return PatchSet(
        name=header.get("name", directory.name),
        description=header.get("description", ""),
        directory=directory,
        patches=patches,
    )
