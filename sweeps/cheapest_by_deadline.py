"""vTrain's "cheapest plan by deadline" curve: for each deadline, the cheapest plan that trains within it
(``search.max_days``), for GPT-3 175B on 1,024 A100 and MT-NLG 530B on 3,360 A100.

Run:  python sweeps/cheapest_by_deadline.py [--out DIR] [--days 15,20,...] [extra overrides ...]
Writes ``cheapest_by_deadline.csv`` (model, deadline, plan, GPUs, days, cost, MFU) and a PNG to DIR.
The same as a Hydra multirun, one job per deadline:  sweeps/cheapest_by_deadline.sh
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import List

from vtrain.config.compose import compose
from vtrain.errors import ConfigError
from vtrain.io.args import ArgumentParser
from vtrain.io.labels import plan_label
from vtrain.io.tables import write_csv
from vtrain.search.run import run_search

CASES = {"gpt175b": "a100x1024", "mtnlg530b": "a100x3360"}


def _days(text: str) -> List[float]:
    try:
        days = [float(d) for d in text.split(",")]
    except ValueError:
        days = []
    if not days or not all(0 < d < 1e6 for d in days):
        raise ConfigError(f"--days={text}: must be comma-separated numbers of days in (0, 1000000)")
    return days


def main(args: argparse.Namespace) -> None:
    out = Path(args.out)
    deadlines = _days(args.days)
    rows = []
    for model, cluster in CASES.items():
        for days in deadlines:
            with tempfile.TemporaryDirectory() as tmp:
                cfg = compose([f"+model={model}", f"+cluster={cluster}", f"search.max_days={days}",
                               "search.progress_bar=false", "tracking.enabled=false", *args.overrides])
                res = run_search(cfg, Path(tmp))
            best = res.best.get("cost")
            m = best.metrics if best else {}
            rows.append({"model": model, "cluster": cluster, "max_days": days,
                         "plan": plan_label(best.plan) if best else "none within the deadline",
                         "gpus": m.get("gpus_used"), "days": m["time_to_train_s"] / 86400 if best else None,
                         "cost_musd": m["cost_usd"] / 1e6 if best else None,
                         "mfu_pct": 100 * m["mfu"] if best else None})
            print(f"{model} within {days:g} days: {rows[-1]['plan']} "
                  + (f"{m['gpus_used']:.0f} GPUs, {rows[-1]['days']:.1f} days, ${rows[-1]['cost_musd']:.3f}M"
                     if best else ""))
    write_csv(out / "cheapest_by_deadline.csv", rows, float_digits=6)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    for model in CASES:
        pts = [(r["max_days"], r["cost_musd"]) for r in rows if r["model"] == model and r["cost_musd"] is not None]
        if pts:
            ax.plot(*zip(*pts), "o-", label=f"{model} on {CASES[model]}")
    ax.set_xlabel("deadline (days)")
    ax.set_ylabel("cheapest plan (million USD)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "cheapest_by_deadline.png")
    print(f"wrote {out / 'cheapest_by_deadline.csv'} and .png")


if __name__ == "__main__":
    from vtrain.cli.main import run_script

    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="outputs/cheapest_by_deadline")
    ap.add_argument("--days", default="25,30,40,60,90,120,180")
    ap.add_argument("overrides", nargs="*")
    cli = ap.parse_args()
    run_script(lambda: main(cli), cli.overrides)
