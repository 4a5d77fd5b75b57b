"""Workstation stacks (``stacks/*.toml``): which recipes a research code base needs, which patch
set its checkout gets, which variables its venv sets on activation, and its model checks: the
checkout's own models (``checkout_model``, run by ``setup``) and a miniature that needs only the
wheels (``miniature``, run by ``verify --models``).
A stack is data: adding one is a TOML file, not a branch in code."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from cuforge.config.names import as_known
from cuforge.core.errors import ConfigError
from cuforge.core.project import Project
from cuforge.core.tomlfile import read_toml

_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


@dataclass(frozen=True)
class CheckoutRequirement:
    """One of the checkout's own requirements (installed by ``env.checkoutreqs``)."""

    spec: str        # a PEP 508 requirement, as written
    source: str      # where it comes from: "requirements.txt:3" or a README line

    @property
    def name(self) -> str:
        return canonicalize_name(Requirement(self.spec).name)


@dataclass(frozen=True)
class EnvVar:
    """A variable setup writes into the venv's activation. ``passed`` (``package:check``)
    makes it evidence-driven: where the installed wheel of that package passed that check
    (its manifest entry), ``value_if_passed`` and ``why_if_passed`` are written instead."""

    name: str
    value: str
    why: str          # one line, written above the variable in the env file
    passed: str = ""
    value_if_passed: str = ""
    why_if_passed: str = ""

    def settle(self, passed: dict[tuple[str, str], str]) -> EnvVar:
        """This variable for a wheelhouse whose latest entries passed the checks ``passed``
        ((package, check) -> the check's detail; what a pass is, verify/ decides: the caller).

        >>> v = EnvVar("ALGO", "native", "safe", "spconv:stress", "default", "it passed")
        >>> v.settle({("spconv", "stress"): "29956 calls"}).why
        "it passed (spconv's stress: 29956 calls)"
        >>> v.settle({("spconv", "import"): ""}).value
        'native'
        """
        if not self.passed:
            return self
        package, _, check = self.passed.partition(":")
        if (package, check) not in passed:
            return self
        detail = passed[(package, check)]
        said = detail.splitlines()[0] if detail else "passed"
        return EnvVar(self.name, self.value_if_passed,
                      f"{self.why_if_passed} ({package}'s {check}: {said})")


@dataclass(frozen=True)
class CheckoutPackage:
    """A ``[[package]]`` of a stack written by ``cuforge stack new``: a torch extension that
    lives in the checkout (discovery found it there), built as an in-memory recipe from that
    folder with its field fixes, like a discovered one."""

    name: str                    # its distribution name (the recipe is NAME@STACK)
    folder: str                  # relative to the checkout
    kind: str = "setuptools"
    modules: tuple[str, ...] = ()
    fixes: tuple[str, ...] = ()  # patches/field-* sets
    required: bool = True


@dataclass(frozen=True)
class Stack:
    name: str
    description: str
    packages: tuple[str, ...]    # recipes' names (a stack of [[package]]s: filled in by setup)
    patch_set: str
    env: tuple[EnvVar, ...]
    checkout_model: str       # run by setup as `SCRIPT CHECKOUT` ("" = none; path from the root)
    file: Path
    optional: tuple[str, ...] = ()   # installed when they build; a failure is reported, not fatal
    miniature: str = ""       # verify --models: a model of ours over the wheels alone ("" = none)
    # the checkout's own Python requirements: its file (read from the user's checkout), or a
    # list written here for a code base without one, each entry saying where it comes from
    requirements_file: str = ""
    requirements: tuple[CheckoutRequirement, ...] = ()
    # the code base itself: its name for people, where to clone it, and a path every
    # checkout of it has (setup refuses a --checkout without it, before patching anything)
    title: str = ""
    repo: str = ""
    checkout_marker: str = ""
    # the kernel set setup builds when the wheelhouse holds none yet (a [kernels] recipe's
    # narrower set, e.g. spconv's 3d; "" = each recipe's default); --kernels overrides it
    kernels: str = ""
    # the checkout's entry scripts (train.py, ...), each run with --help in the venv by the
    # model stage: the checkout's own code loads (cuforge.discovery.entry finds them)
    entry_scripts: tuple[str, ...] = ()
    # the extensions that live in the checkout ([[package]], written by `cuforge stack new`)
    checkout_packages: tuple[CheckoutPackage, ...] = ()


def available_stacks(project: Project) -> list[str]:
    return sorted(p.stem for p in project.stacks_dir.glob("*.toml"))


def load_stack(project: Project, name: str) -> Stack:
    known = available_stacks(project)
    given, ([name], maybe) = name, as_known([name], known)   # Pointcept, MILo: as typed
    path = project.stacks_dir / f"{name}.toml"
    if not path.is_file():
        raise ConfigError(f"no stack named {given!r} in {project.stacks_dir}{maybe}",
                          hint=f"known stacks: {', '.join(known) or 'none'}")
    data = read_toml(path, "stack")
    head = data.get("stack", {})
    env = []
    for row in data.get("env", []):
        name_, why = row.get("name", ""), " ".join(str(row.get("why", "")).split())
        if not _NAME.match(name_) or "value" not in row or not why:
            raise ConfigError(f"{path}: every [[env]] needs name (A-Z_), value and why",
                              hint=f"fix the entry {row!r}")
        if bool(row.get("passed")) != ("value_if_passed" in row) or (
                row.get("passed") and (":" not in row["passed"] or not row.get("why_if_passed"))):
            raise ConfigError(f"{path}: [[env]] {name_}: `passed` (package:check), "
                              "`value_if_passed` and `why_if_passed` go together",
                              hint='e.g. passed = "spconv:stress", value_if_passed = "default"')
        env.append(EnvVar(name_, str(row["value"]), why, str(row.get("passed", "")),
                          str(row.get("value_if_passed", "")),
                          " ".join(str(row.get("why_if_passed", "")).split())))
    here = tuple(_checkout_package(row, path) for row in data.get("package", []))
    if not head.get("packages") and not here:
        raise ConfigError(f"{path}: [stack] lists no packages (and no [[package]] of the "
                          "checkout)")
    if "model_check" in head:
        raise ConfigError(f"{path}: [stack] model_check was split in two",
                          hint="checkout_model = the script setup runs on the user's checkout "
                               "(it gets the checkout path); miniature = the one verify --models "
                               "runs on wheels alone")
    reqs = []
    for row in data.get("requirement", []):
        spec, source = str(row.get("spec", "")), " ".join(str(row.get("source", "")).split())
        if not spec or not source:
            raise ConfigError(f"{path}: every [[requirement]] needs spec and source (where it "
                              "comes from)", hint=f"fix the entry {row!r}")
        reqs.append(CheckoutRequirement(spec, source))
    if reqs and head.get("requirements_file"):
        raise ConfigError(f"{path}: [stack] requirements_file and [[requirement]] both given",
                          hint="one source of requirements per stack")
    return Stack(name=head.get("name", name), description=head.get("description", ""),
                 packages=tuple(head.get("packages", ())), patch_set=head.get("patch_set", ""),
                 env=tuple(env), checkout_model=head.get("checkout_model", ""), file=path,
                 optional=tuple(head.get("optional", ())), miniature=head.get("miniature", ""),
                 requirements_file=head.get("requirements_file", ""), requirements=tuple(reqs),
                 title=head.get("title", head.get("name", name)), repo=head.get("repo", ""),
                 checkout_marker=head.get("checkout_marker", ""),
                 kernels=head.get("kernels", ""),
                 entry_scripts=tuple(head.get("entry_scripts", ())), checkout_packages=here)


_PACKAGE_KEYS = {"name", "folder", "kind", "modules", "fixes", "required"}


def _checkout_package(row: dict, path: Path) -> CheckoutPackage:
    unknown = set(row) - _PACKAGE_KEYS
    if unknown or not row.get("name") or not row.get("folder"):
        raise ConfigError(f"{path}: every [[package]] needs name and folder (may have: "
                          f"{', '.join(sorted(_PACKAGE_KEYS))}); got {row!r}",
                          hint="`cuforge stack new CHECKOUT` writes them from what it finds")
    folder = str(row["folder"])
    if Path(folder).is_absolute() or ".." in Path(folder).parts:
        raise ConfigError(f"{path}: [[package]] {row['name']}: folder must be inside the "
                          f"checkout, got {folder!r}")
    return CheckoutPackage(str(row["name"]), folder, str(row.get("kind", "setuptools")),
                           tuple(row.get("modules", ())), tuple(row.get("fixes", ())),
                           bool(row.get("required", True)))


def env_file_text(stack: Stack) -> str:
    """The env file sourced on activation: one ``export`` per variable, its why above it.

    >>> print(env_file_text(Stack("s", "", ("p",), "", (EnvVar("A", "x y", "because"),), "",
    ...                           Path("s.toml"))).splitlines()[-2:])
    ['# because', "export A='x y'"]
    """
    lines = [f"# cuforge setup {stack.name}: written by cuforge from {stack.file.name}; edits",
             "# are overwritten by the next `cuforge setup`. Sourced by this venv's activate.", ""]
    for var in stack.env:
        lines += [f"# {var.why}", f"export {var.name}={shlex.quote(var.value)}"]
    return "\n".join(lines) + "\n"
