"""PNG plots of the case studies (matplotlib, Agg backend: no display needed)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

from vtrain.casestudies.common import DAY_S, StudyResult
from vtrain.io.figure import colormap, log_scale, new_figure


def plot_parallelization(result: StudyResult, path: Path) -> None:
    """Training time vs cost of every plan; colour = tp, hollow = does not fit; baseline star; front."""
    d = result.data
    base = d["base"]
    fig = new_figure(figsize=(12, 6), dpi=110)
    ax = fig.subplots()
    colors: Dict[int, str] = {}
    palette = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink"]
    for r in d["reports"]:
        tp = r.plan.tp
        c = colors.setdefault(tp, palette[len(colors) % len(palette)])
        x, y = r.time_to_train_s / DAY_S, r.cost_usd / 1e6
        if r.fits:
            ax.scatter(x, y, s=18, color=c, alpha=0.8, label=f"tp={tp}" if f"tp={tp}" not in _labels(ax) else None)
        else:
            ax.scatter(x, y, s=18, facecolors="none", edgecolors=c, alpha=0.35, linewidths=0.8)
    front = d["front"]
    if front:
        ax.plot([r.time_to_train_s / DAY_S for r in front], [r.cost_usd / 1e6 for r in front], "k--", lw=1,
                label="Pareto front (fits)")
    bx, by = base.time_to_train_s / DAY_S, base.cost_usd / 1e6
    ax.scatter([bx], [by], marker="*", s=260, color="red", edgecolors="k", zorder=5,
               label=f"baseline (tp,pp,dp)=({base.plan.tp},{base.plan.pp},{base.plan.dp})")
    ax.axvline(bx, color="red", lw=0.6, alpha=0.5)
    ax.axhline(by, color="red", lw=0.6, alpha=0.5)
    for key, marker, lab in (("cheaper", "D", "cheapest at ≤ baseline time"),
                             ("faster", "s", "fastest at ≤ baseline cost")):
        if d[key]:
            r = d[key][0]
            ax.scatter([r.time_to_train_s / DAY_S], [r.cost_usd / 1e6], marker=marker, s=90, facecolors="none",
                       edgecolors="k", linewidths=1.5, zorder=6,
                       label=f"{lab}: ({r.plan.tp},{r.plan.pp},{r.plan.dp})")
    fitting = [r for r in d["reports"] if r.fits]
    if fitting:  # zoom on the interesting region: fitting plans up to 3x the baseline
        xs = [r.time_to_train_s / DAY_S for r in fitting if r.time_to_train_s <= 3 * base.time_to_train_s]
        ys = [r.cost_usd / 1e6 for r in fitting if r.cost_usd <= 2 * base.cost_usd]
        if xs and ys:
            ax.set_xlim(min(xs + [bx]) * 0.9, max(xs + [bx]) * 1.05)
            ax.set_ylim(min(ys + [by]) * 0.95, max(ys + [by]) * 1.05)
    ax.set_xlabel("time to train (days)")
    ax.set_ylabel("cost (million USD)")
    s = result.summary
    ax.set_title(f"{s['model']} on {s['cluster']}: {s['plans_simulated']} (tp,pp,dp) plans "
                 f"(hollow: out of memory)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path)


def _labels(ax: Any) -> List[str]:
    return [c.get_label() for c in ax.collections]


def plot_scheduling(result: StudyResult, path: Path) -> None:
    """Gantt chart per policy: x = hours, y = GPUs (node ranges), one colour per job."""
    d: Dict[str, Any] = result.data
    sims = d["sims"]
    total = d["cluster_gpus"]
    n = len(sims)
    fig = new_figure(figsize=(11, 2.6 * n + 0.8), dpi=110)
    axes = fig.subplots(n, 1, sharex=True, squeeze=False)
    cmap = colormap("tab20")
    names = d["job_names"]
    horizon = max(s.makespan_s for s in sims) / 3600.0
    for ax, sim in zip(axes[:, 0], sims):
        for rec in sim.records:
            color = cmap(names.index(rec.job) % 20)
            start, dur = rec.start_s / 3600.0, (rec.end_s - rec.start_s) / 3600.0
            for lo, hi in rec.gpu_ranges:
                ax.broken_barh([(start, dur)], (lo, hi - lo), facecolors=color, edgecolors="k", linewidth=0.4)
            lo = rec.gpu_ranges[0][0]
            if dur > horizon * 0.04:
                ax.text(start + dur / 2, lo + (rec.gpu_ranges[0][1] - lo) / 2, rec.job, ha="center", va="center",
                        fontsize=6.5, clip_on=True)
            ax.plot([rec.arrival_s / 3600.0], [total * 1.01], marker="v", color=color, ms=4, clip_on=False)
        ax.set_ylim(0, total)
        ax.set_ylabel("GPUs")
        ax.set_title(f"{sim.policy}: avg JCT {sim.avg_jct_s / 3600:.1f} h, makespan {sim.makespan_s / 3600:.1f} h, "
                     f"GPU utilization {sim.utilization * 100:.0f}%", fontsize=9)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("time (hours since the first arrival; ▼ = arrival)")
    from matplotlib.patches import Patch

    fig.legend([Patch(facecolor=cmap(i % 20), edgecolor="k") for i in range(len(names))], names, fontsize=7,
               loc="lower center", ncol=min(len(names), 6), bbox_to_anchor=(0.5, 0.0))
    fig.subplots_adjust(bottom=0.12)
    fig.suptitle(f"{result.summary['cluster']}: {len(names)} jobs", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path)


def plot_sizing(result: StudyResult, path: Path) -> None:
    """Predicted loss vs model size under the fixed-MFU assumption and with vtrain's best plans."""
    rows = result.tables["shapes"]
    s = result.summary
    fig = new_figure(figsize=(12, 5), dpi=115)
    ax, ax2 = fig.subplots(1, 2)
    ok = [r for r in rows if r["feasible_vtrain"]]
    n_all = [r["params_b"] for r in rows]
    ax.plot(n_all, [r["loss_fixed_mfu"] for r in rows], "o--", color="tab:gray",
            label=f"fixed MFU {s['assumed_mfu'] * 100:.0f}% (Chinchilla-style)")
    ax.plot([r["params_b"] for r in ok], [r["loss_vtrain"] for r in ok], "o-", color="tab:blue",
            label="vtrain best plan per shape")
    for key, marker, color, lab in (("chinchilla_choice", "s", "tab:gray", "fixed-MFU choice"),
                                    ("vtrain_choice", "*", "tab:red", "vtrain choice")):
        c = s.get(key)
        if c:
            y = c["loss_vtrain"] if key == "vtrain_choice" else c["loss_fixed_mfu"]
            ax.scatter([c["params_b"]], [y], marker=marker, s=220, color=color, edgecolors="k", zorder=5,
                       label=f"{lab}: {c['shape']} ({c['params_b']:.1f}B)")
    ch = s.get("chinchilla_choice")
    if ch and ch.get("loss_vtrain") is not None:
        ax.scatter([ch["params_b"]], [ch["loss_vtrain"]], marker="s", s=120, facecolors="none", edgecolors="tab:red",
                   linewidths=1.5, zorder=6, label="fixed-MFU choice, as vtrain predicts it")
    ax.axvline(s["chinchilla_closed_form"]["params_b"], color="k", lw=0.7, ls=":",
               label=f"closed-form N_opt at fixed MFU ({s['chinchilla_closed_form']['params_b']:.1f}B)")
    log_scale(ax, "x")
    ax.set_xlabel("parameters (billions, log)")
    ax.set_ylabel("predicted loss L(N, D)")
    ax.set_title(f"budget {s['budget_gpu_hours']:,.0f} GPU-h, deadline {s['deadline_days']:g} days on "
                 f"{s['cluster']}", fontsize=10)
    ax.legend(fontsize=7.5)
    ax.grid(alpha=0.3, which="both")
    ax2.bar(range(len(ok)), [r["tokens_vtrain"] / 1e9 for r in ok], color="tab:blue", alpha=0.7,
            label="tokens within budget (vtrain)")
    ax2.plot(range(len(rows)), [r["tokens_fixed_mfu"] / 1e9 for r in rows], "o--", color="tab:gray",
             label="tokens at fixed MFU")
    ax2.set_xticks(range(len(rows)))
    ax2.set_xticklabels([r["shape"] for r in rows], rotation=45, ha="right", fontsize=7)
    ax2.set_ylabel("training tokens D (billions)")
    ax3 = ax2.twinx()
    ax3.plot(range(len(ok)), [r["mfu_vtrain_pct"] for r in ok], "x-", color="tab:red", label="vtrain MFU (%)")
    ax3.axhline(s["assumed_mfu"] * 100, color="tab:red", lw=0.7, ls=":")
    ax3.set_ylabel("MFU (%)")
    h1, l1 = ax2.get_legend_handles_labels()
    h2, l2 = ax3.get_legend_handles_labels()
    ax2.legend(h1 + h2, l1 + l2, fontsize=7.5, loc="upper right")
    ax2.set_title("tokens and MFU per shape", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
