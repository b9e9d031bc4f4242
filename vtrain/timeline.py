"""Chrome trace-event timeline (opens in Perfetto / chrome://tracing): one process per pipeline
stage, one thread per stream (compute, comm)."""
from __future__ import annotations

from typing import Any, Dict, List

from vtrain.sim.simulator import SimulationTrace

_STREAM_TID = {"compute": 0, "comm": 1}


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
