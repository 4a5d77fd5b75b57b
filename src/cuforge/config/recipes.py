"""Package recipes: one TOML file per package under ``recipes/``, read into frozen objects,
and the build plan (dependency order) derived from them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from enum import StrEnum
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

from cuforge.config.arches import ArchPolicy, ArchRule
from cuforge.config.api import ApiRule, parse_api
from cuforge.config.stress import StressRule, parse_stress
from cuforge.config.names import as_known
from cuforge.config.kernels import KernelFilter, parse_kernels
from cuforge.core.errors import ConfigError, NothingToDo
from cuforge.core.project import Project
from cuforge.core.tomlfile import read_toml, refuse_unknown_keys


class BuildKind(StrEnum):
    """How a recipe becomes a wheel. Whether a kind compiles is said here, where every layer
    reads it; how it builds is its module in ``cuforge.pipeline.builders``, one per kind with
    the same interface (``builders.KindModule``, found by ``builders.kind_module``)."""

    SETUPTOOLS = "setuptools"   # setup.py / pyproject through the PEP 517 hooks
    CMAKE = "cmake"             # a CMake project through scikit-build-core
    PREBUILT = "prebuilt"       # a published wheel, pinned by sha256

    @property
    def compiles(self) -> bool:
        """Whether building this kind runs compilers (takes compile slots and jobs); a
        prebuilt is a download."""
        return self is not BuildKind.PREBUILT

    @classmethod
    def parse(cls, value: str, where: str) -> BuildKind:
        try:
            return cls(value)
        except ValueError:
            raise ConfigError(f"{where}: kind must be one of {', '.join(cls)}, not {value!r}",
                              hint="setuptools (setup.py/pyproject), cmake (scikit-build-core) "
                              "or prebuilt (a published wheel, pinned by sha256)") from None

RECIPE_KEYS = {"name", "kind", "depends", "modules", "smoke", "patches", "config_settings",
               "source", "arches", "env", "prebuilt", "requires", "extra_sources", "build_requires",
               "notes", "compile_memory_gb", "upstream_tests", "stress", "kernels", "api"}


class SourceKind(StrEnum):
    PATH = "path"     # a local tree (ours in native/, or --src)
    GIT = "git"       # a repository at a pinned commit
    SDIST = "sdist"   # a published source archive, pinned by sha256
    NONE = "none"     # no source (a prebuilt)


@dataclass(frozen=True)
class Source:
    """Where a package's source comes from: exactly one of path, git, sdist."""

    path: str = ""            # relative to the project root (native/...) or absolute
    git: str = ""
    commit: str = ""
    subdir: str = ""
    sdist: str = ""
    sha256: str = ""
    checkout: str = ""        # a path that is this folder of the user's checkout (setup)

    @property
    def kind(self) -> SourceKind:
        return (SourceKind.PATH if self.path else SourceKind.GIT if self.git
                else SourceKind.SDIST if self.sdist else SourceKind.NONE)

    def describe(self) -> str:
        """What the manifest records: ``url@commit[:subdir]``, ``sdist-url#sha256=...``, or a path."""
        if self.git:
            return f"{self.git}@{self.commit}" + (f":{self.subdir}" if self.subdir else "")
        if self.sdist:
            return f"{self.sdist}#sha256={self.sha256}"
        return self.path


@dataclass(frozen=True)
class SystemHeader:
    """A header the build needs from the system, and the package that provides it."""

    header: str            # e.g. "google/dense_hash_map"
    debian: str            # e.g. "libsparsehash-dev"


# Smoke scripts are smoke/check_<name>.py: a script is run as a file, so its directory comes
# first on sys.path, and smoke/pointgroup_ops.py imported itself instead of the package.
SMOKE_PREFIX = "check_"


@dataclass(frozen=True)
class SmokeRule:
    """A recipe's ``smoke`` entry: ``smoke = "path"`` or a ``[smoke]`` table.

    ``gpu = false`` declares a smoke test that runs without a GPU (tetra-triangulation: CGAL's
    Delaunay on the CPU); ``requires`` are packages the script compares against (scipy),
    installed into the combo env before it runs when they are missing.
    """

    script: str = ""            # relative to the project root; "" = smoke/check_<name>.py
    gpu: bool = True
    requires: tuple[str, ...] = ()

    def path(self, project: Project, name: str) -> Path:
        return project.root / self.script if self.script else \
            project.smoke_dir / f"{SMOKE_PREFIX}{name}.py"


@dataclass(frozen=True)
class UpstreamTests:
    """A recipe's ``[upstream_tests]``: upstream's own test suite, run against the built wheel
    (``cuforge verify --upstream-tests``; see ``cuforge.verify.upstream``).

    ``path`` is the suite inside its tree: the recipe's own ``[source]`` tree, or
    ``[upstream_tests.source]`` (a second pinned source, fetched like ``[source]``) when the
    package's sdist lacks its tests. ``command`` is an argument list: ``python`` is the combo
    interpreter, any other first word a module run with it (``pytest`` = ``python -m pytest``),
    and ``{tests}`` the copied suite's path. ``requires`` are the extra test requirements,
    each pinned ``name==version`` and installed without dependencies (list the whole closure,
    like a lock file: no resolver may replace the combo's torch).
    """

    path: str
    command: tuple[str, ...]
    requires: tuple[str, ...] = ()
    gpu: bool = True
    timeout: float = 900.0
    source: Source | None = None     # None: the recipe's own [source]

    def argv(self, python: str, tests: str) -> list[str]:
        """The command as run, ``{tests}`` replaced.

        >>> UpstreamTests("test", ("pytest", "-q", "{tests}")).argv("py", "test")
        ['py', '-m', 'pytest', '-q', 'test']
        >>> UpstreamTests("tests", ("python", "{tests}/test.py")).argv("py", "tests")
        ['py', 'tests/test.py']
        """
        head, *rest = (arg.replace("{tests}", tests) for arg in self.command)
        return [python, *rest] if head == "python" else [python, "-m", head, *rest]


UPSTREAM_TEST_KEYS = {"path", "command", "requires", "gpu", "timeout", "source", "why"}




@dataclass(frozen=True)
class Recipe:
    name: str
    kind: BuildKind
    source: Source
    depends: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    smoke: SmokeRule = field(default_factory=SmokeRule)
    patches: tuple[str, ...] = ()
    arches: ArchRule = field(default_factory=ArchRule)
    env: tuple[tuple[str, str], ...] = ()
    prebuilt: tuple[str, ...] = ()         # requirement strings to try as wheels first
    prebuilt_find_links: str = ""
    prebuilt_sha256: tuple[str, ...] = ()   # the accepted files: a download must match one
    config_settings: tuple[tuple[str, str], ...] = ()   # PEP 517 config settings of the build
    system_headers: tuple[SystemHeader, ...] = ()
    extra_sources: tuple[tuple[str, Source], ...] = ()   # (variable, source): e.g. upstream
    build_requires: tuple[str, ...] = ()                 # PyPI packages the build imports
    # measured peak of one device compilation (cicc/ptxas) in GB; 0: the default estimate
    # (toolchain.NVCC_MEM_PER_JOB). The plan lowers the package's jobs to fit the memory.
    compile_memory_gb: float = 0.0
    upstream_tests: UpstreamTests | None = None   # upstream's own suite ([upstream_tests])
    stress: StressRule | None = None              # a repeated GPU workload ([stress])
    kernels: KernelFilter | None = None   # [kernels]: parameter sets a build leaves out
    file: Path | None = None
    api: ApiRule | None = None                    # [api]: how discovery knows a fork of it
    # a discovered extension's content (``src1a2b3c4d``, cuforge.discovery.found): the end of
    # its wheels' local version, so that forks sharing a name never share a wheel file
    variant: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", BuildKind(self.kind))   # ValueError: no such kind

    @property
    def mapped_name(self) -> str:
        """The name its build paths are mapped to in the wheel (``-ffile-prefix-map``): a
        discovered recipe's without its ``@CHECKOUT``, so that the same code found in two
        checkouts gives the same bytes (one wheel file, content-labelled, serves both).

        >>> Recipe("simple-knn@gaussian-splatting", BuildKind.SETUPTOOLS, Source()).mapped_name
        'simple-knn'
        """
        return self.name.partition("@")[0]


def load_recipes(project: Project) -> dict[str, Recipe]:
    """Every ``recipes/*.toml`` and the project's discovered recipes, keyed by package name."""
    recipes: dict[str, Recipe] = {}
    for path in sorted(project.recipes_dir.glob("*.toml")):
        recipe = parse_recipe(path)
        if recipe.name in recipes:
            raise ConfigError(f"two recipes declare package {recipe.name!r}: {path} and "
                              f"{recipes[recipe.name].file}")
        recipes[recipe.name] = recipe
    for found in project.discovered:   # named NAME@CHECKOUT: never a file recipe's name
        assert isinstance(found, Recipe)
        recipes[found.name] = found
    for r in recipes.values():
        for dep in r.depends:
            if dep not in recipes:
                raise ConfigError(f"recipe {r.name} depends on {dep!r}, which has no recipe",
                                  hint=f"add recipes/{dep}.toml or fix `depends` in {r.file}")
        _check_patch_sets(project, r)
    return recipes


def _check_patch_sets(project: Project, recipe: Recipe) -> None:
    """Every patch set a recipe names exists and targets paths inside the tree, so a typo stops
    the run before anything is built (the rest is checked when it applies)."""
    from cuforge.patching.manifest import check_named_sets   # lazily: the engine is not small
    check_named_sets(project.patches_dir, (*recipe.patches, *recipe.arches.native_patches),
                     f"recipe {recipe.name} ({recipe.file})", "fix `patches` in the recipe")


def parse_recipe(path: Path) -> Recipe:
    data = read_toml(path, "recipe")
    where = str(path)
    unknown = set(data) - RECIPE_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}",
                          hint=f"a recipe may have: {', '.join(sorted(RECIPE_KEYS))}")
    name = data.get("name") or path.stem
    kind = BuildKind.parse(data.get("kind", "setuptools"), where)
    source = _source(data.get("source", {}), where)
    if kind is not BuildKind.PREBUILT and source.kind is SourceKind.NONE:
        raise ConfigError(f"{where}: [source] needs one of path, git (+commit), sdist (+sha256)",
                          hint="see recipes/cuforge-demo.toml and docs/adding-a-package.md")
    arch = data.get("arches", {})
    policy = ArchPolicy.parse(arch.get("policy", "native"), f"{where}: arches.policy")
    prebuilt = data.get("prebuilt", {})
    pins = _prebuilt_pins(prebuilt, where)
    return Recipe(
        name=name,
        kind=kind,
        source=source,
        depends=tuple(data.get("depends", ())),
        modules=tuple(data.get("modules", (name.replace("-", "_"),))),
        smoke=_smoke(data.get("smoke", {}), where),
        patches=tuple(data.get("patches", ())),
        arches=ArchRule(policy, tuple(arch.get("supported", ())),
                        tuple(sorted(arch.get("env", {}).items())), bool(arch.get("ptx", True)),
                        bool(arch.get("device_code", True)),
                        tuple(arch.get("native_patches", ())),
                        bool(arch.get("append_gencode", False))),
        env=tuple(sorted(data.get("env", {}).items())),
        prebuilt=tuple(prebuilt.get("requirements", ())),
        prebuilt_find_links=prebuilt.get("find_links", ""),
        prebuilt_sha256=pins,
        config_settings=tuple(sorted((k, str(v)) for k, v in
                                     data.get("config_settings", {}).items())),
        system_headers=tuple(SystemHeader(r["header"], r.get("debian", "?"))
                             for r in data.get("requires", ())),
        extra_sources=tuple((var, _source(row, f"{where} [extra_sources.{var}]"))
                            for var, row in data.get("extra_sources", {}).items()),
        build_requires=tuple(data.get("build_requires", ())),
        compile_memory_gb=_memory_gb(data.get("compile_memory_gb", 0), where),
        upstream_tests=_upstream_tests(data.get("upstream_tests"), where),
        stress=parse_stress(data.get("stress"), where),
        kernels=parse_kernels(data.get("kernels"), where),
        api=parse_api(data.get("api"), where),
        file=path,
    )


def _memory_gb(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(f"{where}: compile_memory_gb must be a number of GB, not {value!r}",
                          hint="the peak memory of one of its compilers, e.g. "
                          "compile_memory_gb = 7 (watch cicc in top during a build)")
    return float(value)


def _upstream_tests(table: dict | None, where: str) -> UpstreamTests | None:
    """Parse ``[upstream_tests]``; every mistake is a ConfigError naming the key."""
    if table is None:
        return None
    where = f"{where} [upstream_tests]"
    refuse_unknown_keys(table, UPSTREAM_TEST_KEYS, where, "[upstream_tests]")
    path = str(table.get("path", ""))
    if not path or Path(path).is_absolute() or ".." in Path(path).parts:
        raise ConfigError(f"{where}: `path` must name the suite inside its source tree, "
                          f"got {path!r}", hint='e.g. path = "test" (a folder) or "tests"')
    command = table.get("command")
    if not command or not isinstance(command, list) or not all(isinstance(a, str) for a in command):
        raise ConfigError(f"{where}: `command` must be a list of strings",
                          hint='e.g. command = ["pytest", "-q", "{tests}"] or '
                               '["python", "{tests}/test.py"]')
    requires = tuple(str(r) for r in table.get("requires", ()))
    for text in requires:
        _require_pinned(text, where, what="test requirement",
                        why=": a test run must be repeatable")
    timeout = table.get("timeout", 900)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ConfigError(f"{where}: `timeout` must be a number of seconds, not {timeout!r}")
    source = _source(table["source"], f"{where}.source") if "source" in table else None
    if source is not None and source.kind is SourceKind.NONE:
        raise ConfigError(f"{where}.source needs one of path, git (+commit), sdist (+sha256)")
    return UpstreamTests(path, tuple(command), requires, bool(table.get("gpu", True)),
                         float(timeout), source)


def _require_pinned(text: str, where: str, *, what: str, why: str) -> None:
    """``text`` is ``name==version`` (one exact version), or a ConfigError says so: test
    requirements and prebuilt wheels are both trusted only pinned."""
    from packaging.requirements import InvalidRequirement, Requirement
    try:
        specs = list(Requirement(text).specifier)
    except InvalidRequirement as err:
        raise ConfigError(f"{where}: {what} {text!r} is not valid ({err})",
                          hint="write it as name==version") from None
    if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version:
        raise ConfigError(f"{where}: {what} {text!r} is not pinned to one version",
                          hint=f"write it as name==version{why}")


def _smoke(row: str | dict, where: str) -> SmokeRule:
    if isinstance(row, str):
        return SmokeRule(script=row)
    unknown = set(row) - set(SmokeRule.__dataclass_fields__)
    if unknown:
        raise ConfigError(f"{where}: unknown [smoke] keys {sorted(unknown)}",
                          hint="[smoke] may have: script, gpu, requires")
    return SmokeRule(str(row.get("script", "")), bool(row.get("gpu", True)),
                     tuple(row.get("requires", ())))


def _source(row: dict, where: str) -> Source:
    src = Source(**{k: str(v) for k, v in row.items() if k in Source.__dataclass_fields__})
    unknown = set(row) - set(Source.__dataclass_fields__)
    if unknown:
        raise ConfigError(f"{where}: unknown [source] keys {sorted(unknown)}",
                          hint=f"a source may have: {', '.join(Source.__dataclass_fields__)}")
    for url in (src.git, src.sdist):
        _check_scheme(url, where)
    if src.git and not re.fullmatch(r"[0-9a-f]{40}", src.commit):
        raise ConfigError(f"{where}: a git source must pin a full 40-hex `commit`, got "
                          f"{src.commit!r}", hint="pin the exact upstream commit, not a branch")
    if src.sdist and not re.fullmatch(r"[0-9a-f]{64}", src.sha256):
        raise ConfigError(f"{where}: an sdist source needs its `sha256`",
                          hint="copy it from the package index (PyPI shows it per file)")
    return src


def _prebuilt_pins(table: dict, where: str) -> tuple[str, ...]:
    """A prebuilt wheel is trusted only pinned: ``name==version`` and the sha256 of each file
    that may be downloaded (several for per-platform wheels). Anything looser is an error."""
    if not table:
        return ()
    for text in table.get("requirements", ()):
        _require_pinned(text, where, what="[prebuilt] requirement",
                        why=", the version whose sha256 the recipe lists")
    pins = tuple(str(h).lower() for h in table.get("sha256", ()))
    if not pins or not all(re.fullmatch(r"[0-9a-f]{64}", h) for h in pins):
        raise ConfigError(f"{where}: [prebuilt] needs `sha256 = [...]`, the hash of each wheel "
                          "file it may download", hint="pip download --no-deps --only-binary="
                          ":all: NAME==VERSION, then sha256sum the wheel (PyPI also shows it)")
    return pins


# Schemes a source may use: authenticated transports and local files. Plain http, git:// and
# git's transport helpers (ext::, fd::) can be altered on the way or run commands.
ALLOWED_SCHEMES = ("https", "ssh", "file")


def _check_scheme(url: str, where: str) -> None:
    """``https://``, ``ssh://``, ``file://``, ``git@host:path`` or a local path; nothing else."""
    if not url or url.startswith("/") or re.fullmatch(r"[\w.-]+@[\w.-]+:[^:].*", url):
        return
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)(://|::)", url)
    if scheme is None and "://" not in url and "::" not in url:
        return    # a relative local path
    name = scheme.group(1).lower() if scheme else url.split(":", 1)[0]
    if name not in ALLOWED_SCHEMES or (scheme and scheme.group(2) == "::"):
        raise ConfigError(f"{where}: source URL {url!r} uses the scheme {name!r}, which cuforge "
                          f"does not fetch from (allowed: {', '.join(ALLOWED_SCHEMES)}, or a "
                          "local path)",
                          hint="use the https:// address of the same file or repository")


def selection(project: Project, wanted: list[str], src_overrides=()
              ) -> tuple[dict[str, Recipe], list[Recipe]]:
    """Every recipe, read once (a build runs on these even if recipes/ is edited while it
    compiles), and the build order of ``wanted`` (``["all"]``: every recipe) with ``--src
    NAME=PATH`` replacing those packages' sources in the order only."""
    recipes = load_recipes(project)
    chosen = dict(recipes)
    for name, path in src_overrides:   # exact: other steps look the override up by name
        if name not in chosen:
            raise ConfigError(f"--src {name}=...: no recipe called {name!r}",
                              hint=f"known packages: {', '.join(sorted(chosen))}")
        chosen[name] = replace(chosen[name], source=Source(path=str(path)))
    return recipes, build_order(chosen, sorted(chosen) if wanted == ["all"] else wanted)


def build_order(recipes: dict[str, Recipe], wanted: list[str]) -> list[Recipe]:
    """The packages to build, dependencies first (``spconv`` -> pccm, cumm, spconv).

    Order among independent packages follows ``wanted``, so the order is stable.
    """
    wanted, maybe = as_known(wanted, recipes)   # simple_knn, Spconv: as typed
    unknown = [w for w in wanted if w not in recipes]
    if unknown:
        raise ConfigError(f"no recipe for {', '.join(unknown)}{maybe}",
                          hint=f"known packages: {', '.join(sorted(recipes))}")
    if not wanted:
        raise NothingToDo("no package selected", hint="pass --only PKG or set the combo's packages")
    needed: dict[str, None] = {}
    stack = list(reversed(wanted))
    while stack:
        name = stack.pop()
        if name not in needed:
            needed[name] = None
            stack.extend(reversed(recipes[name].depends))
    sorter = TopologicalSorter({n: recipes[n].depends for n in needed})
    try:
        sorter.prepare()
    except CycleError as err:
        cycle = " -> ".join(err.args[1])
        raise ConfigError(f"recipes depend on each other in a cycle: {cycle}",
                          hint="remove one of these `depends` entries") from None
    order: list[str] = []
    rank = {n: i for i, n in enumerate(needed)}
    while sorter.is_active():
        ready = sorted(sorter.get_ready(), key=rank.__getitem__)
        order.extend(ready)
        sorter.done(*ready)
    return [recipes[n] for n in order]
