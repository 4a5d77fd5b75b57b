#!/usr/bin/env python3
"""Count the *stays* along a call path: how often a reader who follows a request through the
code lands in another module (issue 31's measure of how spread out one decision is).

usage: python devtools/stays.py [--depth N] [--src DIR] [--show] [MODULE:FUNCTION]
       default: cuforge.pipeline.executor:build, depth 3, src/

The reader starts in the function, reads its calls in source order and follows each one that
lands in a function of the package (a module-level function, a class - its ``__init__`` - or a
``self.`` method), down to DEPTH calls below the start. A function already read is not read
again. Coming back to the caller counts as landing there again when the caller goes on to
follow another call. A stay is each landing in a module other than the one the reader is in;
the first module is stay 1. Calls the code makes through data (a handler table, a callback)
are not followed: a reader sees the table, not a call. A ``self.method()`` is looked up from the
class of the object (a mixin's call lands in the sibling mixin that defines it).

A function handed to another thread (``pool.submit(fn, ...)``, ``Thread(target=fn)``) is where
each package's work runs: the build's path stops there, and the *per-package path* is read
from it as from a start (the same depth; functions the build's path read are not read again),
and reported on a line of its own. ``if req.FLAG:`` branches are left out for the request's
``bool = False`` flags and its ``str = ""`` options (``--wheels`` not given).
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

FuncKey = tuple[str, str]   # (module, "func" or "Class.method")


@dataclass
class Module:
    name: str
    path: Path
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    classes: set[str] = field(default_factory=set)
    bases: dict[str, list[str]] = field(default_factory=dict)   # class -> its bases' names
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)   # alias -> (mod, attr)


def load_package(src: Path, package: str) -> dict[str, Module]:
    modules: dict[str, Module] = {}
    paths = sorted((src / package).rglob("*.py"))
    names = {_module_name(src, p) for p in paths}
    for path in paths:
        mod = Module(_module_name(src, path), path)
        tree = ast.parse(path.read_text(), str(path))
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                mod.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                mod.classes.add(node.name)
                mod.bases[node.name] = [b.id for b in node.bases if isinstance(b, ast.Name)]
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        mod.functions[f"{node.name}.{item.name}"] = item
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(tree):   # lazy imports inside functions count as well
            if isinstance(node, ast.ImportFrom):
                base = mod.name.split(".") if is_pkg else mod.name.split(".")[:-1]
                if node.level:
                    base = base[: len(base) - node.level + 1]
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                for alias in node.names:
                    target = f"{stem}.{alias.name}"
                    mod.imports[alias.asname or alias.name] = (
                        (target, None) if target in names else (stem, alias.name))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        mod.imports[alias.asname] = (alias.name, None)
        modules[mod.name] = mod
    return modules


def _module_name(src: Path, path: Path) -> str:
    """``src/cuforge/verify/wheel.py`` -> ``cuforge.verify.wheel`` (a package: its __init__)."""
    rel = path.relative_to(src).with_suffix("")
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


def _request_flag(test: ast.expr) -> tuple[str, bool] | None:
    """``if req.dry_run:`` / ``if not self.req.dry_run:`` -> ("dry_run", True / False)."""
    negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    node = test.operand if negated else test
    if isinstance(node, ast.Attribute):
        owner = node.value
        if (isinstance(owner, ast.Name) and owner.id == "req") or (
                isinstance(owner, ast.Attribute) and owner.attr == "req"):
            return node.attr, not negated
    return None


def _calls_in_order(func: ast.AST, off: frozenset[str] = frozenset()) -> list[ast.Call]:
    """The calls in a function body in reading order (outer call before its arguments), not
    those of functions or classes defined inside it. ``off``: the request's flags that are
    false, so an ``if req.FLAG:`` body is a branch this request does not take."""
    calls: list[ast.Call] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and (flag := _request_flag(node.test)) and flag[0] in off:
            visit_all(node.orelse if flag[1] else node.body)
            return
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                continue
            if isinstance(child, ast.Call):
                calls.append(child)
            visit(child)

    def visit_all(nodes: list[ast.stmt]) -> None:
        for stmt in nodes:
            visit(stmt)

    visit(func)
    return calls


def local_instances(func: ast.AST, where: FuncKey, modules: dict[str, Module]
                    ) -> dict[str, FuncKey]:
    """``name = SomeClass(...)`` in a function: ``name.method()`` is then SomeClass's method."""
    out: dict[str, FuncKey] = {}
    for node in ast.walk(func):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call)):
            init = resolve_call(node.value, where, modules, {})
            if init and init[1].endswith(".__init__"):
                out[node.targets[0].id] = init
    return out


def resolve_call(call: ast.Call, where: FuncKey, modules: dict[str, Module],
                 instances: dict[str, FuncKey],
                 self_class: tuple[str, str] | None = None) -> FuncKey | None:
    """The package function ``call`` lands in, or None. ``self_class``: the class of the
    object ``self`` is (a mixin's ``self.method()`` is looked up from it, as Python does)."""
    mod = modules[where[0]]
    cls = where[1].split(".")[0] if "." in where[1] else None

    def named(module: str, name: str) -> FuncKey | None:
        target = modules.get(module)
        if target is None:
            return None
        if name in target.functions:
            return (module, name)
        if name in target.classes:
            return (module, f"{name}.__init__") if f"{name}.__init__" in target.functions else None
        if name in target.imports:   # a re-export: follow it to where it is defined
            src_mod, attr = target.imports[name]
            return named(src_mod, attr) if attr else None
        return None

    fn = call.func
    if isinstance(fn, ast.Name):
        if fn.id in mod.functions or fn.id in mod.classes:
            return named(mod.name, fn.id)
        if fn.id in mod.imports:
            src_mod, attr = mod.imports[fn.id]
            return named(src_mod, attr) if attr else None
        return None
    if isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name):
        owner = fn.value.id
        if owner in instances:                       # executor = Executor(...); executor.run()
            module, init = instances[owner]
            key = f"{init.split('.')[0]}.{fn.attr}"
            return (module, key) if key in modules[module].functions else None
        if owner == "self" and cls:
            return (method(modules, *self_class, fn.attr) if self_class else None) \
                or method(modules, mod.name, cls, fn.attr)
        if owner in mod.classes:
            key = f"{owner}.{fn.attr}"
            return (mod.name, key) if key in mod.functions else None
        if owner in mod.imports:
            src_mod, attr = mod.imports[owner]
            if attr is None:                         # a module: mod.func(...)
                return named(src_mod, fn.attr)
            key = f"{attr}.{fn.attr}"                # an imported class: Class.method(...)
            target = modules.get(src_mod)
            return (src_mod, key) if target and key in target.functions else None
    return None


def method(modules: dict[str, Module], module: str, cls: str, name: str,
           depth: int = 0) -> FuncKey | None:
    """``cls.name`` where it is defined: the class, else its bases in order (a mixin in another
    module is where the reader goes next)."""
    mod = modules[module]
    if f"{cls}.{name}" in mod.functions:
        return (module, f"{cls}.{name}")
    for base in mod.bases.get(cls, []) if depth < 10 else []:
        where = _class(modules, module, base)
        if where and (found := method(modules, *where, name, depth + 1)):
            return found
    return None


def _class(modules: dict[str, Module], module: str, name: str) -> tuple[str, str] | None:
    """(module, class) of the class ``name`` as ``module`` sees it (a re-export followed)."""
    mod = modules[module]
    if name in mod.classes:
        return module, name
    if name in mod.imports:
        src_mod, attr = mod.imports[name]
        if attr and src_mod in modules:
            return _class(modules, src_mod, attr)
    return None


def handed_off(call: ast.Call) -> ast.expr | None:
    """The function a call hands to another thread (``pool.submit(fn, ...)``,
    ``pool.map(fn, ...)``, ``Thread(target=fn)``), as the expression that names it."""
    fn = call.func
    name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
    if name in ("submit", "map") and call.args:
        return call.args[0]
    if name == "Thread":
        return next((k.value for k in call.keywords if k.arg == "target"), None)
    return None


def default_off(modules: dict[str, Module], module: str, request: str) -> frozenset[str]:
    """The request's flags that are off unless asked: its dataclass's ``bool = False`` fields
    and ``str = ""`` options (``--wheels``, ``--cache`` not given); the class is looked up
    where ``module`` imports it from, else in ``module``."""
    origin = modules[module].imports.get(request, (module, None))[0]
    path = modules.get(origin, modules[module]).path
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ClassDef) and node.name == request:
            return frozenset(
                item.target.id for item in node.body
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                and isinstance(item.value, ast.Constant)
                and (item.value.value is False or item.value.value == ""))
    return frozenset()


def stays(start: FuncKey, modules: dict[str, Module], depth: int,
          off: frozenset[str] = frozenset(),
          threads: list[FuncKey] | None = None,
          seen: set[FuncKey] | None = None) -> list[tuple[str, str]]:
    """Each stay in reading order, as (module, the call that lands there): the start, then
    every call followed from one module into another (a call within a module keeps the reader
    where it is). A function handed to another thread (``pool.submit(fn)``) is not a call:
    it is put in ``threads`` for a walk of its own (``package_stays``). ``seen`` gets every
    function read."""
    return _walk([start], modules, depth, off, set() if seen is None else seen,
                 [] if threads is None else threads)


def package_stays(entries: list[FuncKey], modules: dict[str, Module], depth: int,
                  off: frozenset[str] = frozenset(),
                  seen: set[FuncKey] | None = None) -> list[tuple[str, str]]:
    """The per-package path: the stays of the functions the build hands to its threads (each
    package's work), read from each one as from a start, DEPTH calls deep; a hand-off inside
    it (a wheel's import and smoke side by side) is read as a call. ``seen``: functions the
    build's path read already (not read again)."""
    return _walk(entries, modules, depth, off, set(seen or ()), None)   # None: read inline


def _walk(starts: list[FuncKey], modules: dict[str, Module], depth: int, off: frozenset[str],
          seen: set[FuncKey], threads: list[FuncKey] | None) -> list[tuple[str, str]]:
    entered: list[tuple[str, str]] = []

    def read(key: FuncKey, level: int, self_class: tuple[str, str] | None) -> None:
        seen.add(key)
        if level == depth:
            return
        func = modules[key[0]].functions[key[1]]
        instances = local_instances(func, key, modules)
        for call in _calls_in_order(func, off):
            ref = handed_off(call)
            target = resolve_call(ast.Call(ref, [], []), key, modules, instances, self_class) \
                if ref else None
            if target is not None and threads is not None:
                if target not in threads:
                    threads.append(target)
                continue
            via = ref if target is not None else call.func
            callee = target or resolve_call(call, key, modules, instances, self_class)
            if callee is None or callee in seen:
                continue
            if callee[0] != key[0]:
                entered.append((callee[0], f"{callee[1]}  <- {key[0].split('.')[-1]}.{key[1]}"))
            read(callee, level + 1, self_class if _on_self(via) else _class_of(callee))

    for start in starts:
        if start in seen:
            continue
        entered.append((start[0], start[1]))
        read(start, 0, _class_of(start))
    return entered


def _on_self(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) \
        and expr.value.id == "self"


def _class_of(key: FuncKey) -> tuple[str, str] | None:
    return (key[0], key[1].split(".")[0]) if "." in key[1] else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("start", nargs="?", default="cuforge.pipeline.executor:build")
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--src", type=Path, default=Path(__file__).resolve().parents[1] / "src")
    parser.add_argument("--show", action="store_true", help="list the stays in order")
    parser.add_argument("--request", default="BuildRequest",
                        help="the request class beside the start whose False flags prune "
                        "`if req.FLAG:` branches (default: BuildRequest, a plain `cuforge build`)")
    parser.add_argument("--flag", action="append", default=[], metavar="NAME",
                        help="a request flag that is on (e.g. dry_run, upstream_tests)")
    args = parser.parse_args(argv)
    module, func = args.start.split(":")
    modules = load_package(args.src, module.split(".")[0])
    if module not in modules or func not in modules[module].functions:
        print(f"stays: no function {args.start} under {args.src}", file=sys.stderr)
        return 2
    off = default_off(modules, module, args.request) - set(args.flag)
    threads: list[FuncKey] = []
    seen: set[FuncKey] = set()
    visits = stays((module, func), modules, args.depth, off, threads, seen)
    package = package_stays(threads, modules, args.depth, off, seen)
    on = "".join(f", {f}" for f in args.flag)
    _report(f"{args.start} (depth {args.depth}{on})", visits, args.show)
    names = ", ".join(f for _, f in threads) or "none"
    _report(f"per package, in its thread ({names})", package, args.show)
    return 0


def _report(what: str, visits: list[tuple[str, str]], show: bool) -> None:
    if show:
        for i, (m, via) in enumerate(visits, 1):
            print(f"{i:3} {m}: {via}")
    per_module: dict[str, int] = {}
    for m, _ in visits:
        per_module[m] = per_module.get(m, 0) + 1
    most = ", ".join(f"{m.split('.')[-1]} {n}" for m, n in
                     sorted(per_module.items(), key=lambda kv: -kv[1])[:5])
    print(f"{what}: {len(visits)} stays in {len(per_module)} modules (most entered: {most})")


if __name__ == "__main__":
    sys.exit(main())
