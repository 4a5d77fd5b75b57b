"""``cuforge stack new CHECKOUT``: what discovery found in a checkout, written as a stack file
(``stacks/NAME.toml``) a lab can review and commit. ``cuforge setup NAME --checkout PATH``
then plans the same build from the file (its ``[[package]]`` tables: folder, kind, modules,
field fixes, required or not), without walking the checkout again, and installs the
requirements the file lists."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

from cuforge.config.stacks import CheckoutRequirement
from cuforge.core.errors import CuforgeError
from cuforge.core.runner import capture
from cuforge.discovery.scan import Discovery


def origin(root: Path) -> str:
    """The checkout's ``origin`` URL, "" when it has none (an archive, no remote)."""
    try:
        return capture(["git", "-C", str(root), "remote", "get-url", "origin"]).strip()
    except CuforgeError:
        return ""


def _s(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(value)


def _list(values) -> str:
    return "[" + ", ".join(_s(v) for v in values) + "]"


def stack_text(name: str, seen: Discovery, fixes: dict, required: set[str],
               requirements: tuple[CheckoutRequirement, ...], entry_scripts: tuple[str, ...]) -> str:
    """The stack file of ``seen`` (``fixes``: field fix names per folder; ``required``: the
    folders whose extension the checkout's own build builds)."""
    lines = [f"# Written by `cuforge stack new {seen.root}` on {date.today().isoformat()} from",
             "# what discovery found there; review it and commit it. `cuforge setup "
             f"{name} --checkout PATH`",
             "# builds the [[package]] folders of PATH (a copy: the checkout is never written).",
             "[stack]", f"name = {_s(name)}",
             f"description = {_s(f'the torch extensions of {seen.root.name}')}",
             f"title = {_s(seen.root.name)}"]
    url = origin(seen.root)
    if url:
        lines.append(f"repo = {_s(url)}")
    if entry_scripts:
        lines.append(f"entry_scripts = {_list(entry_scripts)}   # run with --help in the venv")
    for ext in seen.found:
        folder = str(ext.folder)
        lines += ["", "[[package]]", f"name = {_s(ext.build.name)}", f"folder = {_s(folder)}",
                  f"kind = {_s(str(ext.build.kind))}", f"modules = {_list(ext.build.modules)}",
                  f"fixes = {_list(fixes.get(folder, ()))}",
                  f"required = {'true' if folder in required else 'false'}",
                  f"# found by: {ext.why()}"]
    for req in requirements:
        lines += ["", "[[requirement]]", f"spec = {_s(req.spec)}", f"source = {_s(req.source)}"]
    return "\n".join(lines) + "\n"
