"""spconv built with the full and the lean kernel set, side by side in one run (issue 51).

    nox -s bench -- --only kernels --combo h200 --cuda-arch 9.0 --jobs 16
    python bench/build_speed.py --only kernels --cuda-arch "12.1+PTX;12.0"

The row of ``bench/build_speed.py`` named ``kernels`` (not in its default set: two cold
spconv builds are ~90 min on 2 cores, ~15 min on 16). Each build is cold (work dir wiped,
``--rebuild``, cache off, ``--skip-smoke``), for the same combo and arches, on the same
machine: first ``--kernels full``, then the recipe's lean set (``--kernel-sets full,lean,3d``
adds the narrower set). Measured per build, from spconv's own ``.ninja_log`` (its compile
steps, the link included), and from the build's own processes:

- Σ compile seconds: the sum of every step's duration, the CPU time the compile asked for
  (a step runs one nvcc/g++; nvcc's ``-t`` threads add to it, as in the issue's 7,635 s);
- CPU seconds: user+system time of the whole build (getrusage of the processes it waited
  for): the compile's real cost, which does not grow when the machine is shared as a step's
  duration does (session 24's 12.0 run: the 518 steps both builds share took 3,961 s in the
  full build and 3,453 s in the lean one, beside different GPU work);
- wall: spconv's ``compiled ... in S s`` (fetch, pccm's generation, ninja, the wheel);
- steps: ninja's steps;

and, printed per build, the steps and Σ seconds per kind of step (``group_of``: cp ConvParams
units, conv and gemm kernels, dispatchers, other .cu, host .cc, the link): where the rest of
the compile goes (issue 51, point 3). Each build's log is kept as
``<state>/spconv-full.ninja_log`` and ``spconv-lean.ninja_log`` (``--state DIR`` keeps them).
"""

from __future__ import annotations

import re
import resource
import shutil
from pathlib import Path

PACKAGE = "spconv"


def ninja_log_totals(path: Path) -> tuple[int, float, float]:
    """(steps, Σ step seconds, first start to last end in seconds) of the last build a
    ``.ninja_log`` records: ninja appends, so an output listed twice counts once, its last
    line (``start_ms end_ms mtime output hash``, tab-separated, after a ``# ninja log`` line).

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / ".ninja_log"
    >>> _ = p.write_text("# ninja log v6\\n0\\t2000\\t0\\ta.o\\tx\\n500\\t1500\\t0\\tb.o\\ty\\n"
    ...                  "0\\t3000\\t0\\ta.o\\tz\\n")
    >>> ninja_log_totals(p)
    (2, 4.0, 3.0)
    """
    steps: dict[str, tuple[int, int]] = {}
    for line in path.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        start, end, _mtime, output, *_ = line.split("\t")
        steps[output] = (int(start), int(end))
    if not steps:
        return 0, 0.0, 0.0
    cpu = sum(end - start for start, end in steps.values()) / 1000
    span = (max(e for _, e in steps.values()) - min(s for s, _ in steps.values())) / 1000
    return len(steps), cpu, span


GROUPS = (("cp ConvParams", re.compile(r"/cp[^/]*/ConvParams/")),   # one per implicit GEMM
          ("conv kernels", re.compile(r"ConvKernel_")),
          ("gemm kernels", re.compile(r"GemmKernel_")),
          ("dispatchers", re.compile(r"matmul_split")),
          ("other .cu", re.compile(r"\.cu\.o$")),
          ("host .cc", re.compile(r"\.(cc|cpp)\.o$")))


def group_of(output: str) -> str:
    """The kind of build step an output of spconv's ninja graph is (issue 51, point 3).

    >>> group_of("src/cumm/conv/main/cpSimt_f32_C311/ConvParams/ConvParams_ConvParams.cu.o")
    'cp ConvParams'
    >>> group_of("src/csrc/sparse/all/SpconvOps/SpconvOps_sort.cc.o")
    'host .cc'
    >>> group_of("core_cc.cpython-311-x86_64-linux-gnu.so")
    'link'
    """
    return next((name for name, pattern in GROUPS if pattern.search(output)), "link")


def group_totals(path: Path) -> dict[str, tuple[int, float]]:
    """Steps and Σ seconds per group of the last build a ``.ninja_log`` records."""
    last: dict[str, float] = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            start, end, _mtime, output, *_ = line.split("\t")
            last[output] = (int(end) - int(start)) / 1000
    totals: dict[str, tuple[int, float]] = {}
    for output, secs in last.items():
        n, s = totals.get(group_of(output), (0, 0.0))
        totals[group_of(output)] = (n + 1, s + secs)
    return totals


def spconv_ninja_log(state: Path) -> Path:
    """spconv's ``.ninja_log`` in the bench's work dir (pccm's build dir: the biggest one)."""
    logs = sorted((state / "cuforge" / "work").glob(f"*/{PACKAGE}/**/.ninja_log"),
                  key=lambda p: p.stat().st_size)
    if not logs:
        raise SystemExit(f"no .ninja_log under {state}/cuforge/work/*/{PACKAGE}")
    return logs[-1]


def build_cpu_seconds(bench, extra: tuple[str, ...]) -> tuple[float, str, float]:
    """(wall, output, CPU seconds) of one cuforge build: the user+system time of every process
    it waited for (cuforge, pip, spconv's setup.py and pccm, ninja, each nvcc and what it
    runs). CPU time, unlike a step's duration in ``.ninja_log``, barely grows when other work
    shares the machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, output = bench.cuforge([PACKAGE], "--rebuild", *extra)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, output, cpu


def kernel_rows(bench, args, compiled_seconds) -> list[tuple]:
    """spconv built cold once per kernel set of ``args.kernel_sets`` (default full, then lean;
    ``3d``: the recipe's narrower set); each later set over the first: Σ compile seconds
    (.ninja_log), the builds' CPU seconds, wall, ninja steps."""
    labels = getattr(args, "kernel_sets", "full,lean").split(",")
    bench.cuforge(["cumm"])   # its dependencies first: the rows measure spconv alone
    measured = {}
    for label in labels:
        bench.wipe([PACKAGE])
        _, output, cpu_s = build_cpu_seconds(bench, ("--kernels", label))
        log = shutil.copyfile(spconv_ninja_log(bench.state),   # the next build wipes it
                              bench.state / f"spconv-{label}.ninja_log")
        steps, cpu, _ = ninja_log_totals(log)
        measured[label] = (cpu, cpu_s, compiled_seconds(output, PACKAGE), steps)
        print(f"spconv {label} kernels: {steps} ninja steps, Σ {cpu:.0f} compile s, "
              f"{cpu_s:.0f} CPU s, compiled in {measured[label][2]:.1f} s ({log})", flush=True)
        for group, (n, secs) in sorted(group_totals(log).items(), key=lambda kv: -kv[1][1]):
            print(f"  {group:14} {n:4} steps  Σ {secs:7.0f} s  ({100 * secs / cpu:4.1f} %)")
    base, arches, rows = labels[0], args.cuda_arch, []
    for label in labels[1:]:
        (cpu, cpu_s, wall, steps), (b_cpu, b_cpu_s, b_wall, b_steps) = measured[label], measured[base]
        rows += [(f"spconv Σ compile s (.ninja_log), {label} / {base} (goal <= 0.6)", PACKAGE,
                  arches, cpu, b_cpu),
                 (f"spconv build CPU s (user+sys), {label} / {base} (goal <= 0.6)", PACKAGE,
                  arches, cpu_s, b_cpu_s),
                 (f"spconv wall (compiled in), {label} / {base}", PACKAGE, arches, wall, b_wall),
                 (f"spconv ninja steps, {label} / {base}", PACKAGE, arches, steps, b_steps)]
    return rows
