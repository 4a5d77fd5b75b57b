"""The package's shape, read from its syntax trees (issue 42): one name per concept (no two
classes share a name), imports that flow one way (cli -> the commands -> the parts -> core),
no module longer than a reader can hold, and no dead code (every module-level function and
class is used somewhere in the package; a function only tests call is dead: the test keeps
its own helper)."""

from __future__ import annotations

import ast
import fnmatch
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import cuforge

PACKAGE = Path(cuforge.__file__).parent
SOURCES = {p.relative_to(PACKAGE).as_posix(): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}

# docs/how-it-works.md, "Architecture": a module imports its own layer or one below (issue 52:
# the parts are ordered too, so no two packages import each other)
ORDER = ["core", "data", "patching", "config", "env", "verify", "publish", "pipeline",
         "discovery", "workstation", "cli"]
LAYERS = {name: rank for rank, name in enumerate(ORDER)}

MAX_LINES = 450
LONGER: set[str] = set()   # modules allowed past MAX_LINES, each with its reason

# Used, though nothing in the package names them where the scan looks: (module pattern, name)
# -> why.
USED_THROUGH_DATA = {
    ("cuforge.cli.parser", "command_options"): "tasks.py makes an invoke task of each option",
    ("cuforge.cli.parser", "command_positionals"): "tasks.py makes an invoke task of each option",
    ("cuforge.pipeline.builders.*", "steps"):
        "a build kind's protocol (builders.KindModule): its module is found by kind_module",
    ("cuforge.pipeline.builders.*", "torch_defines"):
        "a build kind's protocol (builders.KindModule): its module is found by kind_module",
    ("cuforge.pipeline.builders.shim.cuforge_pccm", "patch"):
        "the shim's sitecustomize imports cuforge_pccm by file name, in the build's Python",
    ("cuforge.pipeline.builders.shim.cuforge_kernels", "keep"):
        "patches/spconv's setup.py imports cuforge_kernels by file name, in the build's Python",
}


def class_names(sources: dict[str, str]) -> dict[str, list[str]]:
    """Each class name -> where it is defined (``path:line``)."""
    found: dict[str, list[str]] = defaultdict(list)
    for rel, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                found[node.name].append(f"{rel}:{node.lineno}")
    return found


def test_no_two_classes_share_a_name():
    twice = {name: where for name, where in class_names(SOURCES).items() if len(where) > 1}
    assert twice == {}


def layer_of(module: str) -> int:
    parts = module.split(".")
    if module == "cuforge":
        return 0   # the version
    return LAYERS.get(parts[1], LAYERS["cli"]) if len(parts) > 1 else LAYERS["cli"]


def imports(sources: dict[str, str]) -> Iterator[tuple[str, list[str]]]:
    """(module, what one of its imports names) for every import, lazy ones too: ``from a.b
    import c`` names ``a.b`` and ``a.b.c`` (a module or a name of one)."""
    for rel, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module:
                yield _module_name(rel), [node.module,
                                          *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                yield _module_name(rel), [a.name for a in node.names]


def upward_imports(sources: dict[str, str]) -> list[str]:
    """``module -> imported`` for each import of a higher layer (lazy ones count too)."""
    return [f"{mod} -> {names[0]}" for mod, names in imports(sources)
            if names[0].split(".")[0] == "cuforge" and layer_of(names[0]) > layer_of(mod)]


def test_imports_flow_one_way():
    assert upward_imports(SOURCES) == []


def test_the_scan_sees_an_upward_import():
    sources = {"core/runner.py": "from cuforge.config.combos import Combo\n",
               "pipeline/plan.py": "def f():\n    from cuforge.workstation import doctor\n",
               "workstation/doctor.py": "from cuforge.pipeline.plan import make_plan\n"}
    assert upward_imports(sources) == ["cuforge.core.runner -> cuforge.config.combos",
                                       "cuforge.pipeline.plan -> cuforge.workstation"]


def package_cycles(sources: dict[str, str]) -> list[list[str]]:
    """Each set of packages (``cuforge.X``) that reach each other through imports, lazy ones
    too (issue 52: config <-> env through config/target.py, hidden by imports in functions):
    the strongly connected components of the package graph with more than one member."""
    edges: dict[str, set[str]] = defaultdict(set)
    for mod, names in imports(sources):
        here, there = mod.split("."), names[0].split(".")
        if len(here) > 1 and there[0] == "cuforge" and len(there) > 1 and there[1] != here[1]:
            edges[here[1]].add(there[1])
    reach = {p: _reachable(p, edges) for p in list(edges)}
    groups = {frozenset({p, *(q for q in reach[p] if p in reach.get(q, ()))}) for p in reach}
    return sorted(sorted(g) for g in groups if len(g) > 1)


def _reachable(start: str, edges: dict[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_no_two_packages_reach_each_other():
    assert package_cycles(SOURCES) == []


def test_the_scan_sees_a_package_cycle_through_a_lazy_import():
    sources = {"config/target.py": "def f():\n    from cuforge.env import emulation\n",
               "env/emulation.py": "X = 1\n",
               "env/venv.py": "from cuforge.publish.wheelhouse import MANIFEST\n",
               "publish/wheelhouse.py": "from cuforge.config.combos import Combo\n",
               "config/combos.py": "class Combo: ...\n",
               "verify/elf.py": "from cuforge.core import errors\n"}
    assert package_cycles(sources) == [["config", "env", "publish"]]


def test_every_package_has_its_place_in_the_order():
    packages = {rel.split("/")[0] for rel in SOURCES if "/" in rel}
    assert packages == set(ORDER)


def mutual_imports(sources: dict[str, str]) -> list[str]:
    """``a <-> b`` for two modules that import each other (lazy imports count too: a cycle
    hidden in a function is still one a reader must untangle)."""
    modules = {_module_name(rel) for rel in sources}
    edges: dict[str, set[str]] = defaultdict(set)
    for mod, names in imports(sources):
        edges[mod] |= {n for n in names if n in modules and n != mod}
    return sorted(f"{a} <-> {b}" for a in edges for b in edges[a]
                  if a < b and a in edges.get(b, set()))


def test_no_two_modules_import_each_other():
    assert mutual_imports(SOURCES) == []


def test_the_scan_sees_a_lazy_import_cycle():
    sources = {"env/venv.py": "def f():\n    from cuforge.env.resolve import resolve\n",
               "env/resolve.py": "from cuforge.env import venv\n",
               "env/other.py": "from cuforge.env.venv import f\n"}
    assert mutual_imports(sources) == ["cuforge.env.resolve <-> cuforge.env.venv"]


def test_no_module_is_longer_than_a_reader_can_hold():
    long = {rel: n for rel, text in SOURCES.items()
            if (n := len(text.splitlines())) > MAX_LINES and rel not in LONGER}
    assert long == {}


def test_the_scan_sees_a_second_class_of_a_name():
    found = class_names({"a.py": "class Target:\n    pass\n",
                         "b.py": "def f():\n    class Target: ...\n"})
    assert found["Target"] == ["a.py:1", "b.py:2"]


def _module_name(rel: str) -> str:
    parts = ["cuforge", *rel.removesuffix(".py").split("/")]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unused_definitions(sources: dict[str, str]) -> list[str]:
    """Module-level functions and classes that no module names, ``module:name``: a use is the
    name in its own module outside its own body, ``from module import name`` elsewhere, or
    ``alias.name`` where ``alias`` is the module imported."""
    trees = {_module_name(rel): ast.parse(text) for rel, text in sources.items()}
    defined = {(mod, node.name): node for mod, tree in trees.items() for node in tree.body
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    used: set[tuple[str, str]] = set()
    for mod, tree in trees.items():
        modules: dict[str, str] = {}   # a local name -> the package module it is
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    if f"{node.module}.{alias.name}" in trees:
                        modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                    else:
                        used.add((node.module, alias.name))
            elif isinstance(node, ast.Import):
                modules.update({a.asname: a.name for a in node.names
                                if a.asname and a.name in trees})
        inside = {key: {id(n) for n in ast.walk(node)}
                  for key, node in defined.items() if key[0] == mod}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in modules:
                used.add((modules[node.value.id], node.attr))
            elif isinstance(node, ast.Name) and (mod, node.id) in inside \
                    and id(node) not in inside[(mod, node.id)]:
                used.add((mod, node.id))
    return [f"{mod}:{name}" for mod, name in defined if (mod, name) not in used
            and not any(fnmatch.fnmatch(mod, pattern) and name == allowed
                        for pattern, allowed in USED_THROUGH_DATA)]


def test_every_function_and_class_is_used_in_the_package():
    assert unused_definitions(SOURCES) == []


def test_the_scan_sees_an_unused_function():
    sources = {"a.py": "def used(): ...\ndef dead(): return dead()\nclass Kept: ...\n",
               "b.py": "from cuforge.a import used\nfrom cuforge import a\nx = used(), a.Kept\n"}
    assert unused_definitions(sources) == ["cuforge.a:dead"]
