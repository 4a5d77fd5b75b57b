"""Compiler cache: warm vs cold compile time, measured side by side (never in a timed test).

    python bench/cache_speed.py [--only cuforge-demo,simple-knn] [--combo 3.11-cu130]
                                [--cuda-arch "12.0;12.1+PTX"]

Per package, in a throw-away state dir that reuses the combo's env: a cold build with an empty
local cache, then, after wiping the package's sources and build dirs, the same build again
(warm cache). Compile time is the build step under the cache (the manifest's
``compiler_cache.compile_seconds``: configure + compile + link, no verification); the ratio is
warm / cold. Prints one table naming the machine and the arches.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]


def machine() -> str:
    model = ""
    try:
        model = next(line.split(":", 1)[1].strip() for line in
                     Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{platform.machine()}, {os.cpu_count()} cores{', ' + model if model else ''}"


def _build(state: Path, house: Path, combo: str, package: str, arches: str,
           srcs: list[str]) -> dict:
    env = {**os.environ, "CUFORGE_STATE": str(state), "CUFORGE_WHEELHOUSE": str(house),
           "CUFORGE_CACHE": "local", "CUFORGE_BUILD_DIR": "", "COLUMNS": "200"}
    argv = [sys.executable, "-m", "cuforge", "build", "--combo", combo, "--only", package,
            "--rebuild", "--skip-smoke", "--force-source"]
    if arches:
        argv += ["--cuda-arch", arches]
    for src in srcs:
        argv += ["--src", src]
    proc = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        # the package log dies with the throw-away state dir: show the compiler's own words
        logs = sorted(state.glob(f"logs/*/{package}*.log"))
        tails = "\n".join(f"--- {log.name}\n" + "\n".join(log.read_text().splitlines()[-80:])
                          for log in logs)
        raise SystemExit(f"{package}: build failed\n{proc.stderr[-3000:]}\n{tails}")
    manifest = next(house.rglob("manifest.jsonl"))
    entries = [json.loads(line) for line in manifest.read_text().splitlines()]
    return next(e for e in reversed(entries) if e["package"] == package)


def measure(package: str, combo: str, arches: str, env_dir: Path, srcs: list[str]) -> dict:
    """Cold then warm build of ``package``; returns both manifest lines' cache reports."""
    with tempfile.TemporaryDirectory(prefix="cuforge-cache-bench-") as tmp:
        state, house = Path(tmp) / "state", Path(tmp) / "wh"
        (state / "envs").mkdir(parents=True)
        (state / "envs" / env_dir.name).symlink_to(env_dir)
        cold = _build(state, house, combo, package, arches, srcs)
        shutil.rmtree(state / "work" / env_dir.name / package)   # sources + build dirs
        warm = _build(state, house, combo, package, arches, srcs)
    return {"package": package, "arches": cold["arches_requested"],
            "cold": cold["compiler_cache"], "warm": warm["compiler_cache"]}


def combo_env(combo: str) -> Path:
    """The combo's existing env (built by a normal ``cuforge build`` first)."""
    sys.path.insert(0, str(ROOT / "src"))
    from cuforge.config.combos import select_combo
    from cuforge.core.project import find_project
    project = find_project(ROOT)
    found = project.state_dir / "envs" / select_combo(project, name=combo).env_id
    if not (found / "bin" / "python").exists():
        raise SystemExit(f"no env {found}: run `cuforge build --combo {combo}` once first")
    return found


def table(rows: list[dict]) -> Table:
    t = Table(title=f"compiler cache, warm vs cold ({machine()})")
    for col in ("package", "arches", "cold s", "warm s", "warm/cold", "warm hit rate"):
        t.add_column(col)
    for r in rows:
        cold, warm = r["cold"]["compile_seconds"], r["warm"]["compile_seconds"]
        t.add_row(r["package"], r["arches"], f"{cold:.1f}", f"{warm:.1f}",
                  f"{warm / cold:.2f}x" if cold else "-", f"{r['warm'].get('hit_rate', 0):.0%}")
    return t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="cuforge-demo", help="comma-separated packages")
    p.add_argument("--combo", default="3.11-cu130")
    p.add_argument("--cuda-arch", default="", help="default: the combo's arches")
    p.add_argument("--src", action="append", default=[], metavar="NAME=PATH",
                   help="build NAME from a local tree")
    args = p.parse_args(argv)
    env_dir = combo_env(args.combo)
    rows = []
    for pkg in (p for p in args.only.split(",") if p):
        rows.append(measure(pkg, args.combo, args.cuda_arch, env_dir, args.src))
        print(json.dumps(rows[-1]), flush=True)   # each row as soon as it is measured
    Console().print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
