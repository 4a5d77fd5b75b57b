"""The command line as a user meets it: a closed pipe ends quietly, `--version`, help texts
without markup or sentences cut in half, exit codes listed where `--help` and the docs show
them (and both equal to errors.py), errors whose fix names what there is."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cuforge import __version__
from cuforge.core import errors
from cuforge.cli.parser import make_parser

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CUFORGE = [sys.executable, "-m", "cuforge"]
# a dry run of every recipe prints ~110 kB: more than a pipe holds, so the writer meets the
# closed pipe for sure
BIG = ["build", "--dry-run", "--only", "all"]


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CUFORGE, *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **env})


@pytest.mark.parametrize("argv", [[*CUFORGE, *BIG], [str(BIN / "invoke"), "build", "--dry-run",
                                                    "--only", "all"]],
                         ids=["cuforge", "invoke"])
def test_a_closed_pipe_ends_quietly(argv):
    """`cuforge ... | head -1`: no traceback, nothing on stderr, 141 (as if killed by
    SIGPIPE, what `yes | head` gives)."""
    writer = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    head = subprocess.Popen(["head", "-1"], stdin=writer.stdout, stdout=subprocess.PIPE)
    writer.stdout.close()   # head holds the only reading end
    first = head.communicate()[0]
    stderr = writer.stderr.read().decode()
    assert writer.wait() == 141, stderr
    assert first.startswith(b"# dry run") and stderr == ""


def test_version():
    proc = _cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"cuforge {__version__}"
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'version = "{__version__}"' in pyproject


def test_help_is_plain_text_with_whole_sentences_and_the_exit_codes():
    text = _cli("--help").stdout
    description = text.split("\n\n")[1]
    assert "``" not in text and description.rstrip().endswith("."), description
    codes = dict(re.findall(r"^  (\d+)\s+(.+)$", text.split("exit codes:")[1], re.M))
    for code, what in errors.exit_code_table():
        assert codes[str(code)] == what
    assert {"0", "130", "141"} <= set(codes) and len(codes) == len(set(codes))
    # argparse's own usage error exits 2: the table says 2 covers it
    assert _cli("build", "--no-such-option").returncode == 2 and "usage" in codes["2"]


def test_every_option_has_help_and_no_empty_choice():
    parser = make_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, command in sub.choices.items():
        for action in command._actions:
            assert action.help, f"cuforge {name} {action.dest}: no help"
            assert "" not in (action.choices or ()), f"cuforge {name} {action.dest}"


def _whole(description: str) -> bool:
    """A description that ends a sentence, parentheses closed."""
    return description.endswith((".", ")")) and description.count("(") == description.count(")")


def test_nox_and_invoke_list_whole_descriptions():
    nox = subprocess.run([str(BIN / "nox"), "-l"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    sessions = re.findall(r"^[*-] (\S+) -> (.+)$", nox, re.M)
    assert sessions and not [s for s in sessions if not _whole(s[1])]
    listing = subprocess.run([str(BIN / "invoke"), "--list"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
    tasks: dict[str, str] = {}
    for line in listing.splitlines()[1:]:
        if line.startswith("  ") and not line.startswith("   "):
            name, _, text = line.strip().partition(" ")
            tasks[name] = text.strip()
        elif line.strip() and tasks:
            last = list(tasks)[-1]
            tasks[last] += " " + line.strip()
    assert len(tasks) > 10 and not {n: d for n, d in tasks.items() if not _whole(d)}


def test_an_unknown_combo_gets_did_you_mean():
    proc = _cli("build", "--combo", "h20", "--dry-run")
    assert proc.returncode == 2 and "fix: did you mean h200?" in proc.stderr, proc.stderr


def test_not_a_wheel_names_the_wheelhouse_dirs(tmp_path):
    house = tmp_path / "wh" / "linux-x86_64" / "cu130" / "torch2.14.1-cp311"
    house.mkdir(parents=True)
    (house / "demo-0.1-cp311-cp311-linux_x86_64.whl").write_bytes(b"")
    (tmp_path / "wh" / "linux-x86_64" / "cu130" / "empty").mkdir()
    proc = _cli("verify", str(tmp_path / "typo"), CUFORGE_WHEELHOUSE=str(tmp_path / "wh"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    fix = proc.stderr.split("fix:")[1]
    assert str(house) in fix and "empty" not in fix, proc.stderr


def _house_with_a_wheel(tmp_path: Path) -> Path:
    from cuforge.core.digest import sha256_of
    from cuforge.publish.wheelhouse import Entry, Wheelhouse
    import zipfile
    house = tmp_path / "wh" / "linux-x86_64" / "cu130" / "torch2.14.1-cp311"
    house.mkdir(parents=True)
    wheel = tmp_path / "demo-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("demo/__init__.py", "")
        zf.writestr("demo-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo\n"
                    "Version: 0.1\n")
    Wheelhouse(house).publish(wheel, Entry(package="demo", status="compiled", version="0.1",
                                           wheel=wheel.name, wheel_sha256=sha256_of(wheel)))
    return house


@pytest.mark.slow   # needs the 3.11-cu130 env (the session makes it once)
def test_verify_ends_with_a_summary_line(tmp_path):
    import json
    house = _house_with_a_wheel(tmp_path)
    proc = _cli("verify", str(house), "--combo", "3.11-cu130")
    last = proc.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"verified 1 wheel in [\d.]+ s: (1 passed|1 FAILED \(demo\))", last), last
    as_json = _cli("verify", str(house), "--combo", "3.11-cu130", "--json")
    assert json.loads(as_json.stdout)["wheels"]   # stdout stays one JSON document
    assert "verified 1 wheel in " in as_json.stderr


def test_index_counts_in_words(tmp_path):
    house = _house_with_a_wheel(tmp_path)
    proc = _cli("index", str(house))
    assert proc.returncode == 0 and "(1 wheel, 1 project)" in proc.stdout, proc.stdout


def test_the_docs_exit_codes_are_errors_py():
    """docs/how-it-works.md names each error class with its code: the same as errors.py."""
    text = (ROOT / "docs" / "how-it-works.md").read_text().split("## Errors")[1].split("##")[0]
    documented = dict(re.findall(r"\b([A-Z]\w+) (\d+)\b", " ".join(text.split())))
    kinds = {k.__name__: str(k.exit_code) for k in errors.CuforgeError.__subclasses__()}
    assert documented == kinds
