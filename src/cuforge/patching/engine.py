"""apply / check / revert: the three operations on a patch set and a tree.

All three read every target file first and decide everything before writing anything. If any
patch has drifted (neither its original nor its patched text is in the file), nothing is written
and a :class:`~cuforge.core.errors.PatchError` names each drifted file and what was expected.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from cuforge.core.errors import ConfigError, PatchError
from cuforge.patching.model import Patch, PatchResult, PatchSet, PatchProbe, PatchStatus
from cuforge.patching.store import (STORE_DIRNAME, BackupStore, FileRecord, commit, read_bytes,
                                    sha256)

UNMATCHED = (PatchStatus.DRIFTED, PatchStatus.MISSING)   # nothing is written while one is
_ENCODING = "utf-8"
_ERRORS = "surrogateescape"  # odd bytes survive a decode/encode round trip unchanged


def _decode(data: bytes | None) -> str | None:
    return None if data is None else data.decode(_ENCODING, _ERRORS)


def _encode(text: str | None) -> bytes | None:
    return None if text is None else text.encode(_ENCODING, _ERRORS)


def _probe(patch: Patch, text: str | None) -> PatchProbe:
    """Probe one patch; an optional patch whose target is absent is *not needed*, not drifted."""
    probe = patch.op.probe(text)
    if patch.optional and probe.status in UNMATCHED:
        return PatchProbe(PatchStatus.NOT_NEEDED, f"optional, target not found: {probe.detail}")
    return probe


def _result(ps: PatchSet, patch: Patch, probe: PatchProbe, action: str) -> PatchResult:
    return PatchResult(
        set_name=ps.name,
        patch_id=patch.id,
        file=patch.file,
        kind=patch.kind,
        status=probe.status,
        action=action,
        detail=probe.detail,
        why=patch.why,
    )


@dataclass(frozen=True)
class _NothingFound:
    """Stands for a glob patch that concerns no file of the tree: one "not needed" row."""

    glob: str
    what: str
    kind: str

    def probe(self, text: str | None) -> PatchProbe:
        return PatchProbe(PatchStatus.NOT_NEEDED, f"no file matching {self.glob} has {self.what}")

    def forward(self, text: str | None) -> str | None:
        return text

    def reverse(self, text: str) -> str | None:
        return text

    def expected(self) -> str:
        return self.what


def _tree_files(root: Path, pattern: str) -> list[str]:
    """Files under ``root`` matching ``pattern``, outside hidden dirs (.git, the backup store)."""
    found = []
    for path in root.glob(pattern):
        rel = path.relative_to(root)
        if path.is_file() and not any(p.startswith(".") or p == "__pycache__" for p in rel.parts):
            found.append(rel.as_posix())
    return sorted(found)


def expand(ps: PatchSet, root: Path | str) -> PatchSet:
    """``ps`` with each glob patch replaced by one patch per file it concerns: a use to rewrite
    or its own marker, found by the operation itself (an AST walk). A glob that concerns
    nothing stays as one "not needed" row."""
    if not any(p.glob for p in ps.patches):
        return ps
    path = Path(root).resolve()
    patches: list[Patch] = []
    for patch in ps.patches:
        if not patch.glob:
            patches.append(patch)
            continue
        files = _tree_files(path, patch.file) if path.is_dir() else []
        hits = [f for f in files if patch.op.concerns(_decode(read_bytes(path / f)))]
        patches += [replace(patch, file=f, glob=False) for f in hits]
        if not hits:
            what = patch.op.expected()
            patches.append(replace(patch, op=_NothingFound(patch.file, what, patch.kind),
                                   glob=False))
    return replace(ps, patches=tuple(patches))


@dataclass
class _Tree:
    """A snapshot of the target files of one patch set in one tree."""

    root: Path
    before: dict[str, bytes | None]

    @classmethod
    def read(cls, ps: PatchSet, root: Path | str) -> _Tree:
        path = Path(root).resolve()
        if not path.is_dir():
            raise ConfigError(f"{path} is not a directory", hint="pass the root of the checkout")
        for file in (*ps.files(), STORE_DIRNAME):
            _inside(path, file)
        return cls(path, {f: read_bytes(path / f) for f in ps.files()})

    def text(self, file: str) -> str | None:
        return _decode(self.before[file])


def _inside(root: Path, file: str) -> None:
    """Refuse a target that resolves outside ``root``: ``..`` or a symlink in the checkout
    pointing elsewhere would make a patch write into the user's system."""
    target = (root / file).resolve()
    if not target.is_relative_to(root):
        raise PatchError(f"{file} in {root} resolves to {target}, outside the checkout "
                         "(a symlink or '..'); nothing was written",
                         hint="remove that symlink from the source tree, or fix the patch's "
                         "`file`")


def _raise_on_drift(ps: PatchSet, tree: _Tree, probes: list[tuple[Patch, PatchProbe]]) -> None:
    """Raise one PatchError listing every drifted patch: file, reason and expected text."""
    drifted = [(p, pr) for p, pr in probes if pr.status in UNMATCHED]
    if not drifted:
        return
    lines = [
        f"patch set {ps.name!r} does not match {tree.root}; nothing was written.",
        *(
            f"  - {p.file} [{p.id}]: {pr.detail}\n    expected {p.op.expected()}"
            for p, pr in drifted
        ),
    ]
    gone = any(pr.status is PatchStatus.MISSING for _, pr in drifted)
    raise PatchError(
        "\n".join(lines),
        hint=("a file is missing: is this the tree the set is for? " if gone else "")
        + "the upstream files changed: check the pinned commit, or update the patch set",
    )


def check(ps: PatchSet, root: Path | str) -> list[PatchResult]:
    """Report, per patch, whether it is applied, not applied, drifted or not needed."""
    ps = expand(ps, root)
    tree = _Tree.read(ps, root)
    return [_result(ps, p, _probe(p, tree.text(p.file)), "") for p in ps.patches]


def _forward_file(patches: list[Patch], text: str | None) -> str | None:
    """Apply the not-applied patches of one file in order, verifying each recognises its result."""
    for patch in patches:
        if _probe(patch, text).status is not PatchStatus.NOT_APPLIED:
            continue
        text = patch.op.forward(text)
        after = _probe(patch, text)
        if after.status is not PatchStatus.APPLIED:
            raise PatchError(
                f"internal: patch {patch.id!r} does not recognise its own result in {patch.file} "
                f"({after.status.value}: {after.detail}); nothing was written"
            )
    return text


def apply(ps: PatchSet, root: Path | str, dry_run: bool = False) -> list[PatchResult]:
    """Apply every not-yet-applied patch; a second apply changes nothing and says so."""
    ps = expand(ps, root)
    tree = _Tree.read(ps, root)
    probes = [(p, _probe(p, tree.text(p.file))) for p in ps.patches]
    _raise_on_drift(ps, tree, probes)

    after: dict[str, bytes | None] = {}
    for file in ps.files():
        new = _forward_file([p for p in ps.patches if p.file == file], tree.text(file))
        after[file] = _encode(new)
    changed = {f: data for f, data in after.items() if data != tree.before[f]}

    if changed and not dry_run:
        commit(_apply_changes(ps, tree, changed))

    verb = "would apply" if dry_run else "applied"
    actions = {
        PatchStatus.APPLIED: "already applied",
        PatchStatus.NOT_APPLIED: verb,
        PatchStatus.NOT_NEEDED: "nothing to do",
    }
    return [_result(ps, p, pr, actions[pr.status]) for p, pr in probes]


def _apply_changes(ps: PatchSet, tree: _Tree, changed: dict[str, bytes | None]) -> dict:
    """The writes of an apply: originals into the store first, then the files, then the state."""
    store = BackupStore(tree.root, ps.name)
    records = store.load()
    writes: dict[Path, bytes | None] = {}
    for file, data in changed.items():
        assert data is not None  # apply never deletes
        record = records.get(file)
        if record is None:
            original = tree.before[file]
            if original is not None:
                writes[store.original_path(file)] = original
            records[file] = FileRecord(sha256(original), sha256(data) or "")
        else:  # patched before (e.g. a set that grew): keep the first original
            record.patched_sha256 = sha256(data) or ""
        writes[tree.root / file] = data
    writes[store.ignore_file()] = b"*\n"
    writes[store.state_path] = store.state_bytes(records)
    return writes


def _reverse_text(patches: list[Patch], text: str | None, file: str) -> str | None:
    """Undo the applied patches of one file textually, last applied first."""
    for patch in reversed(patches):
        if text is None or _probe(patch, text).status is not PatchStatus.APPLIED:
            continue
        text = patch.op.reverse(text)
    return text


def revert(ps: PatchSet, root: Path | str, dry_run: bool = False) -> list[PatchResult]:
    """Undo the set: restore the original bytes from the backup store, or reverse the edits."""
    ps = expand(ps, root)
    tree = _Tree.read(ps, root)
    store = BackupStore(tree.root, ps.name)
    records = store.load()
    probes = [(p, _probe(p, tree.text(p.file))) for p in ps.patches]

    after: dict[str, bytes | None] = {}
    textual: list[str] = []
    for file in ps.files():
        record, current = records.get(file), tree.before[file]
        if record is not None and sha256(current) == record.patched_sha256:
            after[file] = store.original(file) if record.original_sha256 else None
        elif record is not None and sha256(current) == record.original_sha256:
            after[file] = current
        else:
            textual.append(file)
    _raise_on_drift(ps, tree, [(p, pr) for p, pr in probes if p.file in textual])
    for file in textual:
        patches = [p for p in ps.patches if p.file == file]
        after[file] = _encode(_reverse_text(patches, tree.text(file), file))

    changed = {f: data for f, data in after.items() if data != tree.before[f]}
    stale = [f for f in ps.files() if f in records]
    if (changed or stale) and not dry_run:
        writes: dict[Path, bytes | None] = {tree.root / f: d for f, d in changed.items()}
        for file in stale:
            writes[store.original_path(file)] = None
            del records[file]
        writes[store.state_path] = store.state_bytes(records)
        commit(writes)
        store.prune()

    verb = "would revert" if dry_run else "reverted"
    results = []
    for patch, probe in probes:
        touched = patch.file in changed and probe.status is PatchStatus.APPLIED
        results.append(_result(ps, patch, probe, verb if touched else "nothing to do"))
    return results
