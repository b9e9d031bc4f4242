"""The timeline: spans read from a trace, Chrome trace threads and Gantt lanes per (stage, stream) for
whatever streams a trace has, and a bounded number of drawn bars for huge traces."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Tuple

import numpy as np
import pytest

from vtrain.cli.gantt import MAX_BARS, lane_bars, merge_intervals, plot_timeline
from vtrain.timeline import Span, chrome_trace, kind_of, spans, streams_in_order


@dataclass
class ListedTrace:
    """A trace that lists its own spans, e.g. from an engine with more stream kinds."""

    spans: List[Tuple[int, str, str, str, float, float]]


def _engine_like(stages: int = 4, per_stream: int = 50) -> ListedTrace:
    out = []
    for s in range(stages):
        for i in range(per_stream):
            t = i * 1.0
            out.append((s, "compute", "forward" if i % 2 else "backward", f"x{i}", t, t + 0.6))
            out.append((s, "dp_comm", "dp reduce_scatter", f"rs{i}", t + 0.6, t + 0.9))
            out.append((s, "ep_a2a", "ep all_to_all", f"a2a{i}", t + 0.1, t + 0.2))
            out.append((s, "cp", "cp ring", f"cp{i}", t + 0.3, t + 0.5))
    return ListedTrace(out)


@pytest.fixture(scope="module")
def gpt3_trace():
    from vtrain import compose
    from vtrain.api import simulate_with_trace

    cfg = compose(["+experiment=gpt3_megatron"])
    report, trace = simulate_with_trace(cfg)
    return report, trace


def test_spans_of_the_pipeline_trace(gpt3_trace):
    report, trace = gpt3_trace
    items = spans(trace)
    p = report.plan
    fwd = [s for s in items if s.kind == "forward"]
    assert len(fwd) == p.pp * p.num_microbatches * p.virtual_stages
    assert len([s for s in items if s.kind == "backward"]) == len(fwd)
    assert streams_in_order(items)[:2] == ["compute", "dp_comm"]
    assert all(0 <= s.start <= s.end <= report.iteration_time_s + 1e-9 for s in items)
    assert {s.kind for s in items if s.stream == "dp_comm"} >= {"dp all_reduce"}
    assert {s.kind for s in items if s.stream == "compute"} == {"forward", "backward", "optimizer"}


def test_kind_of_drops_instance_numbers():
    assert kind_of("dp all_reduce chunk0 bucket12") == "dp all_reduce"
    assert kind_of("optimizer step") == "optimizer"
    assert kind_of("embedding grad all-reduce") == "embedding grad all-reduce"


def test_new_stream_kinds_get_their_own_threads_and_lanes(tmp_path):
    trace = _engine_like()
    ct = chrome_trace(trace)
    names = {(e["pid"], e["args"]["name"]) for e in ct["traceEvents"] if e.get("name") == "thread_name"}
    assert {n for _, n in names} == {"compute", "dp_comm", "ep_a2a", "cp"} and {p for p, _ in names} == {0, 1, 2, 3}
    bars = lane_bars(spans(trace), horizon=50.0)
    assert {(st, k) for (_, st, k) in bars} == {("compute", "forward"), ("compute", "backward"),
                                               ("dp_comm", "dp reduce_scatter"), ("ep_a2a", "ep all_to_all"),
                                               ("cp", "cp ring")}
    drawn = plot_timeline(trace, str(tmp_path / "t.png"), "engine-like")
    assert drawn == sum(len(s) for s, _ in bars.values())
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"


def test_merge_intervals_is_exact():
    s = np.array([5.0, 0.0, 1.0, 3.0, 3.5])
    e = np.array([6.0, 1.0, 2.0, 4.0, 3.7])
    ms, me = merge_intervals(s, e, gap=0.0)
    assert ms.tolist() == [0.0, 3.0, 5.0] and me.tolist() == [2.0, 4.0, 6.0]  # touching bars merge
    ms, me = merge_intervals(s, e, gap=1.0)
    assert ms.tolist() == [0.0] and me.tolist() == [6.0]


def test_huge_trace_is_capped_and_covers_the_same_time(tmp_path):
    """200,000 alternating tiny spans on 8 stages: at most max_bars rectangles are drawn, and every
    drawn bar lies within the extent of the spans it stands for."""
    rng = np.random.default_rng(0)
    out = []
    for s in range(8):
        starts = np.sort(rng.uniform(0, 100, 25_000))
        for i, t in enumerate(starts):
            out.append((s, "compute", "forward" if i % 2 else "backward", "x", float(t), float(t) + 1e-4))
    trace = ListedTrace(out)
    items = spans(trace)
    bars = lane_bars(items, horizon=100.0, max_bars=MAX_BARS)
    assert sum(len(b[0]) for b in bars.values()) <= MAX_BARS
    extent: dict = {}
    for sp in items:
        lo, hi = extent.get((sp.stage, sp.stream, sp.kind), (sp.start, sp.end))
        extent[(sp.stage, sp.stream, sp.kind)] = (min(lo, sp.start), max(hi, sp.end))
    for key, (bs, be) in bars.items():
        assert (bs.min(), be.max()) == pytest.approx(extent[key])
    assert plot_timeline(trace, str(tmp_path / "big.png")) <= MAX_BARS


def test_span_is_a_plain_tuple():
    sp = Span(0, "compute", "forward", "F0", 0.0, 1.0)
    assert tuple(sp) == (0, "compute", "forward", "F0", 0.0, 1.0)
