"""End-to-end speed of the command line: ``python -m vtrain task=simulate ...`` as a whole process
(interpreter start-up, imports, Hydra, simulation, report.json, timeline.json, timeline.png), the median
of several runs after a warm-up, optionally against an earlier commit (checked out into a temporary
git worktree and run with the same interpreter), with the ratio of the medians.

    python bench/bench_cli.py                      # this checkout, 5 runs per command
    python bench/bench_cli.py --before 9866c75     # and the commit before the fast outputs, with ratios
    python bench/bench_cli.py --phases             # where the time of one MT-NLG run goes (in-process)
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

from vtrain.io.args import ArgumentParser, int_at_least

ROOT = Path(__file__).resolve().parents[1]
CASES: Dict[str, List[str]] = {
    "MT-NLG 530B (8,35,12), 3,360 A100": [
        "task=simulate", "+model=mtnlg530b", "+cluster=a100x3360", "parallelism.tp=8", "parallelism.pp=35",
        "parallelism.dp=12", "parallelism.micro_batch_size=1", "parallelism.recompute=full",
        "parallelism.sequence_parallel=false", "parallelism.distributed_optimizer=false",
        "training.global_batch_size=1920"],
    "GPT-3 175B (8,16,8), 1,024 A100": [
        "task=simulate", "+model=gpt175b", "+cluster=a100x1024", "parallelism.tp=8", "parallelism.pp=16",
        "parallelism.dp=8", "parallelism.micro_batch_size=1"],
    "bad input (tp=5), one-line error": [
        "task=simulate", "+model=gpt175b", "+cluster=a100x1024", "parallelism.tp=5", "parallelism.pp=1",
        "parallelism.dp=1"],
}


def time_runs(src: Path, args: List[str], runs: int, warmup: int) -> List[float]:
    """Wall seconds of ``runs`` whole-process runs (after ``warmup``), each in a fresh run directory."""
    env = dict(os.environ, PYTHONPATH=str(src), MPLBACKEND="Agg")
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(warmup + runs):
            cmd = [sys.executable, "-m", "vtrain", *args, f"hydra.run.dir={tmp}/run{i}"]
            t0 = time.perf_counter()
            subprocess.run(cmd, cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
            if i >= warmup:
                out.append(time.perf_counter() - t0)
    return out


def checkout(ref: str, into: Path) -> Path:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(into), ref], check=True,
                   capture_output=True)
    return into


def phases() -> None:
    """One MT-NLG run's parts, timed in this process."""
    t = time.perf_counter()
    marks = []

    def mark(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        marks.append((name, now - t))
        t = now

    import hydra  # noqa: F401

    from vtrain.cli.main import main  # noqa: F401
    mark("import vtrain.cli.main (Hydra, OmegaConf)")
    from vtrain import compose
    from vtrain.api import simulate_with_trace

    cfg = compose(CASES["MT-NLG 530B (8,35,12), 3,360 A100"][1:])
    mark("compose the config")
    report, trace = simulate_with_trace(cfg)
    mark("simulate with trace")
    from vtrain.io.jsonio import write_json
    from vtrain.timeline import chrome_trace

    with tempfile.TemporaryDirectory() as tmp:
        write_json(Path(tmp) / "report.json", report.to_dict())
        write_json(Path(tmp) / "timeline.json", chrome_trace(trace), indent=None)
        mark("report.json + timeline.json")
        import matplotlib.collections  # noqa: F401
        import matplotlib.figure  # noqa: F401

        from vtrain.cli.gantt import plot_timeline

        mark("import numpy and matplotlib")
        bars = plot_timeline(trace, str(Path(tmp) / "timeline.png"))
        mark(f"timeline.png ({bars:,} bars)")
    for name, s in marks:
        print(f"| {name} | {s * 1e3:,.0f} ms |")


def main(argv: Optional[List[str]] = None) -> None:
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int_at_least(1), default=5)
    ap.add_argument("--warmup", type=int_at_least(0), default=1)
    ap.add_argument("--before", help="a git ref to compare with (e.g. 9866c75)")
    ap.add_argument("--phases", action="store_true", help="time the parts of one MT-NLG run in-process")
    a = ap.parse_args(argv)
    if a.phases:
        phases()
        return
    with tempfile.TemporaryDirectory() as tmp:
        before = checkout(a.before, Path(tmp) / "before") if a.before else None
        try:
            head = f"| command | median of {a.runs} (min-max) |"
            print(head + (f" {a.before}: median (min-max) | ratio before/now |" if before else ""))
            print("|---|---|" + ("---|---|" if before else ""))
            for name, args in CASES.items():
                now = time_runs(ROOT, args, a.runs, a.warmup)
                row = f"| {name} | {statistics.median(now):.2f} s ({min(now):.2f}-{max(now):.2f}) |"
                if before is not None:
                    old = time_runs(before, args, a.runs, a.warmup)
                    row += (f" {statistics.median(old):.2f} s ({min(old):.2f}-{max(old):.2f}) |"
                            f" {statistics.median(old) / statistics.median(now):.1f}x |")
                print(row, flush=True)
        finally:
            if before is not None:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)],
                               capture_output=True)


if __name__ == "__main__":
    main()
