"""The checkout's own requirements (cuforge.env.checkoutreqs) installed by the real pip and uv into
a real venv, offline, from a --find-links dir of wheels written here: torch and a stack wheel are
held by the constraint, a requirement that wants another torch is refused and torch stays, one
without a wheel for this Python and one on no index are named with the reason, the rest goes in.
A combo interpreter's torch, seen in the venv through the .pth only, satisfies the requirements
that depend on it. Each case takes a few seconds (a venv, pip/uv on tiny wheels)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from dataclasses import replace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "verify"))
import verify_builders as vb  # noqa: E402

from rich.console import Console  # noqa: E402

from cuforge.env import programs, venv
from cuforge.workstation import decision, installs  # noqa: E402
from cuforge.env.checkoutreqs import (CheckoutRequirement, IndexOptions,  # noqa: E402
                                      RequirementsOutcome, constraints, install,
                                      parse_requirements_file)
from cuforge.config.combos import select_combo, with_overrides  # noqa: E402
from cuforge.config.stacks import load_stack  # noqa: E402
from cuforge.core.errors import ConfigError, ToolchainError  # noqa: E402
from cuforge.core.project import find_project  # noqa: E402
from cuforge.env.target import resolve  # noqa: E402

PY = f"{sys.version_info.major}.{sys.version_info.minor}"
_MACHINE = __import__("platform").machine()


def _wheel(d: Path, name: str, version: str, *, requires=(), tag="py3-none-any") -> Path:
    mod = name.replace("-", "_")
    return vb.make_wheel(d, name, {f"{mod}/__init__.py": f"VERSION = {version!r}\n"},
                         version=version, tag=tag, requires=tuple(requires))


@pytest.fixture
def links(tmp_path: Path) -> Path:
    """The find-links dir: torch 2.14.1 and an older 2.13.0 a resolver could downgrade to."""
    d = tmp_path / "links"
    _wheel(d, "torch", "2.14.1")
    _wheel(d, "torch", "2.13.0")
    _wheel(d, "stack-wheel", "1.0+cu130torch2.14.1", requires=["torch==2.14.1"])
    _wheel(d, "stack-wheel", "2.0")                  # what an upgrade would take
    _wheel(d, "plain-dep", "1.0")
    _wheel(d, "good-req", "1.0", requires=["plain-dep", "torch"])
    _wheel(d, "wants-old-torch", "1.0", requires=["torch==2.13.0"])
    _wheel(d, "upgrades-stack", "1.0", requires=["stack-wheel>=2"])
    _wheel(d, "py27-only", "1.0", tag="cp27-cp27mu-manylinux1_x86_64")
    _wheel(d, "other-platform-only", "1.0", tag="py3-none-manylinux_2_28_aarch64"
           if _MACHINE == "x86_64" else "py3-none-manylinux_2_28_x86_64")
    return d


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch) -> None:
    """No pip.conf of this machine (its find-links hold a real torch), no uv config."""
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("UV_NO_CONFIG", "1")
    for var in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_CONSTRAINT", "UV_INDEX_URL",
                "UV_FIND_LINKS", "UV_CONSTRAINT"):
        monkeypatch.delenv(var, raising=False)


def _venv(tmp_path: Path, links: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "v")],
                   check=True)
    python = tmp_path / "v" / "bin" / "python"
    subprocess.run([*_installer("pip", python)("-q", "--no-index", "--find-links", str(links),
                    "torch==2.14.1", "stack-wheel==1.0+cu130torch2.14.1")], check=True)
    return python


def _installer(tool: str, python: Path):
    if tool == "uv":
        return lambda *a: (venv.find_uv(), "pip", "install", "--python", str(python), *a)
    return lambda *a: (sys.executable, "-m", "pip", "--python", str(python), "install",
                       "--disable-pip-version-check", *a)


def _version(python: Path, name: str) -> str | None:
    out = subprocess.run([str(python), "-c", "import importlib.metadata as m, sys; "
                          f"print(m.version({name!r}))"], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


HELD = constraints([("torch", "2.14.1"), ("stack-wheel", "1.0+cu130torch2.14.1")])


@pytest.mark.parametrize("tool", ["pip", "uv"])
def test_torch_and_the_stack_wheel_are_held(tmp_path: Path, links: Path, tool: str) -> None:
    python = _venv(tmp_path, links)
    reqs = [CheckoutRequirement("good-req", "requirements.txt:1"),
            CheckoutRequirement("wants-old-torch==1.0", "requirements.txt:2"),
            CheckoutRequirement("upgrades-stack", "requirements.txt:3"),
            CheckoutRequirement("py27-only==1.0", "requirements.txt:4"),
            CheckoutRequirement("not-on-any-index==0.19.0", "requirements.txt:5"),
            CheckoutRequirement("other-platform-only", "requirements.txt:6")]
    got = install(_installer(tool, python), reqs, HELD, IndexOptions((links,), no_index=True),
                  torch_version=lambda: _version(python, "torch"), python=PY,
                  platform="linux-x86_64")
    assert [r.spec for r in got.installed] == ["good-req"]
    assert _version(python, "good-req") == "1.0" and _version(python, "plain-dep") == "1.0"
    assert _version(python, "torch") == "2.14.1"                     # not downgraded
    assert _version(python, "stack-wheel") == "1.0+cu130torch2.14.1"   # not upgraded
    left_out = {"wants-old-torch", "upgrades-stack", "py27-only", "not-on-any-index",
                "other-platform-only"}
    for name in left_out:
        assert _version(python, name) is None, f"{name} was installed"
    why = {m.requirement.name: m for m in got.missing}
    assert set(why) == left_out
    assert "another torch than the one held (torch==2.14.1)" in why["wants-old-torch"].reason
    assert "--combo" in why["wants-old-torch"].fix
    assert "another stack-wheel" in why["upgrades-stack"].reason
    for name in ("py27-only", "not-on-any-index", "other-platform-only"):
        assert why[name].reason.startswith(f"no distribution for Python {PY} on linux-x86_64")
        assert "--find-links" in why[name].fix
        assert name in why[name].reason          # the resolver's own words name it
    assert "requirements.txt:2" in why["wants-old-torch"].line()


def test_without_the_constraint_pip_would_downgrade_torch(tmp_path: Path, links: Path) -> None:
    """The control: the same requirement, no constraint, and torch is replaced."""
    python = _venv(tmp_path, links)
    subprocess.run([*_installer("pip", python)("--no-index", "--find-links", str(links),
                                               "wants-old-torch==1.0")], check=True,
                   capture_output=True)
    assert _version(python, "torch") == "2.13.0"


def test_nothing_to_install_when_everything_is_missing(tmp_path: Path, links: Path) -> None:
    python = _venv(tmp_path, links)
    got = install(_installer("pip", python),
                  [CheckoutRequirement("wants-old-torch==1.0", "README.md:1")], HELD,
                  IndexOptions((links,), no_index=True),
                  torch_version=lambda: _version(python, "torch"), python=PY,
                  platform="linux-x86_64")
    assert got.installed == () and len(got.missing) == 1
    assert _version(python, "torch") == "2.14.1"


def test_requirements_file_lines_and_their_sources(tmp_path: Path) -> None:
    f = tmp_path / "requirements.txt"
    f.write_text("# MILo-like\nopen3d==0.19.0\n\ntrimesh==4.6.8  # meshes\nplyfile==1.1\n")
    assert parse_requirements_file(f, "requirements.txt") == [
        CheckoutRequirement("open3d==0.19.0", "requirements.txt:2"),
        CheckoutRequirement("trimesh==4.6.8", "requirements.txt:4"),
        CheckoutRequirement("plyfile==1.1", "requirements.txt:5")]
    f.write_text("--index-url https://example.org/simple\ntrimesh\n")
    with pytest.raises(ConfigError, match="requirements.txt:1.*is an option"):
        parse_requirements_file(f, "requirements.txt")


def test_the_stacks_name_their_requirements() -> None:
    from cuforge.core.project import find_project
    from cuforge.config.stacks import load_stack
    project = find_project(Path(__file__).resolve().parents[2])
    pointcept, milo = load_stack(project, "pointcept"), load_stack(project, "milo")
    assert milo.requirements_file == "requirements.txt" and not milo.requirements
    names = [r.name for r in pointcept.requirements]
    assert {"addict", "timm", "scipy"} <= set(names) and "torch" not in names
    assert all(r.source.startswith("README.md:") for r in pointcept.requirements)


def test_dry_run_lists_the_requirements_and_the_constraint(tmp_path: Path) -> None:
    import os
    import shutil
    repo = Path(__file__).resolve().parents[2]
    checkout = tmp_path / "pointcept"
    shutil.copytree(repo / "tests" / "fixtures" / "upstream" / "pointcept", checkout)
    env = {**os.environ, "CUFORGE_ROOT": str(repo), "CUFORGE_WHEELHOUSE": str(tmp_path / "wh"),
           "COLUMNS": "200"}

    def dry(*extra: str) -> str:
        out = subprocess.run([sys.executable, "-m", "cuforge", "setup", "pointcept",
                              "--checkout", str(checkout), "--dry-run", *extra], env=env,
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout + out.stderr
    said = dry("--find-links", str(tmp_path), "--no-index")
    assert "then the checkout's requirements (19), from pointcept.toml:" in said
    assert "addict  (README.md:192" in said and "transformers==4.50.3" in said
    assert "constraint (torch and the stack's wheels held): torch==2.14.1" in said
    assert f"--find-links {tmp_path} --no-index" in said
    assert "the checkout's requirements: skipped (--no-requirements)" in dry("--no-requirements")
    assert not (checkout / ".venv").exists()          # a dry run creates nothing


@pytest.fixture
def interpreter_with_torch(tmp_path: Path) -> Path:
    """A combo interpreter (the H200's shape): its own pip and a torch 2.11.0 (PyPI's metadata
    version, no local label), a fake one: a wheel with no code worth importing."""
    import ensurepip
    bundled_pip = next((Path(ensurepip.__file__).parent / "_bundled").glob("pip-*.whl"))
    base = tmp_path / "base"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(base)], check=True)
    python = base / "bin" / "python"
    subprocess.run([*_installer("pip", python)(       # its own pip (quicker than ensurepip)
        "-q", "--no-index", "--no-compile", str(bundled_pip),
        str(_probe_shaped_torch(tmp_path / "w")))], check=True)
    return python


def _probe_shaped_torch(d: Path) -> Path:
    """torch 2.11.0 for CUDA 13.0 with only what setup's interpreter check reads (the same
    probe a build runs first): its version, CUDA, ABI flag, include and CMake paths."""
    files = {
        "torch/__init__.py": "__version__ = '2.11.0'\nfrom . import version, _C, utils\n",
        "torch/version.py": "cuda = '13.0'\n",
        "torch/_C.py": "_GLIBCXX_USE_CXX11_ABI = True\n",
        "torch/utils/__init__.py": "cmake_prefix_path = ''\n",
        "torch/utils/cpp_extension.py": "def include_paths():\n    return []\n",
    }
    return vb.make_wheel(d, "torch", files, version="2.11.0", tag="py3-none-any")


@pytest.mark.parametrize("uv_here", [True, False], ids=["uv-on-path", "no-uv"])
def test_a_torch_seen_through_the_pth_satisfies_requirements_that_need_it(
        tmp_path: Path, interpreter_with_torch: Path, monkeypatch, uv_here: bool) -> None:
    """setup's own step on an interpreter combo, offline (--no-index, no torch in the links):
    requirements that depend on torch (timm: unpinned; one pinning this torch) take the interpreter's torch,
    visible in the venv through the .pth, and go in; one that wants another torch is refused
    and torch stays. On the H200 uv was on PATH, resolved these and refused timm and peft
    ('torch was not found in the provided package locations')."""
    if not uv_here:
        def no_uv() -> str:
            raise ToolchainError("uv is not installed")
        monkeypatch.setattr(programs, "find_uv", no_uv)
    links = tmp_path / "links"
    _wheel(links, "timm-like", "1.0", requires=["torch"])
    _wheel(links, "pins-this-torch", "1.0", requires=["torch==2.11.0"])
    _wheel(links, "wants-old-torch", "1.0", requires=["torch==2.10.0"])
    checkout = tmp_path / "milo"
    checkout.mkdir()
    (checkout / "requirements.txt").write_text(
        "timm-like\npins-this-torch\nwants-old-torch\n")
    venv_dir = checkout / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv_dir)], check=True)
    python = venv_dir / "bin" / "python"
    installs.link_site_packages(python, interpreter_with_torch)
    assert _version(python, "torch") == "2.11.0"          # seen through the .pth only

    project = find_project(Path(__file__).resolve().parents[2])
    combo = replace(with_overrides(select_combo(project, name="h200"),
                                   interpreter=str(interpreter_with_torch)),
                    python="%d.%d" % sys.version_info[:2])      # the interpreter's Python here
    req = decision.SetupRequest("milo", checkout, venv_dir, combo,
                                index=IndexOptions((links,), no_index=True))
    p = decision.decide(project, req, resolve(project, combo), load_stack(project, "milo"))
    held = constraints([("torch", installs.dist_version(python, "torch"))])
    missing = installs.install_checkout_requirements(python, p, req, held,
                                                     Console(quiet=True)).missing
    for name in ("timm-like", "pins-this-torch"):
        assert _version(python, name) == "1.0", f"{name} was not installed"
    assert [m.requirement.name for m in missing] == ["wants-old-torch"]
    assert "another torch than the one held (torch==2.11.0)" in missing[0].reason
    assert _version(python, "wants-old-torch") is None
    assert _version(python, "torch") == "2.11.0"
    assert not list((venv_dir / "lib").glob("python*/site-packages/torch*"))   # no second torch


def test_a_requirement_a_wheel_moved_is_seen(tmp_path: Path, links: Path) -> None:
    """setup installs the checkout's requirements beside the build, before the stack's wheels
    (issue 44); a wheel's own runtime requirement can then move one of them. What setup reads
    back afterwards, from the real venv, says which, so it installs them again, held."""
    from cuforge.workstation.setup import still_satisfied
    _wheel(links, "plain-dep", "2.0")
    python = _venv(tmp_path, links)
    pip = _installer("pip", python)
    subprocess.run([*pip("-q", "--no-index", "--find-links", str(links), "plain-dep>=2")],
                   check=True)
    wanted = CheckoutRequirement("plain-dep>=2", "requirements.txt:1")
    got = RequirementsOutcome((wanted,), ())
    console = Console(record=True, width=200)
    assert still_satisfied(python, (), got, console)            # nothing moved it yet
    assert console.export_text() == ""
    # a stack wheel's runtime requirement (plain-dep<2) goes in after it
    subprocess.run([*pip("-q", "--no-index", "--find-links", str(links), "plain-dep==1.0")],
                   check=True)
    assert _version(python, "plain-dep") == "1.0"
    assert not still_satisfied(python, (), got, console)
    assert "the stack's wheels moved plain-dep>=2: installing the checkout's requirements " \
           "again" in console.export_text()
