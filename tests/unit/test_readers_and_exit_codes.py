"""One way each (issue 52): cuforge's TOML is read by one reader per kind of file (the project's
files through ``core.tomlfile.read_toml``, which names the file and line of a syntax error;
the package's own tables through ``data.table``), and a command's exit code comes only from
the error family (``core/errors.py``: an error kind's ``exit_code``, INTERRUPTED,
CLOSED_PIPE), never a literal a reader must look up."""

from __future__ import annotations

import ast
from pathlib import Path

import cuforge

PACKAGE = Path(cuforge.__file__).parent
SOURCES = {p.relative_to(PACKAGE).as_posix(): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}

# The modules that may parse TOML themselves, each with why
TOML_READERS = {
    "core/tomlfile.py": "read_toml: the project's files (envs/, recipes/, stacks/, patches/)",
    "data/__init__.py": "data.table: cuforge's own tables, read once",
    "pipeline/builders/pep517.py": "an upstream tree's pyproject.toml, in the build's Python",
    "discovery/buildfiles.py": "a user's checkout's pyproject.toml (its [project] name): not "
                               "our data, so a broken one is read as nameless, not an error",
}
# Programs of their own, which cannot import the package: each with why
OWN_EXIT_CODES = {
    "core/supervisor.py": "stdlib only (it runs before cuforge is importable): the shell's 2, 127",
    "pipeline/builders/pep517.py": "a script the build's Python runs: 1 is a failed build_wheel",
}


def toml_parsers(sources: dict[str, str]) -> list[str]:
    """``path:line`` of each use of ``tomllib`` or of ``cuforge.data``'s files read directly."""
    found = []
    for rel, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id == "tomllib":
                found.append(f"{rel}:{node.lineno}")
            elif isinstance(node, ast.ImportFrom) and node.module == "tomllib":
                found.append(f"{rel}:{node.lineno}")
            elif isinstance(node, ast.Constant) and node.value == "cuforge.data":
                found.append(f"{rel}:{node.lineno}")
    return found


def literal_exit_codes(sources: dict[str, str]) -> list[str]:
    """``path:line`` of each ``return N`` / ``... else N`` / ``sys.exit(N)`` with a literal
    N other than 0 (success needs no name)."""
    found = []
    for rel, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            values: list[ast.expr] = []
            if isinstance(node, ast.Return) and node.value is not None:
                v = node.value
                values = [v.body, v.orelse] if isinstance(v, ast.IfExp) else [v]
            elif isinstance(node, ast.Call) and node.args and (
                    getattr(node.func, "attr", None) in ("exit", "_exit")
                    or getattr(node.func, "id", None) in ("exit", "SystemExit")):
                values = [node.args[0]]
            if any(isinstance(v, ast.Constant) and type(v.value) is int and v.value != 0
                   for v in values):
                found.append(f"{rel}:{node.lineno}")
    return found


def test_toml_is_read_by_one_reader_per_kind_of_file():
    assert [w for w in toml_parsers(SOURCES) if w.split(":")[0] not in TOML_READERS] == []


def test_the_scan_sees_a_toml_reader_of_its_own():
    sources = {"config/ci.py": "import tomllib\ndef f(p):\n    return tomllib.loads(p)\n",
               "config/arches.py": "from importlib import resources\n"
                                   "T = resources.files('cuforge.data')\n",
               "config/recipes.py": "from cuforge.core.tomlfile import read_toml\n"}
    assert toml_parsers(sources) == ["config/ci.py:3", "config/arches.py:2"]


def test_exit_codes_come_from_the_error_family():
    assert [w for w in literal_exit_codes(SOURCES) if w.split(":")[0] not in OWN_EXIT_CODES] == []


def test_the_scan_sees_a_literal_exit_code():
    sources = {"cli/commands.py": "def cmd(a):\n    return 0 if a else 3\n",
               "verify/x.py": "def f():\n    return 7\n",
               "ok.py": "def g(e):\n    return 0 if e else e.exit_code\n"
                        "def h(n):\n    return n - 1\n"}
    assert literal_exit_codes(sources) == ["cli/commands.py:2", "verify/x.py:2"]
