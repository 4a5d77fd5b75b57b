"""A team's wheels (``--wheels URL``) vs a cold build, measured side by side on one machine.

    python bench/team_wheels.py [--only cuforge-demo,simple-knn] [--combo 3.11-cu130]
                                [--cuda-arch "12.0;12.1+PTX"] [--src NAME=PATH]

In a throw-away state dir that reuses the combo's env: a cold build (compiler cache off) into
the "team" wheelhouse, ``cuforge index`` over it and pypiserver serving it on loopback; then the
same packages built into a second, empty wheelhouse with ``--wheels http://127.0.0.1:PORT/simple/``
(every wheel downloaded and put through all the checks, nothing compiled). The times are the
wall times of the two ``cuforge build`` commands; ``setup`` runs exactly this build as its
first step and does the same work after it either way (venv, installs, model stage), so the
ratio is that of setup's build step. Prints one table naming the machine.

    python bench/team_wheels.py --stack milo --checkout PATH [--combo h200 --cuda-arch 9.0]
                                [-- SETUP ARGS...]

A row per stack (issue 44): ``cuforge setup STACK`` cold (empty state, compiler cache off) on a
clone of PATH, ``cuforge index`` over the wheelhouse it published, then ``setup STACK --wheels
file://.../simple/`` on a second clone of the same commit into an empty state and wheelhouse:
nothing compiled, every team wheel checked. The row carries setup's own "where the time went".
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cache_speed import ROOT, combo_env, machine  # noqa: E402


def _build(state: Path, house: Path, combo: str, packages: str, arches: str, srcs: list[str],
           *extra: str) -> tuple[float, list[dict]]:
    env = {**os.environ, "CUFORGE_STATE": str(state), "CUFORGE_WHEELHOUSE": str(house),
           "CUFORGE_CACHE": "off", "CUFORGE_BUILD_DIR": "", "COLUMNS": "200"}
    argv = [sys.executable, "-m", "cuforge", "build", "--combo", combo, "--only", packages,
            "--rebuild", "--force-source", *extra]
    if arches:
        argv += ["--cuda-arch", arches]
    for src in srcs:
        argv += ["--src", src]
    t0 = time.monotonic()
    proc = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"build failed:\n{proc.stderr[-3000:]}")
    manifest = next(house.rglob("manifest.jsonl"))
    return seconds, [json.loads(line) for line in manifest.read_text().splitlines()]


def _serve(directory: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "pypiserver", "run", "--host", "127.0.0.1",
                             "--port", str(port), "--disable-fallback", "-a", ".", "-P", ".",
                             str(directory)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/simple/"
    for _ in range(100):
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return proc, url
        except OSError:
            time.sleep(0.2)
    proc.terminate()
    raise SystemExit(f"pypiserver did not answer on {url}")


def measure(packages: str, combo: str, arches: str, env_dir: Path, srcs: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="cuforge-team-bench-") as tmp:
        state, team, mine = Path(tmp) / "state", Path(tmp) / "team", Path(tmp) / "mine"
        (state / "envs").mkdir(parents=True)
        (state / "envs" / env_dir.name).symlink_to(env_dir)
        cold, built = _build(state, team, combo, packages, arches, srcs)
        subprocess.run([sys.executable, "-m", "cuforge", "index", str(team)], cwd=ROOT,
                       check=True, capture_output=True)
        directory = next(team.rglob("manifest.jsonl")).parent
        server, url = _serve(directory)
        try:
            fetched, used = _build(state, mine, combo, packages, arches, srcs, "--wheels", url)
        finally:
            server.terminate()
            server.wait(timeout=10)
    taken = [e["package"] for e in used if e.get("source", "").startswith("team ")]
    return {"packages": packages, "cold_s": round(cold, 1), "team_s": round(fetched, 1),
            "compiled": [e["package"] for e in built if e["status"] == "compiled"],
            "from_team": taken}


def _setup(state: Path, house: Path, stack: str, checkout: Path, combo: str, arches: str,
           extra: list[str], log: Path | None = None) -> tuple[float, str]:
    env = {**os.environ, "CUFORGE_STATE": str(state), "CUFORGE_WHEELHOUSE": str(house),
           "CUFORGE_CACHE": "off", "CUFORGE_BUILD_DIR": "", "COLUMNS": "200"}
    argv = [sys.executable, "-m", "cuforge", "setup", stack, "--checkout", str(checkout),
            "--combo", combo, *(["--cuda-arch", arches] if arches else []), *extra]
    t0 = time.monotonic()
    proc = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    if log is not None:   # setup's own words, for where the time went beyond the summary
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"$ {' '.join(argv)}\n{proc.stdout}{proc.stderr}")
    if proc.returncode != 0:
        raise SystemExit(f"setup {stack} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    went = next((ln.split(":", 1)[1].strip() for ln in proc.stderr.splitlines()
                 if ln.startswith("where the time went:")), "?")
    return seconds, went


def _clone(checkout: Path, dest: Path) -> Path:
    """The same commit for both runs, fresh (no .venv, no patches applied)."""
    subprocess.run(["git", "clone", "-q", str(checkout), str(dest)],
                   check=True)
    return dest


def measure_stack(stack: str, checkout: Path, combo: str, arches: str, extra: list[str],
                  logs: Path | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="cuforge-team-stack-") as tmp:
        t = Path(tmp)
        cold, cold_went = _setup(t / "state-cold", t / "team", stack,
                                 _clone(checkout, t / "cold"), combo, arches, extra,
                                 logs and logs / f"setup-{stack}-cold.log")
        subprocess.run([sys.executable, "-m", "cuforge", "index", str(t / "team")], cwd=ROOT,
                       check=True, capture_output=True)
        simple = next((t / "team").rglob("simple")).resolve().as_uri() + "/"
        team, team_went = _setup(t / "state-team", t / "mine", stack,
                                 _clone(checkout, t / "team-user"), combo, arches,
                                 [*extra, "--wheels", simple],
                                 logs and logs / f"setup-{stack}-team.log")
        manifest = next((t / "mine").rglob("manifest.jsonl"))
        used = [json.loads(line) for line in manifest.read_text().splitlines()]
    return {"packages": f"setup {stack}", "cold_s": round(cold, 1), "team_s": round(team, 1),
            "compiled_team": [e["package"] for e in used if e["status"] == "compiled"],
            "from_team": [e["package"] for e in used if e.get("source", "").startswith("team ")],
            "cold_went": cold_went, "team_went": team_went}


def table(rows: list[dict]) -> Table:
    t = Table(title=f"a team's wheels (--wheels, pypiserver on loopback) vs a cold build "
                    f"({machine()})")
    for col in ("packages", "cold s", "--wheels s", "wheels/cold", "taken from the team",
                "compiled with --wheels", "where --wheels' time went"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["packages"], f"{r['cold_s']:.1f}", f"{r['team_s']:.1f}",
                  f"{r['team_s'] / r['cold_s']:.2f}x", ", ".join(r["from_team"]) or "none",
                  ", ".join(r.get("compiled_team", [])) or "none", r.get("team_went", ""))
    return t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="cuforge-demo", help="comma-separated packages, built "
                   "together (one row)")
    p.add_argument("--combo", default="3.11-cu130")
    p.add_argument("--cuda-arch", default="", help="default: the combo's arches")
    p.add_argument("--src", action="append", default=[], metavar="NAME=PATH",
                   help="build NAME from a local tree")
    p.add_argument("--stack", help="a row for `setup STACK` instead (needs --checkout)")
    p.add_argument("--checkout", type=Path, help="a git clone of the stack's repository")
    p.add_argument("--logs", type=Path, help="with --stack: write each setup's output to "
                   "DIR/setup-STACK-{cold,team}.log")
    p.add_argument("setup_args", nargs="*", help="after --: passed to both setups "
                   "(--find-links DIR --no-index, --jobs N, --src NAME=PATH)")
    args = p.parse_args(argv)
    if args.stack:
        if not args.checkout:
            p.error("--stack needs --checkout PATH")
        row = measure_stack(args.stack, args.checkout, args.combo, args.cuda_arch,
                            [*args.setup_args, *(f"--src={s}" for s in args.src)], args.logs)
    else:
        row = measure(args.only, args.combo, args.cuda_arch, combo_env(args.combo), args.src)
    print(json.dumps(row), flush=True)
    Console().print(table([row]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
