"""Facts the docs state that the code holds, read against the code (as test_documented_commands
does for commands): the check list, a sample verdict line, the directories under .cuforge/ and
how their per-combo parts are named, the map of every module. (Exit codes:
test_command_line.py.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from cuforge.config.combos import select_combo
from cuforge.core.project import find_project
from cuforge.verify.report import CHECKS

ROOT = Path(__file__).resolve().parents[2]
DOCS = {p.relative_to(ROOT).as_posix(): p.read_text()
        for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
SOURCES = {p: p.read_text() for p in sorted((ROOT / "src" / "cuforge").rglob("*.py"))}
PINS = "pins"   # the check publishing adds (wheelmeta), after verification's own


def _subsequence(names: list[str], of: tuple[str, ...]) -> bool:
    it = iter(of)
    return all(name in it for name in names)


def test_check_lists_are_the_verification_checks():
    """What verification runs ("verify/ abi, symbols, ...", "verifies every wheel (abi, ...")
    is listed whole and in order; any other list of checks (a run's results: "abi, symbols,
    cudart pass") names real checks in their order."""
    whole, partial = [], []
    for name, text in DOCS.items():
        flat = " ".join(text.split())
        for match in re.finditer(r"\babi, symbols(?:, [a-z-]+)*", flat):
            names = match.group(0).split(", ")
            says_verify = "verif" in flat[max(0, match.start() - 30):match.start()]
            (whole if says_verify else partial).append((name, names))
    assert {n for n, _ in whole} >= {"README.md", "docs/how-it-works.md"}, whole
    assert not [w for w in whole if w[1] != list(CHECKS)], f"the checks are {CHECKS}: {whole}"
    assert not [p for p in partial if not _subsequence(p[1], (*CHECKS, PINS))], partial


# gpu-runs.md and dgx-spark.md quote runs as they printed then (before the pins check existed,
# some of them): a new check does not rewrite what a past run said
HISTORY = ("docs/gpu-runs.md", "docs/dgx-spark.md")


def test_sample_verdict_lines_are_what_a_build_prints():
    """`pkg: abi pass · symbols pass · ...`: every check of a published wheel, pins last."""
    samples = [(name, line) for name, text in DOCS.items() if name not in HISTORY
               for line in text.splitlines() if re.match(r"\s*[\w-]+: abi \w+ · ", line)]
    assert samples
    for name, line in samples:
        checks = [part.split()[0] for part in line.split(":", 1)[1].split(" · ")]
        assert checks == [*CHECKS, PINS], (name, line)


def _state_dirs() -> set[str]:
    """The directories the code makes right under the state dir (.cuforge/)."""
    names = set()
    for text in SOURCES.values():
        names |= set(re.findall(r'state_dir / "([a-z-]+)"', text))
    # compiler_cache names the state dir `state`
    names |= set(re.findall(r'\bstate / "([a-z-]+)"',
                            SOURCES[ROOT / "src" / "cuforge" / "pipeline" / "compiler_cache.py"]))
    return names


def test_the_kept_paths_table_lists_every_state_dir():
    made = _state_dirs()
    assert {"envs", "work", "logs", "sccache", "toolkits", "emulation", "upstream-tests"} <= made
    section = DOCS["docs/how-it-works.md"].split("## Where things are kept")[1].split("\n## ")[0]
    listed = set(re.findall(r"^\| `\.cuforge/([a-z-]+)/", section, re.M))
    assert made <= listed, f"not in the table: {sorted(made - listed)}"


def test_per_combo_dirs_are_named_as_the_code_names_them():
    """envs/, work/, logs/, sccache/, upstream-tests/ hold one dir per combo *and torch*
    (Combo.env_id): the docs write `<combo>-torch<ver>`, never `<combo>` alone."""
    combo = select_combo(find_project(ROOT), name="3.11-cu130")
    assert combo.env_id == f"{combo.id}-torch{combo.torch}"
    bare = [(name, m.group(0)) for name, text in DOCS.items()
            for m in re.finditer(r"\.cuforge/(?:envs|work|logs|sccache|upstream-tests)/<combo>/",
                                 text)]
    assert not bare, bare


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_the_quoted_refusal_of_another_machines_combo_is_what_cuforge_prints():
    """docs/dgx-spark.md quotes the refusal (it once said "only when asked" twice): the quote,
    up to its "...", is the start of what `cuforge build --combo spark` prints here."""
    import os
    import subprocess
    import sys
    section = DOCS["docs/dgx-spark.md"].split("with exit 2 and the switch named:")[1]
    quote = "\n".join(line for line in section.split("\n\n")[1].splitlines())
    quoted = _flat(quote).split(" ...")[0]
    proc = subprocess.run([sys.executable, "-m", "cuforge", "build", "--combo", "spark",
                           "--dry-run"], capture_output=True, text=True, cwd=ROOT,
                          env={k: v for k, v in os.environ.items() if k != "CUFORGE_DEBUG"})
    assert proc.returncode == 2, proc.stderr
    assert _flat(proc.stderr).startswith(quoted), (quoted, proc.stderr)


def test_the_heartbeat_promise_is_the_code():
    """docs/workstation.md: `... still running: ...` every N s: N is console.HEARTBEAT_S's
    default, the prefix is the one heartbeat() prints, and env creation's lines are venv's."""
    import re as _re
    text = _flat(DOCS["docs/workstation.md"])
    every = _re.search(r"`\.\.\. still running: <package>: [^`]+` every (\d+) s "
                       r"\(`CUFORGE_HEARTBEAT_S`\)", text)
    assert every, "the heartbeat promise moved"
    console = SOURCES[ROOT / "src" / "cuforge" / "core" / "console.py"]
    assert f'os.environ.get("CUFORGE_HEARTBEAT_S") or {every.group(1)})' in console
    assert 'f"... still running: {what}"' in console
    venv_src = SOURCES[ROOT / "src" / "cuforge" / "env" / "venv.py"]
    for said in ("creating the <combo> env", "created the <combo> env in"):
        assert said in text
    assert 'start=f"creating the {combo.id} env' in venv_src
    assert 'done=f"created the {combo.id} env"' in venv_src
    assert 'f"{done} in {duration(' in console   # timed() appends the time it took


def test_exit_codes_named_in_the_docs_are_errors_py():
    """Every "`<label>` (exit N)" and "<Kind> (exit code N)" in the docs is errors.py's."""
    import re as _re
    from cuforge.core import errors
    kinds = [errors.CuforgeError, *errors.CuforgeError.__subclasses__()]
    by_label = {k.label: k.exit_code for k in kinds}
    by_name = {k.__name__: k.exit_code for k in kinds}
    seen = []
    for name, text in DOCS.items():
        flat = _flat(text)
        for label, code in _re.findall(r"`([a-z ]+)` \(exit (\d+)\)", flat):
            if label in by_label:
                seen.append((name, label, int(code), by_label[label]))
        for kind, code in _re.findall(r"\b([A-Z]\w+Error) \(exit code (\d+)\)", flat):
            if kind in by_name:
                seen.append((name, kind, int(code), by_name[kind]))
    assert seen
    assert not [s for s in seen if s[2] != s[3]], seen


def map_entries(section: str) -> list[str]:
    """The modules docs/how-it-works.md's map lists, as paths under src/: a folder line
    (``    cuforge/env/``) then its modules (``      venv.py   ...``)."""
    entries, folder = [], None
    for line in section.splitlines():
        if m := re.match(r"^ {4}(cuforge/[a-z_/]*)", line):
            folder = m.group(1).rstrip("/")
        elif (m := re.match(r"^ {6}([a-z_0-9]+\.py)\b", line)) and folder:
            entries.append(f"{folder}/{m.group(1)}")
    return entries


def _docstring_only(text: str) -> bool:
    body = ast.parse(text).body
    return len(body) == 1 and isinstance(body[0], ast.Expr)


def test_the_map_lists_every_module_under_its_folder():
    """Every module, and every folder (a package whose __init__.py holds only its docstring
    is its folder's line)."""
    section = DOCS["docs/how-it-works.md"].split("## The map")[1].split("\n## ")[0]
    listed = map_entries(section)
    modules = sorted(p.relative_to(ROOT / "src").as_posix() for p, text in SOURCES.items()
                     if not (p.name == "__init__.py" and _docstring_only(text)))
    folders = {p.parent.relative_to(ROOT / "src").as_posix() for p in SOURCES}
    assert sorted(set(listed)) == sorted(listed), "a module listed twice"
    assert sorted(listed) == modules
    assert {f.rstrip("/") for f in re.findall(r"^ {4}(cuforge/[a-z_/]*)", section, re.M)} == folders


def test_the_map_reader_sees_folders_and_modules():
    text = "    cuforge/env/        envs\n      venv.py   the env\n" \
           "                        more about it.py\n    cuforge/\n      __main__.py  main\n"
    assert map_entries(text) == ["cuforge/env/venv.py", "cuforge/__main__.py"]
