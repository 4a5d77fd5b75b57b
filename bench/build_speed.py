"""Build-speed ratios, measured side by side in one run (never asserted in a timed test).

    nox -s bench -- [--package cuforge-demo] [--set a,b,c] [--cuda-arch "12.0;12.1+PTX"]
    python bench/build_speed.py --only nvcc,noop      # a subset

Each row names the package, the machine and the arches. Measured, in a throw-away state dir
that reuses the combo env (nothing of the checkout's own state is touched):

- cold: ``cuforge build --rebuild`` with empty build dirs (fetch, compile, verify, publish);
- by hand: ``pip wheel --no-build-isolation`` of the same tree in the same env, with the same
  TORCH_CUDA_ARCH_LIST and jobs (the environment the dry run prints, less cuforge's own
  additions: the extension shim and nvcc's ``-t``): the user's manual baseline;
- no-op: the same build again, nothing changed ("up to date");
- warm: ``--rebuild`` after wiping the build dirs: only a compiler cache, if the build env has
  one (a ``*_COMPILER_LAUNCHER`` / ccache), can make it faster than cold;
- resumed: a cold build killed at half its compile time, then run again: the second run's
  time over cold;
- killed: ``--only killed`` (``--kill-cache off,local``): a build SIGKILLed alone (the OOM
  killer's way) once ninja passed half its steps, then run again; the row prints the step it
  was killed at, the rerun's first ninja line and the package's compile time, rerun / cold
  (``compiled ... in S s``, so dependencies rebuilt by ``--rebuild`` do not count); then the
  same build once more with nothing left to compile: the part of every build that no kill
  splits (setup.py, the wheel, verification), the floor under the rerun's ratio. With
  ``local`` the killed build starts from an empty cache store, as a first build does;
- serial vs side by side: ``--set`` built ``--one-at-a-time`` and then side by side, and a
  multi-extension package with ``CUFORGE_SERIAL_EXTENSIONS=1`` vs without;
- ``nvcc -t``: the demo kernels for 4 arches with ``-t 1`` and ``-t N``;
- emulated: each of ``--emulated-packages`` (default: the demo) built cold for the emulated
  linux-aarch64 combo (``--emulated-combo``, QEMU; docs/dgx-spark.md) over the same build for
  ``--combo`` natively, whole build and compile alone (goal: <= 10x).
  Needs ``cuforge emulation setup`` and the emulated env (a first build creates it).
- kernels (``--only kernels``, not in the default set): spconv cold with ``--full-kernels``
  and with the recipe's lean kernel set: Σ compile seconds from its ``.ninja_log``, wall and
  ninja steps, lean / full (bench/kernel_sets.py; issue 51).
- spark: the demo built cold fully as aarch64 (combo spark-3.11 by the aarch64 cuforge inside
  the emulation root, ``cuforge emulation run``: sbsa nvcc, arm64 g++, all under QEMU) over
  the same build cross-emulated (``--emulated-combo``: x86_64 compilers, emulated Python).
  Needs root, the root's native toolchain and the aarch64 cuforge venv
  (tests/integration/test_spark_path.py makes it); skipped, saying why, otherwise.

The default package is ``bench-multi-ext`` (tests/fixtures/recipes/multi_ext: three tiny
CUDA extensions, torch-scatter's shape), added to the throw-away project next to every recipe.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "native" / "demo" / "src" / "kernels.cu"
NVCC_ARCHES = ["90-real", "100-real", "120-real", "121"]
MULTI_EXT = ROOT / "tests" / "fixtures" / "recipes" / "multi_ext"
ALL = ("manual", "noop", "warm", "resume", "killed", "side", "nvcc", "emulated", "spark")
OPTIONAL = ("kernels",)   # asked for by name only: spconv full vs lean (bench/kernel_sets.py)
SPARK_COMBO = "spark-3.11"   # the Spark's combo with the emulation root's Python
STEP = re.compile(r"\[(\d+)/(\d+)\]")
DEMO = "cuforge-demo"
out = Console()


# ---- nvcc -t -------------------------------------------------------------------------------

def compile_once(nvcc: str, threads: int, obj: Path) -> tuple[float, float]:
    flags = []
    for a in NVCC_ARCHES:
        num = a.removesuffix("-real")
        code = f"sm_{num}" if a.endswith("-real") else f"[sm_{num},compute_{num}]"
        flags.append(f"-gencode=arch=compute_{num},code={code}")
    start = time.perf_counter()
    subprocess.run([nvcc, "-c", str(KERNELS), "-o", str(obj), "-O3", "-t", str(threads), *flags],
                   check=True, env={k: v for k, v in os.environ.items() if k != "NVCC_APPEND_FLAGS"})
    elapsed = time.perf_counter() - start
    return elapsed, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def nvcc_rows(nvcc: str, repeat: int) -> list[tuple]:
    threads = max(2, min(os.cpu_count() or 1, len(NVCC_ARCHES)))
    times: dict[int, list[float]] = {1: [], threads: []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeat):
            for t in times:                      # interleaved: same machine state for both
                times[t].append(compile_once(nvcc, t, Path(tmp) / f"k{t}.o")[0])
    one, many = statistics.median(times[1]), statistics.median(times[threads])
    arches = " ".join(NVCC_ARCHES)
    return [(f"nvcc -t {threads} / -t 1", "demo kernels.cu", arches, many, one)]


# ---- cuforge builds ------------------------------------------------------------------------

class Bench:
    def __init__(self, args, state: Path) -> None:
        self.args, self.state = args, state
        self.project = state / "project"
        self.wheelhouse = Path(args.wheelhouse) if args.wheelhouse else state / "wheelhouse"
        # Every row but warm runs without a compiler cache: a store seeded by an earlier row
        # would turn "cold", "resumed" and "side by side" into cache hits.
        self.cache_dir = state / "sccache"
        self._make_project()

    def _make_project(self) -> None:
        """The checkout's recipes plus the bench fixture, its combo envs linked (not copied)."""
        p = self.project
        (p / "recipes").mkdir(parents=True)
        for name in ("envs", "native", "patches", "smoke", "stacks"):
            if (ROOT / name).exists():
                (p / name).symlink_to(ROOT / name)
        for recipe in (ROOT / "recipes").glob("*.toml"):
            (p / "recipes" / recipe.name).symlink_to(recipe)
        (p / "recipes" / "bench-multi-ext.toml").write_text(
            'name = "bench-multi-ext"\nkind = "setuptools"\n'
            'modules = ["multi_ext._alpha", "multi_ext._beta", "multi_ext._gamma"]\n'
            f'[source]\npath = "{MULTI_EXT}"\n')
        # the checkout's combo envs and source cache (git mirrors, sdists): linked, not copied
        own = Path(os.environ.get("CUFORGE_STATE", ROOT / ".cuforge"))
        envs = self.state / "cuforge" / "envs"
        envs.mkdir(parents=True)
        for env in (own / "envs").glob("*"):
            if env.is_dir():
                (envs / env.name).symlink_to(env)
        if (own / "emulation").is_dir():   # the emulator and target root (emulated row)
            (self.state / "cuforge" / "emulation").symlink_to(own / "emulation")
        if (own / "cache").is_dir():
            (self.state / "cuforge" / "cache").symlink_to(own / "cache")

    def objects(self, package: str) -> int:
        """Compiled objects in the package's work dir (its build dirs)."""
        return sum(1 for work in (self.state / "cuforge" / "work").glob(f"*/{package}")
                   for _ in work.rglob("*.o"))

    def cuforge(self, packages: list[str], *extra: str, env: dict | None = None,
                kill_when=None, cached: bool = False, sig: int = signal.SIGTERM,
                combo: str = "", inside: str = "") -> tuple[float, str]:
        """Run ``cuforge build``; return (wall seconds, output). ``kill_when()`` true: the
        build is stopped with ``sig`` (SIGTERM: a user's Ctrl-C; SIGKILL: cuforge alone, the
        OOM killer's way: only its supervisors stop its compilers). ``cached``: with the bench's own
        compiler-cache store (empty until the first cached build). ``inside``: the cuforge
        (an aarch64 venv's) that runs the build inside the emulation root."""
        cuforge = ([sys.executable, "-m", "cuforge", "emulation", "run", "--", inside] if inside
                   else [sys.executable, "-m", "cuforge"])
        argv = [*cuforge, "build", "--combo", combo or self.args.combo,
                "--only", ",".join(packages), "--cuda-arch", self.args.cuda_arch,
                "--force-source", "--skip-smoke", *extra]
        if self.args.jobs:
            argv += ["--jobs", str(self.args.jobs)]
        for src in self.args.src:
            argv += ["--src", src]
        cache = str(self.cache_dir) if cached else "off"
        full = {**os.environ, "CUFORGE_CACHE": cache, "CUFORGE_BUILD_DIR": "",
                "CUFORGE_ROOT": str(self.project),
                "CUFORGE_STATE": str(self.state / "cuforge"),
                "CUFORGE_WHEELHOUSE": str(self.wheelhouse), "COLUMNS": "200", **(env or {})}
        start = time.perf_counter()
        proc = subprocess.Popen(argv, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        if kill_when is not None:
            while proc.poll() is None and not kill_when():
                time.sleep(0.2)
            proc.send_signal(sig)
            stdout, stderr = proc.communicate()
            return time.perf_counter() - start, stderr
        stdout, stderr = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"cuforge failed ({proc.returncode}):\n{stderr[-3000:]}")
        return time.perf_counter() - start, stdout + stderr

    def forget_log(self, package: str) -> None:
        """Remove the package's log: until the next build truncates it, the last build's
        ``[N/N]`` would read as the new build's progress."""
        for log in (self.state / "cuforge" / "logs").glob(f"*/{package}.log"):
            log.unlink()

    def log_steps(self, package: str) -> list[str]:
        """The ninja progress lines (``[n/N]``) in the package's log of its last build."""
        logs = list((self.state / "cuforge" / "logs").glob(f"*/{package}.log"))
        text = logs[0].read_text(errors="replace") if logs else ""
        return [m.group(0) for m in STEP.finditer(text)]

    def processes_left(self, within: float) -> int:
        """Processes still running ``within`` seconds from now that work in this bench's work
        dirs (a killed build's ninja, nvcc, cicc, g++): their command line names one or they run
        in one. Not the state dir: the bench's own command line names it with --state, and so
        may any shell that watches its logs (the H200 run counted 5 such, no compiler)."""
        work = str(self.state / "cuforge" / "work")
        deadline = time.monotonic() + within
        while True:
            mine = [pid for pid in Path("/proc").glob("[0-9]*")
                    if int(pid.name) != os.getpid() and _works_in(pid, work)]
            if not mine or time.monotonic() >= deadline:
                return len(mine)
            time.sleep(0.2)

    def killed_rerun(self, package: str, store: str, cold: float | None = None
                     ) -> tuple[str, str, float, float, float]:
        """Cold (``store``: off, or an empty local store), killed alone past half its ninja
        steps, run again, and then once more with nothing left to compile: (killed at, the
        rerun's first ninja line, cold s, rerun s, nothing-to-compile s) as the package's own
        ``compiled ... in S s``. The last is the part of every build that no kill splits
        (setup.py, the wheel, verification): the floor under any rerun's ratio."""
        cache = {"CUFORGE_CACHE": "off" if store == "off" else str(self.state / "kill-store")}
        if cold is None:   # the cold build, without a cache
            self.wipe([package])
            cold = _compiled_seconds(self.cuforge([package], "--rebuild")[1], package)
            self.cold_steps = self.log_steps(package)
        total = max((int(STEP.match(s)[2]) for s in self.cold_steps), default=2)
        self.wipe([package])
        self.forget_log(package)
        shutil.rmtree(self.state / "kill-store", ignore_errors=True)

        def half() -> bool:
            steps = self.log_steps(package)
            return bool(steps) and int(STEP.match(steps[-1])[1]) >= total // 2
        self.cuforge([package], "--rebuild", env=cache, kill_when=half, sig=signal.SIGKILL)
        steps = self.log_steps(package)
        left = self.processes_left(5.0)
        killed = f"{steps[-1] if steps else '-'} ({left} of its processes left 5 s later)"
        rerun = _compiled_seconds(self.cuforge([package], "--rebuild", env=cache)[1], package)
        first = next((s for s in self.log_steps(package)), "ninja: no work to do")
        fixed = _compiled_seconds(self.cuforge([package], "--rebuild", env=cache)[1], package)
        return killed, first, cold, rerun, fixed

    def wipe(self, packages: list[str]) -> None:
        """Empty the packages' work dirs: sources and build dirs (ninja state) go."""
        for pkg in packages:
            for work in (self.state / "cuforge" / "work").glob(f"*/{pkg}"):
                shutil.rmtree(work)

    def cold(self, packages: list[str], **kw) -> float:
        self.wipe(packages)
        return self.cuforge(packages, "--rebuild", **kw)[0]

    def dry_run_env(self, package: str, cached: bool = False) -> tuple[dict[str, str], list[str]]:
        """The build command's environment and argv, as the dry run prints them."""
        _, text = self.cuforge([package], "--dry-run", cached=cached)
        env: dict[str, str] = {}
        for line in text.splitlines():
            if line.startswith("export "):
                name, _, value = line.removeprefix("export ").partition("=")
                env[name] = shlex.split(value)[0] if value else ""
            elif line and not line.startswith("#") and "cuforge.pipeline.builders.pep517" in line:
                return env, shlex.split(line)
            elif line and not line.startswith("#"):
                env = {}
        raise SystemExit(f"no build command for {package} in the dry run")

    def by_hand(self, package: str) -> float:
        """pip wheel --no-build-isolation of a fresh copy of the fetched tree, same env."""
        env, argv = self.dry_run_env(package)
        for own in ("PYTHONPATH", "NVCC_APPEND_FLAGS"):   # cuforge's additions, not the user's
            env.pop(own, None)
        tree, python = Path(argv[-1]), argv[argv.index("--python") + 1]
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / "src"
            shutil.copytree(tree, copy, ignore=shutil.ignore_patterns("build", "*.egg-info"))
            cmd = [python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                   "--disable-pip-version-check", "-w", str(Path(tmp) / "out"), str(copy)]
            start = time.perf_counter()
            subprocess.run(cmd, env={**os.environ, **env}, check=True, capture_output=True)
            return time.perf_counter() - start


def has_launcher(env: dict[str, str]) -> bool:
    return any(k.endswith("_COMPILER_LAUNCHER") or k.startswith(("CCACHE", "SCCACHE"))
               for k in env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--combo", default="3.11-cu130")
    parser.add_argument("--cuda-arch", default="12.0;12.1+PTX")
    parser.add_argument("--package", default="bench-multi-ext")
    parser.add_argument("--set", default="",
                        help="comma-separated packages for serial vs side by side "
                        "(default: the package alone, for its extensions)")
    parser.add_argument("--jobs", type=int, default=0)
    parser.add_argument("--only", default=",".join(ALL), help=",".join(ALL + OPTIONAL))
    parser.add_argument("--nvcc", default=shutil.which("nvcc") or "nvcc")
    parser.add_argument("--repeat", type=int, default=1, help="nvcc -t repeats")
    parser.add_argument("--src", action="append", default=[], metavar="NAME=PATH",
                        help="build NAME from a local tree (passed to every cuforge build)")
    parser.add_argument("--kill-cache", default="off,local",
                        help="compiler cache of the 'killed' rows: off, local or both")
    parser.add_argument("--emulated-combo", default="spark-emulated",
                        help="the emulated combo of the emulated rows")
    parser.add_argument("--emulated-packages", default=DEMO,
                        help="comma-separated packages of the emulated rows (e.g. pointops,"
                        "pointgroup_ops,torch-scatter,cumm,spconv: hours on 2 cores)")
    parser.add_argument("--kernel-sets", default="full,lean",
                        help="the kernels row's builds, the first the baseline: full, lean, "
                        "or a recipe's narrower set (3d)")
    parser.add_argument("--wheelhouse", default="",
                        help="keep the wheels here (default: a throw-away dir)")
    parser.add_argument("--state", default="",
                        help="keep the bench's project and state in this new dir (default: a "
                        "throw-away dir); a later `cuforge setup` with CUFORGE_ROOT=DIR/project "
                        "CUFORGE_STATE=DIR/cuforge CUFORGE_BUILD_DIR= finds its wheels up to date")
    args = parser.parse_args()
    wanted = set(args.only.split(","))
    machine = (f"{platform.node()} ({os.cpu_count()} cores, "
               f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GB)")
    rows: list[tuple] = []   # (measurement, package, arches, seconds, baseline seconds)
    pkg, arches = args.package, args.cuda_arch
    cuforge_rows = wanted - {"nvcc", "emulated", "spark", *OPTIONAL}
    with _state_dir(args.state) as tmp:
        bench = Bench(args, Path(tmp))
        if cuforge_rows - {"killed"}:   # the rows that share one cold build
            cold = bench.cold([pkg], cached="warm" in wanted)   # seeds the warm row's store
            out.print(f"cold build of {pkg}: {cold:.1f} s")
            if "manual" in wanted:
                rows.append(("cuforge cold / pip wheel by hand", pkg, arches, cold,
                             bench.by_hand(pkg)))
            if "noop" in wanted:
                secs, text = bench.cuforge([pkg])
                env_check = re.search(r"env (?:reused|created) in ([\d.]+) s", text)
                rows.append(("no-op rerun / cold", pkg, arches, secs, cold))
                if env_check:
                    rows.append(("no-op less the env check / cold", pkg, arches,
                                 secs - float(env_check[1]), cold))
            if "warm" in wanted:
                env, _ = bench.dry_run_env(pkg, cached=True)
                label = "warm (compiler cache) / cold" if has_launcher(env) else \
                    "warm / cold (no compiler cache in the env)"
                bench.wipe([pkg])
                rows.append((label, pkg, arches,
                             bench.cuforge([pkg], "--rebuild", cached=True)[0], cold))
            if "resume" in wanted:
                total = bench.objects(pkg)       # what the cold build compiled
                bench.wipe([pkg])
                bench.cuforge([pkg], "--rebuild",
                              kill_when=lambda: bench.objects(pkg) >= max(1, total // 2))
                rows.append((f"resumed / cold (killed at {bench.objects(pkg)}/{total} "
                             "objects)", pkg, arches, bench.cuforge([pkg], "--rebuild")[0],
                             cold))
            if "side" in wanted:
                group = [p for p in args.set.split(",") if p] or [pkg]
                serial = _one_at_a_time(bench, group)
                side = bench.cold(group)
                what = ("extensions side by side / one at a time" if len(group) == 1 else
                        "packages side by side / one at a time")
                rows.append((what, ",".join(group), arches, side, serial))
        if "killed" in wanted:   # its own cold build: it needs no row above
            cold_s = None   # measured once, without a cache: the baseline of every row
            for store in args.kill_cache.split(","):
                killed, first, cold_s, rerun_s, fixed_s = bench.killed_rerun(pkg, store, cold_s)
                rows.append((f"killed alone at {killed}, rerun starts {first} (cache "
                             f"{store}): rerun / cold", pkg, arches, rerun_s, cold_s))
                rows.append((f"rebuilt with nothing to compile (cache {store}): the part no "
                             "kill splits / cold", pkg, arches, fixed_s, cold_s))
                # printed as they come: a long package's rows take an hour on a small machine
                for what, _, _, secs, base in rows[-2:]:
                    out.print(f"{what}: {secs:.1f} s / {base:.1f} s = {secs / base:.2f}")
        if "kernels" in wanted:
            from kernel_sets import kernel_rows   # beside this file (bench/ is on sys.path)
            rows += kernel_rows(bench, args, _compiled_seconds)
        if "emulated" in wanted:
            rows += emulated_rows(bench, args)
        if "spark" in wanted:
            rows += spark_rows(bench, args)
    if "nvcc" in wanted:
        rows += nvcc_rows(args.nvcc, args.repeat)
    table = Table(title=f"cuforge build speed on {machine}, combo {args.combo}")
    for col in ("measurement", "package", "arches", "seconds", "baseline s", "ratio"):
        table.add_column(col)
    for what, name, arch, secs, base in rows:
        table.add_row(what, name, arch, f"{secs:.1f}", f"{base:.1f}", f"{secs / base:.2f}")
    Console(width=max(out.width, 140)).print(table)
    print(json.dumps([dict(zip(("measurement", "package", "arches", "seconds", "baseline"),
                               r)) | {"machine": machine} for r in rows]))


def _works_in(proc: Path, work: str) -> bool:
    """Whether /proc/PID's command line names ``work`` or its working directory is in it."""
    try:
        return work.encode() in (proc / "cmdline").read_bytes() or \
            os.readlink(proc / "cwd").startswith(work)
    except OSError:   # gone meanwhile, or not ours to read
        return False


@contextlib.contextmanager
def _state_dir(keep: str) -> Iterator[str]:
    """The bench's state: ``keep`` (made here, left behind) or a throw-away dir."""
    if keep:
        Path(keep).mkdir(parents=True)   # a used dir would mix an earlier run's state in
        yield str(Path(keep).resolve())
        return
    with tempfile.TemporaryDirectory(prefix="cuforge-bench-") as tmp:
        yield tmp


def _compiled_seconds(output: str, package: str) -> float:
    """``compiled <wheel> in S s`` of ``package``: the wheel named like it, else the last one
    (a package builds after its dependencies; the fixture's wheel is ``multi_ext``)."""
    stem = re.sub(r"[-.]+", "_", package).lower()
    found = re.findall(r"compiled (\S+\.whl) in ([\d.]+) s", output)
    for wheel, secs in found:
        if wheel.lower().startswith(stem):
            return float(secs)
    if found:
        return float(found[-1][1])
    raise SystemExit(f"no 'compiled {stem}...' line in cuforge's output:\n{output[-2000:]}")


def emulated_rows(bench: Bench, args) -> list[tuple]:
    """Each of --emulated-packages (default: the demo) cold, natively for --combo, then under
    emulation for --emulated-combo (the same tree and arches): one run, one machine. Two
    rows per package: the whole build (env check, fetch, compile, checks) and its compile
    alone (``compiled ... in S s``: setup.py or pccm's generation under QEMU included,
    dependencies that ``--rebuild`` builds again not). Skipped, saying why, when emulation
    is unusable."""
    status = subprocess.run([sys.executable, "-m", "cuforge", "emulation", "status"],
                            capture_output=True, text=True,
                            env={**os.environ, "CUFORGE_ROOT": str(ROOT)})
    if status.returncode != 0:
        out.print(f"emulated row skipped: emulation is not usable here\n{status.stdout}")
        return []
    for combo in (args.combo, args.emulated_combo):
        if not list((bench.state / "cuforge" / "envs").glob(f"{combo}-torch*")):
            bench.cold([DEMO], combo=combo)   # creates its env, untimed
    rows = []
    for package in args.emulated_packages.split(","):
        native = _timed_cold(bench, package, "")
        emulated = _timed_cold(bench, package, args.emulated_combo)
        what = f"emulated {args.emulated_combo} / native {args.combo} (cold"
        rows += [(f"{what})", package, args.cuda_arch, emulated[0], native[0]),
                 (f"{what}, its compile)", package, args.cuda_arch, emulated[1], native[1])]
        for row in rows[-2:]:   # printed as they come: spconv's pair takes hours on 2 cores
            out.print(f"{row[0]} {package}: {row[3]:.1f} s / {row[4]:.1f} s = "
                      f"{row[3] / row[4]:.2f}")
    return rows


def _timed_cold(bench: Bench, package: str, combo: str) -> tuple[float, float]:
    """(wall seconds, the package's compile seconds) of a cold build for ``combo``."""
    bench.wipe([package])
    wall, output = bench.cuforge([package], "--rebuild", combo=combo)
    return wall, _compiled_seconds(output, package)


def spark_rows(bench: Bench, args) -> list[tuple]:
    """The demo cold cross-emulated (--emulated-combo), then fully aarch64 (spark-3.11 by the
    aarch64 cuforge in the emulation root): one run, one machine, the same arches."""
    from cuforge.env import emulation, rootrun
    from cuforge.core.project import find_project
    project = find_project(ROOT)
    emu = emulation.for_platform(project, "linux-aarch64")
    venv = emu.home(project.state_dir) / "cuforge-venv" / "bin" / "cuforge"
    why = rootrun.unusable(project.state_dir, emu) or (
        "" if venv.exists() else f"no aarch64 cuforge at {venv} (pytest "
        "tests/integration/test_spark_path.py makes it)")
    if why:
        out.print(f"spark row skipped: {why}")
        return []
    for combo, inside in ((args.emulated_combo, ""), (SPARK_COMBO, str(venv))):
        if not list((bench.state / "cuforge" / "envs").glob(f"{combo}-torch*")):
            bench.cold([DEMO], combo=combo, inside=inside)   # creates its env, untimed
    cross = bench.cold([DEMO], combo=args.emulated_combo)
    full = bench.cold([DEMO], combo=SPARK_COMBO, inside=str(venv))
    return [(f"fully aarch64 {SPARK_COMBO} / cross-emulated {args.emulated_combo} (cold)", DEMO,
             args.cuda_arch, full, cross)]


def _one_at_a_time(bench: Bench, group: list[str]) -> float:
    """Packages one after another, each package's extensions one after another."""
    bench.wipe(group)
    flags = ["--one-at-a-time"] if len(group) > 1 else []
    return bench.cuforge(group, "--rebuild", *flags, env={"CUFORGE_SERIAL_EXTENSIONS": "1"})[0]


if __name__ == "__main__":
    main()
