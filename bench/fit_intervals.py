"""Plot the held-out 80% prediction intervals of a leave-one-source-out calibration, one panel per source.

The intervals are fitted by ``python -m vtrain task=calibrate calibrate.scope=all`` (vtrain/calibration/
intervals_fit.py: split-conformal on the leave-one-source-out residuals; calibrate.write=true writes the table
into vtrain/data/intervals.json); that run's predictions.csv gives each row its held-out prediction and the
interval the table refitted without its source gives it. This script only draws them.

    python bench/fit_intervals.py outputs/<run>/predictions.csv --plot docs/intervals.png
"""
from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from vtrain.io.args import ArgumentParser, new_file


def existing_file(text: str) -> Path:
    """An argparse ``type``: a file that exists."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text}: no such file")
    return path


def read(path: Path) -> Dict[str, List[Dict[str, float]]]:
    """Per source: each row's measured / held-out ratio and its interval factors."""
    out: Dict[str, List[Dict[str, float]]] = defaultdict(list)
    with path.open(newline="") as fh:
        for rec in csv.DictReader(fh):
            out[rec["source"]].append({"pred": float(rec["held_out_s"]),
                                       "ratio": float(rec["measured_s"]) / float(rec["held_out_s"]),
                                       "lo": float(rec["interval_lo_factor"]), "hi": float(rec["interval_hi_factor"])})
    return dict(out)


def plot(by_source: Dict[str, List[Dict[str, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(by_source)
    cols = 4
    rows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), sharey=True, squeeze=False)
    for ax, name in zip(axes.flat, names):
        pts = sorted(by_source[name], key=lambda p: p["pred"])
        x = np.arange(len(pts))
        ratio = np.array([p["ratio"] for p in pts])
        lo, hi = np.array([p["lo"] for p in pts]), np.array([p["hi"] for p in pts])
        hit = (lo <= ratio) & (ratio <= hi)
        ax.vlines(x, lo, hi, color="0.75", lw=1.5 if len(pts) < 100 else 0.4)
        size = 3 if len(pts) > 100 else 10
        ax.scatter(x[hit], ratio[hit], s=size, color="tab:blue", zorder=3)
        ax.scatter(x[~hit], ratio[~hit], s=size, color="tab:red", zorder=3)
        ax.axhline(1.0, color="k", lw=0.6)
        ax.set_yscale("log")
        ticks = [0.5, 0.67, 0.8, 1.0, 1.25, 1.5, 2.0]
        ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
        ax.set_title(f"{name}\nheld out: coverage {100 * hit.mean():.0f}% of {len(pts)}", fontsize=8)
    for ax in axes.flat[len(names):]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel("measured / held-out prediction")
    fig.suptitle("80% intervals refitted without each source (grey), measured inside (blue) / outside (red)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("predictions", type=existing_file, nargs="?", default=None,
                    help="predictions.csv of a task=calibrate calibrate.scope=all run")
    ap.add_argument("--plot", type=new_file, default=None, help="write the plot here (PNG)")
    args = ap.parse_args(argv)
    if args.predictions is None:
        ap.error("give the predictions.csv of a task=calibrate calibrate.scope=all run")
    by_source = read(args.predictions)
    for name, pts in by_source.items():
        hit = [p["lo"] <= p["ratio"] <= p["hi"] for p in pts]
        print(f"| {name} | {len(pts)} | {100 * np.mean(hit):.1f}% |")
    if args.plot:
        plot(by_source, args.plot)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
