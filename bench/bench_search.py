"""Benchmark of the plan search on GPT-3 175B x 1,024 A100 (80 GB), tracking off.

(1) Exhaustive grid: every valid plan, how many fit, wall time (and CPU time of all processes).
(2) NSGA-II, ``--trials`` trials (default 300), ``--seeds`` seeds (default 5): per seed the gap of its
    fastest time-to-train and of its cheapest cost to the grid optimum (%), and the hypervolume of its
    Pareto front relative to the grid front's. Objectives are normalised to [0, 1] by the grid front's
    range (min..max of each objective over the exhaustive front); the reference point is (1.1, 1.1)
    in normalised units, i.e. 10% of the front's range beyond its worst point in each objective.
    Medians over the seeds are printed last.

(3) ``--e2e N``: the README's main command (``python -m vtrain +model=gpt175b +cluster=a100x1024``, MLflow
    on, a fresh run directory and a warm MLflow store) N times as a whole process; min / median / max wall
    seconds. ``--src DIR`` runs another checkout's sources (e.g. the code before a change) the same way.

Run:  python bench/bench_search.py [--trials 300] [--seeds 5] [--no-seed-population] [overrides ...]
      python bench/bench_search.py --e2e 5 [--src /path/to/other/checkout]
Targets: grid <= 30 s on 2 cores; NSGA-II within 2% of each optimum and >= 95% hypervolume; e2e <= 8 s.
"""
from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from argparse import Namespace
from pathlib import Path

from vtrain.cli.main import run_script
from vtrain.config.compose import compose
from vtrain.io.args import ArgumentParser, int_at_least
from vtrain.search.pareto import hypervolume_2d, normalise
from vtrain.search.run import run_search

BASE = ["+model=gpt175b", "+cluster=a100x1024", "search.progress_bar=false", "tracking.enabled=false"]
REF = (1.1, 1.1)


def cpu_s() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def end_to_end(runs: int, src: str | None, overrides: list) -> None:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "vtrain", "+model=gpt175b", "+cluster=a100x1024", "search.progress_bar=false",
               *overrides]
        walls = []
        for i in range(runs + 1):  # the first run creates the MLflow store and is not counted
            t0 = time.perf_counter()
            out = subprocess.run([*cmd, f"hydra.run.dir={tmp}/run{i}"], cwd=tmp, env=env, capture_output=True,
                                 text=True)
            wall = time.perf_counter() - t0
            if out.returncode != 0:
                raise SystemExit(out.stdout[-2000:] + out.stderr[-2000:])
            if i:
                walls.append(wall)
        print(f"e2e ({src or 'this checkout'}): {' '.join(cmd[1:])}: min {min(walls):.2f} s, median "
              f"{statistics.median(walls):.2f} s, max {max(walls):.2f} s over {runs} runs")


def main() -> int:
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int_at_least(1), default=300)
    ap.add_argument("--seeds", type=int_at_least(1), default=5)
    ap.add_argument("--no-seed-population", action="store_true", help="NSGA-II starts from random plans")
    ap.add_argument("--e2e", type=int_at_least(0), default=0, help="time the README's main command N times instead")
    ap.add_argument("--src", default=None, help="with --e2e: sources of another checkout (PYTHONPATH)")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for both runs")
    args = ap.parse_args()
    if args.e2e:
        end_to_end(args.e2e, args.src, args.overrides)
        return 0
    run_script(lambda: compare(args), args.overrides)  # a bad override is one line, as on the command line


def compare(args: Namespace) -> int:
    """The grid's optimum and Pareto front against NSGA-II's over seeds."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = compose(BASE + ["search=grid"] + args.overrides)
        c0, t0 = cpu_s(), time.perf_counter()
        grid = run_search(cfg, Path(tmp))
        wall, cpu = time.perf_counter() - t0, cpu_s() - c0
        fits = sum(1 for r in grid.records if r.metrics.get("fits") == 1.0)
        print(f"grid: {len(grid.records):,} valid plans, {grid.simulations:,} simulated (the rest exceed the "
              f"memory lower bound), {fits:,} fit memory; wall {wall:.1f} s, CPU {cpu:.1f} s on "
              f"{os.cpu_count()} cores; Pareto front {len(grid.front)} plans")
        t_opt, c_opt = grid.best["time"].metrics["time_to_train_s"], grid.best["cost"].metrics["cost_usd"]
        pts = [r.values for r in grid.front if r.values is not None]
        lo = tuple(min(p[i] for p in pts) for i in range(2))
        hi = tuple(max(p[i] for p in pts) for i in range(2))
        hv_grid = hypervolume_2d(normalise(pts, lo, hi), REF)
        print(f"  optimum: time to train {t_opt / 86400:.2f} days, cost ${c_opt:,.0f}; reference point "
              f"{REF} after normalising by time [{lo[0]:.4g}, {hi[0]:.4g}] s, cost [{lo[1]:.4g}, {hi[1]:.4g}] $")

        rows = []
        for seed in range(args.seeds):
            over = BASE + [f"search.n_trials={args.trials}", f"search.seed={seed}", "search.sampler=nsgaii",
                           f"search.seed_population={'false' if args.no_seed_population else 'true'}"]
            sub = Path(tmp) / f"seed{seed}"
            sub.mkdir()
            t0 = time.perf_counter()
            res = run_search(compose(over + args.overrides), sub)
            wall_s = time.perf_counter() - t0
            if not res.front:
                print(f"seed {seed}: no feasible plan found")
                rows.append((float("inf"), float("inf"), 0.0, wall_s))
                continue
            gap_t = 100 * (res.best["time"].metrics["time_to_train_s"] / t_opt - 1)
            gap_c = 100 * (res.best["cost"].metrics["cost_usd"] / c_opt - 1)
            hv = hypervolume_2d(normalise([r.values for r in res.front if r.values is not None], lo, hi), REF) / hv_grid
            rows.append((gap_t, gap_c, hv, wall_s))
            print(f"seed {seed}: {len(res.feasible)} feasible of {len(res.records)} trials, time gap {gap_t:.2f}%, "
                  f"cost gap {gap_c:.2f}%, hypervolume {100 * hv:.1f}% of the grid's, {wall_s:.1f} s")
        med = [statistics.median(c) for c in zip(*rows)]
        print(f"NSGA-II median over {args.seeds} seeds ({args.trials} trials): time gap {med[0]:.2f}%, "
              f"cost gap {med[1]:.2f}%, hypervolume {100 * med[2]:.1f}%, {med[3]:.1f} s per search")
    return 0


if __name__ == "__main__":
    sys.exit(main())
