"""Bad input, as a new user or a careless recipe hands it: each case is one clear message with
a ``fix:`` line, the exit code of its error class, no traceback, and no change to the
wheelhouse (no wheel added or altered; a build that fails mid-way may add a FAILED line, which
is a record, not a wheel). The CLI runs as a subprocess (``python -m cuforge``) in a temp
project. The table with every case is in docs/reliability.md."""

from __future__ import annotations

import hashlib
import io
import json
import os
import resource
import shutil
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from cuforge.core.errors import (ConfigError, PatchError, SourceError, ToolchainError, VerifyError,
                            WheelhouseError, BuildError, MissingWheelError)
from cuforge.publish.wheelhouse import Entry, Wheelhouse

from reliability_project import (COMBO_DIR, ROOT, build, cuforge, link_combo_env, make_project,
                                 wheelhouse_snapshot)

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass(frozen=True)
class Case:
    id: str
    setup: Callable[[Path], list[str]]     # edits the project, returns the CLI arguments
    error: type
    says: str                               # a phrase the message must contain
    slow: bool = False                      # needs the combo env (imports torch)


def _recipe(proj: Path, body: str, name: str = "tinyext") -> None:
    (proj / "recipes" / f"{name}.toml").write_text(body)


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def _build_args(*extra: str) -> list[str]:
    return ["build", "--combo", "3.11-cu130", "--only", "tinyext", *extra]


def _git_recipe(url: str, commit: str = COMMIT) -> Callable[[Path], list[str]]:
    def setup(proj: Path) -> list[str]:
        _recipe(proj, f'[source]\ngit = "{url}"\ncommit = "{commit}"\n')
        return _build_args()
    return setup


def _sdist_recipe(url: str, sha: str = "0" * 64) -> Callable[[Path], list[str]]:
    def setup(proj: Path) -> list[str]:
        _recipe(proj, f'[source]\nsdist = "{url}"\nsha256 = "{sha}"\n')
        return _build_args()
    return setup


def _patch_file(file: str) -> Callable[[Path], list[str]]:
    def setup(proj: Path) -> list[str]:
        toml = proj / "patches" / "tinyext" / "patch.toml"
        toml.write_text(toml.read_text().replace('file = "tinyext/_c.cpp"', f'file = "{file}"'))
        return _build_args()
    return setup


def _prebuilt(table: str) -> Callable[[Path], list[str]]:
    def setup(proj: Path) -> list[str]:
        _recipe(proj, f'kind = "prebuilt"\n[prebuilt]\n{table}\n')
        return _build_args()
    return setup


def _cycle(proj: Path) -> list[str]:
    _recipe(proj, 'depends = ["tinyext"]\n[source]\npath = "x"\n', name="other")
    _append(proj / "recipes" / "tinyext.toml", "")
    text = (proj / "recipes" / "tinyext.toml").read_text()
    _recipe(proj, 'depends = ["other"]\n' + text)
    return _build_args()


def _symlink_out(proj: Path) -> list[str]:
    """A local checkout whose tinyext/_c.cpp is a symlink to a file outside it."""
    victim = proj.parent / "victim.cpp"
    victim.write_text("#include <Python.h>\n// a file outside the checkout\n")
    tree = proj / "checkout"
    (tree / "tinyext").mkdir(parents=True)
    (tree / "setup.py").write_text("from setuptools import setup\nsetup(name='tinyext')\n")
    (tree / "tinyext" / "__init__.py").write_text("PATCHED = False\n")
    (tree / "tinyext" / "_c.cpp").symlink_to(victim)
    text = (proj / "recipes" / "tinyext.toml").read_text()
    _recipe(proj, text.split("[source]")[0] + '[source]\npath = "checkout"\n'
            '[arches]\ndevice_code = false\n')
    return _build_args()


def _sdist_symlink_out(proj: Path) -> list[str]:
    archive = proj.parent / "evil-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("evil-1.0/setup.py")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(info)
    return _sdist_recipe(str(archive), hashlib.sha256(archive.read_bytes()).hexdigest())(proj)


def _corrupt_sdist(proj: Path) -> list[str]:
    archive = proj.parent / "broken-1.0.tar.gz"
    archive.write_bytes(b"\x1f\x8b\x08\x00" + os.urandom(300))     # a gzip header, then noise
    return _sdist_recipe(str(archive), hashlib.sha256(archive.read_bytes()).hexdigest())(proj)


def _unpinned_prebuilt_download(proj: Path) -> list[str]:
    links = proj.parent / "links"
    links.mkdir()
    with zipfile.ZipFile(links / "tinyext-1.0-py3-none-any.whl", "w") as zf:
        zf.writestr("tinyext/__init__.py", "")
        zf.writestr("tinyext-1.0.dist-info/METADATA",
                    "Metadata-Version: 2.1\nName: tinyext\nVersion: 1.0\n")
        zf.writestr("tinyext-1.0.dist-info/WHEEL",
                    "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr("tinyext-1.0.dist-info/RECORD", "")
    return _prebuilt(f'requirements = ["tinyext==1.0"]\nsha256 = ["{"1" * 64}"]\n'
                     f'find_links = "{links}"')(proj)


def _tampered_wheel(proj: Path) -> list[str]:
    house = proj / "wh" / COMBO_DIR
    wheel = next(house.glob("*.whl"))
    with zipfile.ZipFile(wheel, "a") as zf:
        zf.writestr("prev/extra.py", "print('not what was verified')\n")
    return ["verify", "--combo", "3.11-cu130", str(house)]


CASES = [
    Case("recipe-toml", lambda p: [_recipe(p, 'kind = "setuptools"\nbroken = \n'),
                                   _build_args()][1], ConfigError, "tinyext.toml:2:"),
    Case("combo-toml", lambda p: [_append(p / "envs" / "combos.toml", "[[combo]\n"),
                                  _build_args()][1], ConfigError, "combos.toml:"),
    Case("accels-toml", lambda p: [_append(p / "envs" / "accels.toml", "cuda = = 1\n"),
                                   _build_args()][1], ConfigError, "accels.toml:"),
    Case("patch-set-toml", lambda p: [(p / "patches" / "tinyext" / "patch.toml").write_text(
        '[set]\nname = "tinyext"\n[[patch]\n'), _build_args()][1], ConfigError, "patch.toml:3:"),
    Case("unknown-patch-set", lambda p: [_append(p / "recipes" / "tinyext.toml", ""),
                                         (p / "recipes" / "tinyext.toml").write_text(
                                             (p / "recipes" / "tinyext.toml").read_text()
                                             .replace('["tinyext"]', '["nope"]')),
                                         _build_args()][2], ConfigError, "patch set 'nope'"),
    Case("unknown-dependency", lambda p: [_recipe(p, 'depends = ["ghost"]\n[source]\npath = "x"\n'),
                                          _build_args()][1], ConfigError, "'ghost'"),
    Case("dependency-cycle", _cycle, ConfigError, "cycle"),
    Case("jobs-zero", lambda p: _build_args("--jobs", "0"), ConfigError, "--jobs 0"),
    Case("jobs-negative", lambda p: _build_args("--jobs", "-3"), ConfigError, "--jobs -3"),
    Case("unknown-accel", lambda p: ["build", "--python", "3.11", "--accel", "cu999"],
         ConfigError, "unknown accel 'cu999'"),
    Case("unknown-combo", lambda p: ["build", "--combo", "nope"], ConfigError, "no combo 'nope'"),
    Case("unknown-package", lambda p: ["build", "--combo", "3.11-cu130", "--only", "ghost"],
         ConfigError, "no recipe for ghost"),
    Case("bad-cuda-arch", lambda p: _build_args("--cuda-arch", "7.x"), ConfigError, "7.x"),
    Case("patch-dotdot", _patch_file("../outside.cpp"), ConfigError, "inside the patched tree"),
    Case("patch-absolute", _patch_file("/etc/passwd"), ConfigError, "inside the patched tree"),
    Case("http-sdist", _sdist_recipe("http://example.org/x-1.0.tar.gz"), ConfigError,
         "scheme 'http'"),
    Case("git-ext-transport", _git_recipe("ext::sh -c touch% /tmp/pwned"), ConfigError,
         "scheme 'ext'"),
    Case("git-plain-protocol", _git_recipe("git://example.org/x.git"), ConfigError,
         "scheme 'git'"),
    Case("git-abbreviated-commit", _git_recipe("https://example.org/x.git", "0123abc"),
         ConfigError, "full 40-hex"),
    Case("git-moving-ref", _git_recipe("https://example.org/x.git", "main"), ConfigError,
         "full 40-hex"),
    Case("sdist-without-sha256", lambda p: [_recipe(p, '[source]\nsdist = "https://e.org/x.tgz"\n'),
                                            _build_args()][1], ConfigError, "sha256"),
    Case("prebuilt-range", _prebuilt(f'requirements = ["x<2.8"]\nsha256 = ["{"0" * 64}"]'),
         ConfigError, "not pinned to one version"),
    Case("prebuilt-without-sha256", _prebuilt('requirements = ["x==1.0"]'), ConfigError,
         "sha256"),
    Case("unknown-recipe-key", lambda p: [_append(p / "recipes" / "tinyext.toml", ""),
                                          _recipe(p, 'colour = "red"\n' + (p / "recipes" /
                                                  "tinyext.toml").read_text()),
                                          _build_args()][2], ConfigError, "unknown keys"),
    Case("src-without-path", lambda p: _build_args("--src", "tinyext"), ConfigError,
         "expected NAME=PATH"),
    Case("kernels-rule-without-mirrors", lambda p: [_append(
        p / "recipes" / "tinyext.toml", '\n[kernels]\n[[kernels.drop]]\nfamily = "gemm"\n'
        'algo = "Volta"\narch_at_least = "7.5"\n'), _build_args()][1], ConfigError,
        "missing ['mirrors']"),
    # these need the combo env: the failure is found while building
    Case("checksum-mismatch", lambda p: [(p / "recipes" / "tinyext.toml").write_text(
        _resha(p)), _build_args()][1], SourceError, "checksum mismatch", slow=True),
    Case("corrupt-sdist", _corrupt_sdist, SourceError, "cannot unpack", slow=True),
    Case("sdist-symlink-outside", _sdist_symlink_out, SourceError, "cannot unpack", slow=True),
    Case("checkout-symlink-outside", _symlink_out, PatchError, "outside the checkout",
         slow=True),
    Case("prebuilt-hash-mismatch", _unpinned_prebuilt_download, BuildError, "does not pin",
         slow=True),
    Case("tampered-wheel", _tampered_wheel, VerifyError, "bytes changed", slow=True),
]


def _resha(proj: Path) -> str:
    text = (proj / "recipes" / "tinyext.toml").read_text()
    digest = text.split('sha256 = "')[1][:64]
    return text.replace(digest, "f" * 64)


def _seed_wheelhouse(proj: Path) -> None:
    """A wheelhouse with one verified wheel already in it: bad input must leave it alone."""
    house = proj / "wh" / COMBO_DIR
    house.mkdir(parents=True)
    wheel = proj.parent / "prev-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("prev/__init__.py", "")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    Wheelhouse(house).publish(wheel, Entry(package="prev", status="compiled", version="1.0",
                                           wheel=wheel.name, wheel_sha256=digest,
                                           checks={"import": "pass"}))


def _check(proj: Path, args: list[str], error: type, says: str, before: dict[str, bytes],
           preexec_fn=None) -> None:
    run = cuforge(proj, *args, timeout=600, preexec_fn=preexec_fn)
    out = run.stdout + run.stderr
    assert run.returncode == error.exit_code, (run.returncode, out[-3000:])
    assert "Traceback" not in out, out[-3000:]
    assert out.count(f"cuforge: {error.label}") == 1, out[-3000:]
    assert says in out, out[-3000:]
    assert "fix:" in out.split(f"cuforge: {error.label}")[1], out[-3000:]
    after = wheelhouse_snapshot(proj)
    for name, data in before.items():       # nothing that was there changed
        if name.endswith("manifest.jsonl"):
            assert after[name].startswith(data)
            added = [json.loads(l) for l in after[name][len(data):].decode().splitlines()]
            assert all(e["status"] == "FAILED" and not e["wheel"] for e in added), added
        elif not name.endswith("manifest.txt"):
            assert after.get(name) == data, name
    assert {n for n in after if n.endswith(".whl")} == {n for n in before if n.endswith(".whl")}


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=[pytest.mark.slow] if c.slow
                                               else []) for c in CASES])
def test_bad_input_is_one_clear_error(tmp_path, case):
    proj = make_project(tmp_path)
    _seed_wheelhouse(proj)
    if case.slow:
        link_combo_env(proj)
    args = case.setup(proj)
    before = wheelhouse_snapshot(proj)     # after the setup: a tampered wheel stays as it is
    _check(proj, args, case.error, case.says, before)


def test_the_table_has_enough_cases():
    assert len(CASES) >= 20 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.slow
def test_disk_full_while_publishing_publishes_nothing(tmp_path):
    """A file-size limit (RLIMIT_FSIZE) that the manifest's next line would cross: the wheel
    was built and verified, the append fails; the copy is removed, the manifest is cut back to
    its old bytes, and the message says what to do."""
    proj = make_project(tmp_path)
    _seed_wheelhouse(proj)
    link_combo_env(proj)
    manifest = proj / "wh" / COMBO_DIR / "manifest.jsonl"
    old = Entry(package="old", status="skipped", reason="x" * 900).line() + "\n"
    buf = io.StringIO()
    buf.write(manifest.read_text())
    while buf.tell() < 256 * 1024:   # a long-lived wheelhouse: a quarter MiB of history
        buf.write(old)
    manifest.write_text(buf.getvalue())
    before = wheelhouse_snapshot(proj)
    limit = manifest.stat().st_size + 200     # room for a log line, not for a manifest line

    def small_disk() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    _check(proj, _build_args(), WheelhouseError, "nothing was published", before,
           preexec_fn=small_disk)
    assert not list(manifest.parent.glob(".incoming-*"))
    # and with room again, the same command publishes
    again = build(proj, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]


# -- refused before anything is written, by the dry run as by the run (issue 43) --------------
@dataclass(frozen=True)
class Refusal:
    id: str
    args: Callable[[Path, Path], list[str]]   # (tmp_path, proj) -> the CLI arguments
    error: type
    says: str
    stack: bool = False                       # a `setup` of the repo's own stacks


def _afile(tmp: Path) -> Path:
    path = tmp / "a-file"
    path.write_text("not a directory\n")
    return path


def _pointcept(tmp: Path) -> Path:
    """A checkout shaped like Pointcept's (our fixture), and the setup arguments for it."""
    checkout = tmp / "Pointcept"
    if not checkout.exists():
        shutil.copytree(ROOT / "tests" / "fixtures" / "upstream" / "pointcept", checkout)
    return checkout


def _setup(tmp: Path, *extra: str, checkout: Path | None = None) -> list[str]:
    return ["setup", "pointcept", "--checkout", str(checkout or _pointcept(tmp)), *extra]


REFUSALS = [
    Refusal("torch-unknown", lambda t, p: _build_args("--torch", "9.9"), ToolchainError,
            "torch 9.9"),
    Refusal("src-missing", lambda t, p: _build_args("--src", f"tinyext={t / 'nowhere'}"),
            ConfigError, "does not exist"),
    Refusal("src-a-file", lambda t, p: _build_args("--src", f"tinyext={_afile(t)}"),
            ConfigError, "is not a directory"),
    Refusal("wheels-missing", lambda t, p: _build_args("--wheels", str(t / "nowhere")),
            ConfigError, "does not exist"),
    Refusal("combo-emulated-without-emulation",
            lambda t, p: ["build", "--combo", "spark-emulated", "--only", "tinyext"],
            ToolchainError, "emulation is not usable here"),
    Refusal("setup-jobs-zero", lambda t, p: _setup(t, "--jobs", "0"), ConfigError, "--jobs 0",
            stack=True),
    Refusal("setup-checkout-missing", lambda t, p: _setup(t, checkout=t / "nowhere"),
            ConfigError, "git clone https://github.com/Pointcept/Pointcept", stack=True),
    Refusal("setup-checkout-empty", lambda t, p: _setup(t, checkout=_mkdir(t / "empty")),
            ConfigError, "is not a Pointcept checkout (no pointcept/ in it)", stack=True),
    Refusal("setup-venv-a-file", lambda t, p: _setup(t, "--venv", str(_afile(t))),
            ConfigError, "is a file, not a venv directory", stack=True),
    Refusal("setup-no-build-missing-wheels", lambda t, p: _setup(t, "--no-build"), MissingWheelError,
            "have no wheel", stack=True),
    Refusal("setup-src-a-file", lambda t, p: _setup(t, "--src", f"spconv={_afile(t)}"),
            ConfigError, "is not a directory", stack=True),
    Refusal("setup-wheels-missing", lambda t, p: _setup(t, "--wheels", str(t / "nowhere")),
            ConfigError, "does not exist", stack=True),
]


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` (a directory as None), with its bytes: what is on disk."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
            for p in sorted(root.rglob("*")) if not p.is_symlink()}


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in REFUSALS])
def test_a_refused_input_leaves_nothing_and_the_dry_run_says_the_same(tmp_path, case):
    """The run and ``--dry-run`` print the same one error (no uv or patch output) with the
    same exit code, and neither leaves anything on disk: no env or its lock, no log dir, no
    build stamp, no FAILED line, no CHECKOUT/.venv."""
    proj = make_project(tmp_path)
    _seed_wheelhouse(proj)
    args = case.args(tmp_path, proj)
    env = {"CUFORGE_ROOT": str(ROOT)} if case.stack else None   # the repo's stacks and recipes
    before = _tree(tmp_path)
    runs = [cuforge(proj, *args, *dry, env=env, timeout=300) for dry in (["--dry-run"], [])]
    for run in runs:
        assert run.returncode == case.error.exit_code, (run.returncode, run.stderr[-3000:])
        assert "Traceback" not in run.stderr and not run.stdout, run.stdout + run.stderr
        assert run.stderr.count(f"cuforge: {case.error.label}") == 1, run.stderr
        assert case.says in run.stderr and "fix:" in run.stderr, run.stderr
        assert run.stderr.startswith("cuforge: "), run.stderr   # nothing ran before it
    assert runs[0].stderr == runs[1].stderr
    assert _tree(tmp_path) == before, sorted(set(_tree(tmp_path)) ^ set(before))
    assert "MILo" not in runs[1].stderr


def test_setup_dry_run_writes_its_plan_to_stdout(tmp_path):
    """As ``build --dry-run`` does: the plan is the output, on stdout (``> plan.txt``)."""
    run = cuforge(tmp_path, *_setup(tmp_path, "--dry-run"), env={"CUFORGE_ROOT": str(ROOT)})
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.startswith("cuforge setup pointcept (dry run):"), run.stdout[:500]
    assert "4. patch set pointcept on" in run.stdout and not run.stderr.strip(), run.stderr
