"""The checkout's own Python requirements (what MILo's ``requirements.txt`` or Pointcept's README
names), installed into the user's venv by ``setup`` with torch and the stack's wheels held.

- **Where they come from**: a stack names the checkout's requirements file
  (``requirements_file``, read from the user's checkout as it is), or lists them itself
  (``[[requirement]]`` with ``spec`` and ``source``, for a code base without a file).
- **Held**: a constraints file pins torch and every installed stack wheel to the exact version
  in the venv (``-c``, read by pip and uv alike), so no requirement can replace, upgrade or
  downgrade them; torch's version is compared before and after as well.
- **Policy when one cannot be had** (no wheel for this Python or platform, not on the index,
  or it wants another torch): it is named with the reason and a fix, and the others are
  installed. Research code lists more than one model needs (Pointcept's README: wandb,
  transformers, CLIP for PPT): stopping would leave a user with nothing for one package their
  model may never import; the model stage that follows shows whether it was needed.
- **Nothing half-installed**: the set is resolved (``--dry-run``) before anything is installed,
  each requirement alone (side by side) only when the whole set does not resolve, and what
  resolves goes in with one installer call.
- **Indexes**: the installer runs with the user's environment, so pip's configuration
  (``PIP_INDEX_URL``, ``PIP_FIND_LINKS``, ``PIP_NO_INDEX``, pip.conf) and uv's (``UV_INDEX_URL``,
  ``UV_FIND_LINKS``, ``UV_NO_INDEX``) apply as they would to the user's own install;
  ``--find-links DIR`` and ``--no-index`` add to them (a directory of carried wheels, offline).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from cuforge.config.stacks import CheckoutRequirement
from cuforge.core.errors import ConfigError, VerifyError

# ``installer(*args)``: the argv of an install into the venv (uv pip or pip, workstation/installs.py)
Installer = Callable[..., tuple[str, ...]]


@dataclass(frozen=True)
class Missing:
    """A requirement that cannot be had here, with why and what to do."""

    requirement: CheckoutRequirement
    reason: str
    fix: str

    def line(self) -> str:
        r = self.requirement
        return f"{r.spec} (from {r.source}): {self.reason}; fix: {self.fix}"


@dataclass(frozen=True)
class RequirementsOutcome:
    installed: tuple[CheckoutRequirement, ...]
    missing: tuple[Missing, ...]
    would_install: str = ""      # the installer's own list of what it added ("" when nothing)


@dataclass(frozen=True)
class IndexOptions:
    """Where requirements come from besides the user's own index settings."""

    find_links: tuple[Path, ...] = ()
    no_index: bool = False

    def args(self) -> tuple[str, ...]:
        out: list[str] = []
        for d in self.find_links:
            out += ["--find-links", str(d)]
        return (*out, "--no-index") if self.no_index else tuple(out)


def parse_requirements_file(path: Path, label: str) -> list[CheckoutRequirement]:
    """The requirement lines of a requirements file (comments and blank lines skipped).

    Option lines (``-r``, ``-e``, ``--index-url``) are refused by name: the file's own index
    settings would bypass the user's, and an editable install is not a requirement."""
    reqs = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        text = raw.split(" #", 1)[0].strip()
        if not text or text.startswith("#"):
            continue
        where = f"{label}:{number}"
        if text.startswith("-"):
            raise ConfigError(f"{where}: {text!r} is an option, not a requirement; setup "
                              "installs requirement lines only",
                              hint="install it by hand, or pass --no-requirements")
        try:
            Requirement(text)
        except InvalidRequirement as err:
            raise ConfigError(f"{where}: {text!r} is not a requirement: {err}",
                              hint="fix the line, or pass --no-requirements") from None
        reqs.append(CheckoutRequirement(text, where))
    return reqs


def constraints(held: Iterable[tuple[str, str]]) -> list[str]:
    """Constraint lines holding each (name, version) at exactly that version.

    >>> constraints([("torch", "2.11.0+cu130"), ("spconv-cu130", "2.3.8+cu130torch2.11.0")])
    ['torch==2.11.0+cu130', 'spconv-cu130==2.3.8+cu130torch2.11.0']
    """
    return [f"{name}=={version}" for name, version in held]


def install(installer: Installer, reqs: list[CheckoutRequirement], held: list[str],
            index: IndexOptions, *, torch_version: Callable[[], str], python: str,
            platform: str, env: dict[str, str] | None = None) -> RequirementsOutcome:
    """Install ``reqs`` with ``held`` as constraints; the ones that cannot be had are left out
    (``Missing``) and the rest go in with one call. Raises when torch changed anyway.
    ``env``: the installer's environment (under emulation the target's: an sdist's build
    backend runs the venv's aarch64 Python, which QEMU loads from the target root)."""
    if not reqs:
        return RequirementsOutcome((), ())
    before = torch_version()
    with tempfile.TemporaryDirectory(prefix="cuforge-reqs-") as tmp:
        cfile = Path(tmp) / "constraints.txt"
        cfile.write_text("".join(f"{line}\n" for line in held))
        base = ("-c", str(cfile), *index.args())

        def resolves(subset: list[CheckoutRequirement]) -> tuple[bool, str]:
            return _run([*installer("--dry-run", *base, *(r.spec for r in subset))], env)

        ok, _ = resolves(reqs)
        missing: list[Missing] = []
        usable = list(reqs)
        if not ok:   # which cannot be had: each alone, side by side (dry runs write nothing)
            with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
                alone = list(pool.map(lambda r: resolves([r]), reqs))
            missing += [_why(r, said, held, python, platform)
                        for r, (ok_alone, said) in zip(reqs, alone) if not ok_alone]
            usable = [r for r in reqs if r not in {m.requirement for m in missing}]
            together, said = resolves(usable) if usable else (True, "")
            if not together:
                raise ConfigError("the checkout's requirements resolve one by one but not "
                                  f"together: {_resolver_says(said)}",
                                  hint="pin versions that agree in the requirements file, or "
                                  "pass --no-requirements and install them by hand")
        said = ""
        if usable:
            ok, said = _run([*installer(*base, *(r.spec for r in usable))], env)
            if not ok:
                raise ConfigError(f"installing the checkout's requirements failed: "
                                  f"{_resolver_says(said)}", hint="see the installer's message")
    after = torch_version()
    if after != before:   # the constraint should make this impossible: say so if it happens
        raise VerifyError(f"installing the checkout's requirements changed torch {before} -> "
                          f"{after}", hint="recreate the venv (delete it and run setup again)")
    return RequirementsOutcome(tuple(usable), tuple(missing), _added(said))


def _run(argv: list[str], env: dict[str, str] | None = None) -> tuple[bool, str]:
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    return proc.returncode == 0, proc.stdout + proc.stderr


def _why(r: CheckoutRequirement, said: str, held: list[str], python: str,
         platform: str) -> Missing:
    """Why ``r`` does not resolve, from the resolver's own words, and the fix."""
    text = _resolver_says(said)
    lowered = text.lower()
    for line in held:
        name = line.split("==", 1)[0]
        if name != r.name and re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", lowered):
            other = ("a combo with the torch it wants (--combo)" if name == "torch" else
                     f"a {name} built for what it wants")
            return Missing(r, f"it needs another {name} than the one held ({line}): {text}",
                           f"use a release of {r.name} that works with {line}, or {other}")
    return Missing(r, f"no distribution for Python {python} on {platform} where the installer "
                      f"looks: {text}",
                   f"put a wheel of it for cp{python.replace('.', '')} {platform} in a "
                   "--find-links DIR (or your index), pin a release that has one, or drop it "
                   "from the list (--no-requirements skips them all)")


_NOISE = re.compile(r"^(Looking in|Collecting|Processing|Requirement already|Downloading|"
                    r"Using cached|Obtaining|WARNING|To fix|To fix this|\d+\. |hint:|Resolved|"
                    r"Would install|Audited|Using Python|note:)", re.I)


def _resolver_says(output: str, limit: int = 400) -> str:
    """The resolver's message on one line: its error lines, without progress and advice."""
    keep = [ln.strip(" ×╰─▶│").removeprefix("ERROR: ") for ln in output.splitlines()]
    keep = [ln for ln in keep if ln and not _NOISE.match(ln) and "pip.pypa.io" not in ln]
    text = " ".join(keep)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _added(output: str) -> str:
    """What the installer says it installed (pip: 'Successfully installed ...'; uv: '+ x')."""
    for line in output.splitlines():
        if line.startswith("Successfully installed"):
            return line.split(" ", 2)[2]
    plus = [ln.strip()[2:] for ln in output.splitlines() if ln.strip().startswith("+ ")]
    return " ".join(plus)
