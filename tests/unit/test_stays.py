"""devtools/stays.py: the count of module stays along a call path (issue 31), on a package
written here and on cuforge itself."""

import importlib.util
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("stays", ROOT / "devtools" / "stays.py")
stays_tool = importlib.util.module_from_spec(_spec)
sys.modules["stays"] = stays_tool   # its dataclasses look their module up while being made
_spec.loader.exec_module(stays_tool)


def _package(tmp_path: Path) -> Path:
    pkg = tmp_path / "src" / "demo"
    pkg.mkdir(parents=True)
    files = {
        "__init__.py": "",
        "top.py": """
            from dataclasses import dataclass
            from . import helpers
            from .engine import Engine
            from .extra import dry

            @dataclass
            class Request:
                dry_run: bool = False
                name: str = ""

            def build(req):
                helpers.first()
                helpers.second()      # back from helpers: entering it again is a second stay
                local()
                if req.dry_run:
                    dry()             # a branch the plain request does not take
                engine = Engine()
                engine.run()          # followed through the local instance

            def local():
                helpers.first()       # read already: not followed twice
            """,
        "helpers.py": """
            def first():
                return third()        # within the module: no new stay

            def second():
                return 2

            def third():
                return 3
            """,
        "engine.py": """
            from .helpers import second

            class Engine:
                def __init__(self):
                    self.n = 0

                def run(self):
                    self._step()
                    second()          # read already

                def _step(self):
                    pass
            """,
        "extra.py": """
            def dry():
                return None
            """,
    }
    for name, text in files.items():
        (pkg / name).write_text(textwrap.dedent(text))
    return tmp_path / "src"


def test_counts_each_entry_into_another_module(tmp_path):
    src = _package(tmp_path)
    modules = stays_tool.load_package(src, "demo")
    off = stays_tool.default_off(modules, "demo.top", "Request")
    assert off == {"dry_run"}
    plain = [m for m, _ in stays_tool.stays(("demo.top", "build"), modules, 3, off)]
    assert plain == ["demo.top", "demo.helpers", "demo.helpers", "demo.engine", "demo.engine"]
    dry = [m for m, _ in stays_tool.stays(("demo.top", "build"), modules, 3)]
    assert dry == ["demo.top", "demo.helpers", "demo.helpers", "demo.extra", "demo.engine",
                   "demo.engine"]
    shallow = [m for m, _ in stays_tool.stays(("demo.top", "build"), modules, 1, off)]
    assert shallow == ["demo.top", "demo.helpers", "demo.helpers", "demo.engine", "demo.engine"]
    assert [m for m, _ in stays_tool.stays(("demo.top", "build"), modules, 0, off)] == ["demo.top"]


def test_following_a_build_request_does_not_grow(capsys):
    """A ratchet: the plain `cuforge build` path at depth 3 (docs/how-it-works.md gives the
    numbers). Lower it when a change shortens the path; a change that lengthens it should
    say why here. 29 -> 34 with issue 43: the inputs are refused before anything is written
    (inputs.check_build, which enters teamwheels, venv.is_ready and resolve), and the env's
    creation has its own heartbeat (venv._create's console). 34 -> 33: the --wheels path's
    meaning moved to config/inputs, and the env's creation says itself through one
    console.timed. 33 -> 29 (issue 42): the build's own slow phases use console.timed too
    (no heartbeat and clock of its own), "can this env be made" is one question of
    env/resolve (require_resolvable), and one atomic writer serves scripts, caches and the patch
    store (core.atomic). 29 -> 30 (issue 50, reproducible wheels): each package's path maps
    and source time, one call into builders/reproducible."""
    assert stays_tool.main(["cuforge.pipeline.executor:build"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    count = int(line.split(": ")[1].split()[0])
    assert count <= 30, line
