"""Chrome trace-event timeline (opens in Perfetto / chrome://tracing): one process per pipeline
stage, one thread per stream (compute, comm)."""
from __future__ import annotations

from typing import Any, Dict, List

from vtrain.sim.simulator import SimulationTrace

_STREAM_TID = {"compute": 0, "dp_comm": 1, "pp_p2p": 2, "ep_comm": 3}
_KIND = {0: ("F", "forward"), 1: ("B", "backward"), 2: ("W", "weight-grad"), 3: ("F&B", "fused")}


def _task(cs: Any, i: int) -> tuple[int, int, str, str]:
    """(kind, chunk, short name, category) of task ``i`` (kind -1: a fused pair's zero-length wait)."""
    s, key, v = cs.stage[i], cs.dur_key[i], cs.v
    kinds = getattr(cs, "kinds", 2)
    kind = cs.kind[i] if getattr(cs, "kind", ()) else (key - s * 2 * v) // v
    chunk = (key - s * kinds * v) % v if 0 <= kind < 3 else 0
    name, cat = _KIND.get(kind, ("wait", "wait"))
    return kind, chunk, name, cat


def chrome_trace(trace: SimulationTrace) -> Dict[str, Any]:
    cs, run = trace.schedule, trace.run
    events: List[Dict[str, Any]] = []
    for s in range(cs.p):
        events.append({"ph": "M", "name": "process_name", "pid": s, "args": {"name": f"stage {s}"}})
        for stream, tid in _STREAM_TID.items():
            events.append({"ph": "M", "name": "thread_name", "pid": s, "tid": tid, "args": {"name": stream}})
    v = cs.v
    for i, s in enumerate(cs.stage):
        key = cs.dur_key[i]
        kind, chunk, short, cat = _task(cs, i)
        if kind < 0:
            continue
        dur = trace.durations[key]
        name = f"{short}{cs.microbatch[i]}" + (f".c{chunk}" if v > 1 else "")
        events.append({"ph": "X", "name": name, "cat": cat, "pid": s, "tid": 0,
                       "ts": (run.end[i] - dur) * 1e6, "dur": dur * 1e6,
                       "args": {"microbatch": cs.microbatch[i], "chunk": chunk}})
        a2a = trace.ep_comm[key] if trace.ep_comm else 0.0
        if a2a > 0:  # dispatch + combine of the pass's MoE layers, drawn from its start
            events.append({"ph": "X", "name": f"a2a {name}", "cat": "ep_comm", "pid": s, "tid": 3,
                           "ts": (run.end[i] - dur) * 1e6, "dur": a2a * 1e6})
    for s, tail in enumerate(trace.tail):
        for stream, name, start, end in tail:
            events.append({"ph": "X", "name": name, "cat": stream, "pid": s, "tid": _STREAM_TID[stream],
                           "ts": start * 1e6, "dur": (end - start) * 1e6})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def plot_timeline(trace: SimulationTrace, path: str, title: str = "") -> None:
    """A Gantt chart of the pipeline: one row per stage, forward / backward passes on the compute
    stream and gradient sync on the communication stream (the thin bar below), so bubbles show as gaps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cs, run = trace.schedule, trace.run
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.32 * cs.p))
    bars: Dict[str, List[tuple]] = {"forward": [], "backward": [], "fused": []}
    rows: Dict[str, List[int]] = {"forward": [], "backward": [], "fused": []}
    for i, s in enumerate(cs.stage):
        key = cs.dur_key[i]
        k = _task(cs, i)[0]
        if k < 0:
            continue
        kind = "forward" if k == 0 else ("fused" if k == 3 else "backward")
        dur = trace.durations[key]
        bars[kind].append((run.end[i] - dur, dur))
        rows[kind].append(s)
    colours = {"forward": "tab:blue", "backward": "tab:orange", "fused": "tab:purple", "dp_comm": "0.55",
               "compute": "tab:green"}
    for kind in ("forward", "backward", "fused"):
        for s in range(cs.p):
            spans = [b for b, r in zip(bars[kind], rows[kind]) if r == s]
            ax.broken_barh(spans, (s - 0.4, 0.55), facecolors=colours[kind], linewidth=0)
    for s, tail in enumerate(trace.tail):  # the comm stream as a thin bar under the compute stream
        for stream, _name, start, end in tail:
            lane = (s + 0.15, 0.25) if stream != "compute" else (s - 0.4, 0.8)
            ax.broken_barh([(start, end - start)], lane, facecolors=colours.get(stream, "0.55"), linewidth=0)
    shown = ["forward", "backward", *(["fused"] if bars["fused"] else []), "dp_comm", "compute"]
    labels = {"forward": "forward", "backward": "recompute + backward", "fused": "forward & backward (overlapped)",
              "dp_comm": "gradient sync", "compute": "optimizer"}
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[k]) for k in shown]
    ax.legend(handles, [labels[k] for k in shown], loc="upper right", fontsize=7, ncol=len(shown))
    ax.set_yticks(range(cs.p))
    ax.set_yticklabels([f"stage {s}" for s in range(cs.p)], fontsize=7 if cs.p > 16 else 8)
    ax.invert_yaxis()
    ax.set_xlabel("time in the iteration (s)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
