"""The iteration's timeline as spans, and as a Chrome trace-event file (opens in Perfetto /
chrome://tracing): one process per pipeline stage, one thread per stream of that stage.

:func:`spans` is the one place that reads a :class:`~vtrain.sim.simulator.SimulationTrace`; the Chrome
trace and the Gantt chart (:mod:`vtrain.cli.gantt`) draw whatever streams it yields (today a compute
and a communication stream per stage, with each pass's exposed communication (tp, cp, fsdp, ep) drawn
on the compute lane; more stream kinds such as ``dp_comm``, ``fsdp``, ``ep_a2a`` or
``cp`` need no change here when a trace carries them as ``trace.spans``).
"""
from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, NamedTuple, Sequence

from vtrain.sim.launch import COMM_GROUPS

COMPUTE = "compute"
_KIND = {0: ("F", "forward"), 1: ("B", "backward"), 2: ("W", "weight-grad"), 3: ("F&B", "fused")}
_NUMBERED = re.compile(r"\s+(chunk|buckets|bucket|layer|mb)\s?\d+(-\d+)?")


class Span(NamedTuple):
    """One busy interval of one stream of one pipeline stage."""

    stage: int
    stream: str  # the lane: compute, comm, dp_comm, ...
    kind: str  # what runs (colour and legend): forward, backward, optimizer, dp all_reduce, ...
    name: str  # this instance, e.g. F12.c1 or "dp all_reduce chunk0 bucket3"
    start: float  # seconds from the start of the iteration
    end: float


def kind_of(name: str) -> str:
    """The kind of a named event: its name without instance numbers ("dp all_reduce chunk0 bucket3" ->
    "dp all_reduce"); "optimizer step" -> "optimizer"."""
    kind = _NUMBERED.sub("", name).strip()
    return "optimizer" if kind == "optimizer step" else kind


def spans(trace: Any) -> List[Span]:
    """Every span of a simulation trace. A trace that lists its own spans (``trace.spans``: tuples of
    stage, stream, kind, name, start, end) is taken as it is; the pipeline trace of today's engine is
    read from its compiled schedule (forward/backward passes on the compute stream) and its per-stage
    tail events (stream, name, start, end). A list of spans is returned as it is."""
    if isinstance(trace, list):
        return trace
    own = getattr(trace, "spans", None)
    if own is not None:
        return [Span(*s) for s in own]
    cs, end = trace.schedule, trace.run.end
    v = cs.v
    kinds = getattr(cs, "kinds", 2)
    task_kind = getattr(cs, "kind", ())
    a2a = getattr(trace, "ep_comm", ())
    exposed = getattr(trace, "exposed_comm", ())
    out: List[Span] = []
    for i, s in enumerate(cs.stage):
        key = cs.dur_key[i]
        kind = task_kind[i] if task_kind else (key - s * 2 * v) // v
        if kind < 0 or kind not in _KIND:  # a fused pair's zero-length wait
            continue
        chunk = (key - s * kinds * v) % v if kind < 3 else 0
        short, cat = _KIND[kind]
        name = f"{short}{cs.microbatch[i]}" + (f".c{chunk}" if v > 1 else "")
        start = trace.start(i)
        out.append(Span(s, COMPUTE, cat, name, start, end[i]))
        if a2a and a2a[key] > 0:  # dispatch + combine of the pass's MoE layers, drawn from its start
            out.append(Span(s, "ep_comm", "all_to_all", f"a2a {name}", start, start + a2a[key]))
        if exposed:
            out += _exposed(s, name, end[i], exposed[key])
    for s, tail in enumerate(trace.tail):
        for stream, name, start, stop in tail:
            out.append(Span(s, stream, kind_of(name), name, start, stop))
    return out


def _exposed(stage: int, name: str, end: float, by_group: Sequence[float]) -> List[Span]:
    """The pass's exposed communication (the compute stream waiting on a collective) on the compute lane, by
    group, stacked at the pass's end: in the run it is spread over the pass's layers; its length is what it
    costs the pass."""
    out = []
    for group, seconds in zip(COMM_GROUPS, by_group):
        if seconds > 0:
            out.append(Span(stage, COMPUTE, f"exposed {group} comm", f"{group} {name}", end - seconds, end))
            end -= seconds
    return out


def streams_in_order(items: Iterable[Span]) -> List[str]:
    """Stream names in lane order: compute first, then the others as they first appear."""
    seen: Dict[str, None] = {COMPUTE: None}
    for sp in items:
        seen.setdefault(sp.stream, None)
    return list(seen)


def chrome_trace(trace: Any) -> Dict[str, Any]:
    """The trace (or its :func:`spans`) as Chrome trace events: pid = stage, tid = stream, one complete
    event per span."""
    items = spans(trace)
    tids = {name: i for i, name in enumerate(streams_in_order(items))}
    stages = sorted({sp.stage for sp in items})
    events: List[Dict[str, Any]] = []
    for s in stages:
        events.append({"ph": "M", "name": "process_name", "pid": s, "args": {"name": f"stage {s}"}})
        for stream, tid in tids.items():
            events.append({"ph": "M", "name": "thread_name", "pid": s, "tid": tid, "args": {"name": stream}})
    for sp in items:
        events.append({"ph": "X", "name": sp.name, "cat": sp.kind, "pid": sp.stage, "tid": tids[sp.stream],
                       "ts": sp.start * 1e6, "dur": (sp.end - sp.start) * 1e6})
    return {"traceEvents": events, "displayTimeUnit": "ms"}
