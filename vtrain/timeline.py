"""Chrome trace-event timeline (opens in Perfetto / chrome://tracing): one process per pipeline
stage, one thread per stream (compute, comm)."""
from __future__ import annotations

from typing import Any, Dict, List

from vtrain.sim.simulator import SimulationTrace

_STREAM_TID = {"compute": 0, "dp_comm": 1, "pp_p2p": 2}


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
        bwd, chunk = divmod(key - s * 2 * v, v)
        dur = trace.durations[key]
        name = f"{'B' if bwd else 'F'}{cs.microbatch[i]}" + (f".c{chunk}" if v > 1 else "")
        events.append({"ph": "X", "name": name, "cat": "backward" if bwd else "forward", "pid": s, "tid": 0,
                       "ts": (run.end[i] - dur) * 1e6, "dur": dur * 1e6,
                       "args": {"microbatch": cs.microbatch[i], "chunk": chunk}})
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
    bars: Dict[str, List[tuple]] = {"forward": [], "backward": []}
    rows: Dict[str, List[int]] = {"forward": [], "backward": []}
    v = cs.v
    for i, s in enumerate(cs.stage):
        key = cs.dur_key[i]
        kind = "backward" if (key - s * 2 * v) >= v else "forward"
        dur = trace.durations[key]
        bars[kind].append((run.end[i] - dur, dur))
        rows[kind].append(s)
    colours = {"forward": "tab:blue", "backward": "tab:orange", "dp_comm": "0.55", "compute": "tab:green"}
    for kind in ("forward", "backward"):
        for s in range(cs.p):
            spans = [b for b, r in zip(bars[kind], rows[kind]) if r == s]
            ax.broken_barh(spans, (s - 0.4, 0.55), facecolors=colours[kind], linewidth=0)
    for s, tail in enumerate(trace.tail):  # the comm stream as a thin bar under the compute stream
        for stream, _name, start, end in tail:
            lane = (s + 0.15, 0.25) if stream != "compute" else (s - 0.4, 0.8)
            ax.broken_barh([(start, end - start)], lane, facecolors=colours.get(stream, "0.55"), linewidth=0)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[k]) for k in ("forward", "backward", "dp_comm", "compute")]
    ax.legend(handles, ["forward", "recompute + backward", "gradient sync", "optimizer"], loc="upper right",
              fontsize=7, ncol=4)
    ax.set_yticks(range(cs.p))
    ax.set_yticklabels([f"stage {s}" for s in range(cs.p)], fontsize=7 if cs.p > 16 else 8)
    ax.invert_yaxis()
    ax.set_xlabel("time in the iteration (s)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
