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
    assert off == {"dry_run", "name"}   # an option not given ("") is off too
    plain = [m for m, _ in stays_tool.stays(("demo.top", "build"), modules, 3, off)]
    assert plain == ["demo.top", "demo.helpers", "demo.helpers", "demo.engine", "demo.engine"]
    dry = [m for m, _ in stays_tool.stays(("demo.top", "build"), modules, 3)]
    assert dry == ["demo.top", "demo.helpers", "demo.helpers", "demo.extra", "demo.engine",
                   "demo.engine"]
    shallow = [m for m, _ in stays_tool.stays(("demo.top", "build"), modules, 1, off)]
    assert shallow == ["demo.top", "demo.helpers", "demo.helpers", "demo.engine", "demo.engine"]
    assert [m for m, _ in stays_tool.stays(("demo.top", "build"), modules, 0, off)] == ["demo.top"]


def _threaded_package(tmp_path: Path) -> Path:
    """A build that hands each package to a thread, whose work is split over two mixins that
    call each other through ``self`` (as pipeline.executor's does)."""
    pkg = tmp_path / "src" / "demo"
    pkg.mkdir(parents=True)
    files = {
        "__init__.py": "",
        "top.py": """
            from concurrent.futures import ThreadPoolExecutor
            from dataclasses import dataclass
            from .runner import Runner
            from .team import fetch_team

            @dataclass
            class Request:
                wheels: str = ""

            def build(req):
                runner = Runner()
                runner.run(req)

            def unused():
                fetch_team()
            """,
        "runner.py": """
            from concurrent.futures import ThreadPoolExecutor
            from .gate import Gate
            from .sources import Sources
            from .team import fetch_team

            class Runner(Sources, Gate):
                def __init__(self):
                    self.jobs = 2

                def run(self, req):
                    if req.wheels:
                        fetch_team()          # a --wheels option not given: not taken
                    with ThreadPoolExecutor(2) as pool:
                        pool.submit(self._package, "a")   # a thread of its own, not a call

                def _package(self, name):
                    return self._publish(name)
            """,
        "gate.py": """
            from .log import say

            class Gate:
                def _publish(self, name):
                    say(name)
                    return self._wheel_for(name)   # Sources' method: self is a Runner
            """,
        "sources.py": """
            from .log import say

            class Sources:
                def _wheel_for(self, name):
                    say(name)
            """,
        "log.py": "def say(text):\n    return text\n",
        "team.py": "def fetch_team():\n    return None\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(textwrap.dedent(text))
    return tmp_path / "src"


def test_the_per_package_path_is_read_from_the_thread_it_runs_in(tmp_path):
    modules = stays_tool.load_package(_threaded_package(tmp_path), "demo")
    off = stays_tool.default_off(modules, "demo.top", "Request")
    assert off == {"wheels"}
    threads, seen = [], set()
    build = stays_tool.stays(("demo.top", "build"), modules, 3, off, threads, seen)
    assert [m for m, _ in build] == ["demo.top", "demo.runner", "demo.runner"]
    assert threads == [("demo.runner", "Runner._package")]
    package = stays_tool.package_stays(threads, modules, 3, off, seen)
    # log.say is read once; Gate's self._wheel_for lands in Sources, a mixin of the Runner
    assert [m for m, _ in package] == ["demo.runner", "demo.gate", "demo.log", "demo.sources"]


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
    store (core.atomic). 29 -> 34 (issue 50): the wheelhouse is asked whether it can be
    written before any work (publish.writable: a read-only or full one is exit 9 up front, not
    a traceback after the compile), the names of --only are taken as a person types them
    (config.names: simple_knn, Spconv, "did you mean"), the packages a setup's checkout holds
    are built from it (config.checkout.with_checkout; a plain build has no checkout, but the
    tool counts only bool flags as off), and the build ends with its results table
    (pipeline.results, the result `-q build` prints). 34 -> 35 (issue 52): the tool
    now takes a "" option (--wheels not given) as off too, so the team wheels' branch is left
    out and `plan.up_to_date` is read from `run`, one call higher, where its call into
    publish.wheelmeta shows (the same code measured 35; moving the modules of a package cycle
    to their layers kept it).

    The per-package path (issue 52), read from the function each package's thread runs
    (`Executor._package`), with a mixin's `self.method()` found from the executor's class
    (while it had mixins):
    15 at 4cc8f7b, 16 once the results table came (main 607cfa0), 16 after the moves.
    35 -> 36 and 16 -> 18 (issue 50, reproducible wheels): each package's path maps and
    source time, from builders/reproducible and the fetched tree's epoch (sources).
    36 -> 38 and 18 -> 15 (issue 52, one build context, no mixins): the context is a module of
    its own (context.open_context) and the wheelhouse's recover() is called on a local the tool
    follows; the package's flow is the executor's own, not a detour through a mixin.
    38 and 15 -> 8 (the house, third step: 53 -> 46 in all): the wheelhouse opened and recovered
    by one call (Wheelhouse.open), the verification context made once (one stay more:
    verify.context_from); a package's runner calls one scope (runner.package_commands),
    sccache's failure one question (compiler_cache.own_failure), the wheel's digest and version
    the wheelhouse's, the CCCL version the toolkit's, the FAILED line the executor's."""
    assert stays_tool.main(["cuforge.pipeline.executor:build"]) == 0
    build, package = capsys.readouterr().out.strip().splitlines()[-2:]
    assert build.startswith("cuforge.pipeline.executor:build") and _count(build) <= 38, build
    assert package.startswith("per package") and _count(package) <= 8, package
    assert _count(build) + _count(package) < 48   # below the build before issue 52: 33 + 15


def _count(line: str) -> int:
    """``...: 35 stays in 28 modules (...)`` -> 35."""
    return int(line.split("): ")[1].split()[0])
