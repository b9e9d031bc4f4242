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
    assert {s.kind for s in items if s.stream == "compute"} == {"forward", "backward", "optimizer", "exposed tp comm"}


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


# draws 200,000 spans (~1.5 s of CPU); the fast loop draws a trace in
# test_cli_outputs.py::test_simulate_writes_strict_report_trace_png_and_log
@pytest.mark.slow
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


def _kinds_of_every_chart(gpt3_trace) -> List[List[str]]:
    from vtrain.cli.gantt import FIXED, kind_order

    _, trace = gpt3_trace
    charts = []
    for items in (spans(trace), spans(_engine_like())):
        charts.append([k for k, _ in kind_order(items, streams_in_order(items))])
    charts.append(list(FIXED) + ["dp reduce_scatter", "dp param all-gather", "embedding grad all-reduce"])
    return charts


def test_every_kind_gets_a_colour_far_from_every_other(gpt3_trace):
    """CIE76 distance in CIELAB between the colours of every pair of kinds of a chart (a just-noticeable
    difference is ~2.3): the palette itself, the GPT-3 chart's kinds, an engine-like trace's, every fixed kind."""
    import itertools

    from vtrain.cli.gantt import MIN_DELTA_E, PALETTE, colours, delta_e

    assert delta_e("tab:blue", "tab:blue") == 0.0 and delta_e("black", "white") == pytest.approx(100.0, abs=0.01)
    assert min(delta_e(a, b) for a, b in itertools.combinations(PALETTE, 2)) >= MIN_DELTA_E
    for kinds in _kinds_of_every_chart(gpt3_trace):
        col = colours(kinds)
        assert set(col) == set(kinds)
        for a, b in itertools.combinations(kinds, 2):
            assert delta_e(col[a], col[b]) >= MIN_DELTA_E, (a, b, col[a], col[b])


def test_exposed_tp_comm_is_drawn_on_the_compute_lane_inside_its_pass(gpt3_trace):
    report, trace = gpt3_trace
    items = spans(trace)
    tp = [s for s in items if s.kind == "exposed tp comm"]
    assert tp and {s.stream for s in tp} == {"compute"}
    for st in report.stages:  # the whole iteration is traced (192 micro-batches): the spans sum to the report's
        drawn = sum(s.end - s.start for s in tp if s.stage == st.stage)
        assert drawn == pytest.approx(st.exposed_comm_by_group["tp"], rel=1e-9)
    passes = {(s.stage, s.name): s for s in items if s.kind in ("forward", "backward")}
    for s in tp[:500]:
        host = passes[(s.stage, s.name.split(" ", 1)[1])]
        assert host.start <= s.start < s.end <= host.end + 1e-12
    ct = chrome_trace(items)  # nested in its pass on the compute thread: Perfetto draws it as a child slice
    assert any(e.get("cat") == "exposed tp comm" and e["tid"] == 0 for e in ct["traceEvents"])


# draws GPT-3's 1,210-span trace (~1.7 s of CPU); the fast loop draws one in
# test_cli_outputs.py::test_simulate_writes_strict_report_trace_png_and_log
@pytest.mark.slow
def test_many_microbatches_get_warm_up_steady_and_cool_down_panels(gpt3_trace, tmp_path):
    from matplotlib.colors import to_rgb
    from matplotlib.image import imread

    from vtrain.cli.gantt import colours, kind_order, zoom_windows

    report, trace = gpt3_trace
    items = spans(trace)
    (w_name, w0, w1), (s_name, s0, s1), (c_name, c0, c1) = zoom_windows(items, 1210)
    assert "warm-up" in w_name and "steady" in s_name and "cool-down" in c_name
    assert w0 == 0.0 and c1 == pytest.approx(report.iteration_time_s) and w1 < s0 < s1 < c0
    assert s1 - s0 < 0.02 * report.iteration_time_s  # two periods of 192 micro-batches x 2 chunks: readable
    assert zoom_windows(spans(_engine_like()), 1210) == []  # 50 wide passes: one panel
    png = tmp_path / "gpt3.png"
    plot_timeline(trace, str(png), "gpt3")
    rgb = np.rint(255 * imread(str(png))[..., :3]).astype(int).reshape(-1, 3)  # rint: round half to even, as round
    pixels = {tuple(int(v) for v in px) for px in np.unique(rgb, axis=0)}  # each colour drawn, once
    for kind, colour in colours([k for k, _ in kind_order(items, streams_in_order(items))]).items():
        assert tuple(int(round(255 * c)) for c in to_rgb(colour)) in pixels, kind  # drawn (and in the legend)
