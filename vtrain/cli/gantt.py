"""The pipeline timeline as a Gantt chart (PNG): one row per stage, one lane per stream of the stage
(the first, compute, lane is the tall one), one colour per kind of span, so bubbles show as gaps.

- Colours: every kind of span in a chart gets its own colour of :data:`PALETTE` (15 colours at least
  :data:`MIN_DELTA_E` apart in CIELAB, :func:`delta_e`); the common kinds keep theirs from chart to chart.
- Exposed communication (a pass's compute stream waiting on a tp/cp/fsdp/ep collective) is drawn on the
  compute lane, over the end of its pass (:func:`vtrain.timeline.spans`).
- Many micro-batches (a pass narrower than :data:`MIN_PASS_PX` pixels over the whole iteration): below
  the whole iteration, three zoomed panels show the warm-up, two steady-state periods of stage 0 and the
  cool-down with the gradient reduction and the optimizer step; the overview shades where they are.

Drawn in batches: one PolyCollection per kind and panel (not one call per bar), and at most ``max_bars``
rectangles per panel: bars of one lane and kind closer than half a pixel are merged first (invisible at
the PNG's resolution), more coarsely only when a trace is larger still. matplotlib is imported here
only, without pyplot (:mod:`vtrain.io.figure`).
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple, cast

import numpy as np

from vtrain.timeline import COMPUTE, Span, spans, streams_in_order

MAX_BARS = 20_000
WIDTH_IN, DPI = 11.0, 110
MIN_PASS_PX = 4.0  # a median pass narrower than this over the whole iteration: zoomed panels below it
# Tableau 10 (matplotlib's default cycle) and five ColorBrewer colours (Set2 yellow; Paired light blue,
# light green, light purple; near-black): every pair is >= 22 CIE76 units apart (tests/test_timeline.py)
PALETTE = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray",
           "tab:olive", "tab:cyan", "#1b1b1b", "#ffd92f", "#a6cee3", "#b2df8a", "#cab2d6")
MIN_DELTA_E = 20.0  # CIE76: ~2.3 is a just-noticeable difference (Sharma 2003); 20 is unmistakable side by side
FIXED = {"forward": "tab:blue", "backward": "tab:orange", "weight-grad": "#ffd92f", "fused": "tab:purple",
         "optimizer": "tab:green", "exposed tp comm": "tab:red", "exposed cp comm": "tab:pink",
         "exposed fsdp comm": "#1b1b1b", "exposed ep comm": "tab:brown", "dp all_reduce": "tab:gray",
         "all_to_all": "tab:cyan"}
PASSES = ("forward", "backward", "weight-grad", "fused")


def merge_intervals(start: np.ndarray, end: np.ndarray, gap: float) -> Tuple[np.ndarray, np.ndarray]:
    """Intervals sorted by start, with those that overlap or are less than ``gap`` apart merged."""
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] - reach[:-1] > gap
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], reach[last]


def lane_bars(items: Sequence[Span], horizon: float, max_bars: int = MAX_BARS,
              width_px: float = 1000.0) -> Dict[Tuple[int, str, str], Tuple[np.ndarray, np.ndarray]]:
    """(stage, stream, kind) -> (starts, ends) of the bars to draw: gaps under half a pixel merged;
    if more than ``max_bars`` remain, the merge gap doubles until they fit."""
    groups: Dict[Tuple[int, str, str], List[Tuple[float, float]]] = {}
    for sp in items:
        groups.setdefault((sp.stage, sp.stream, sp.kind), []).append((sp.start, sp.end))
    arrays = {k: np.asarray(v, dtype=float).reshape(-1, 2) for k, v in groups.items()}
    gap = 0.5 * horizon / width_px if horizon > 0 else 0.0
    while True:
        bars = {k: merge_intervals(a[:, 0], a[:, 1], gap) for k, a in arrays.items()}
        total = sum(len(b[0]) for b in bars.values())
        if total <= max_bars or gap <= 0 or gap > horizon:
            return bars
        gap *= 2.0


def lane_layout(streams: Sequence[str]) -> Dict[str, Tuple[float, float]]:
    """Each stream's (offset from the stage's row centre, height): compute tall, the others thin below."""
    others = [s for s in streams if s != COMPUTE]
    if not others:
        return {COMPUTE: (-0.4, 0.8)}
    layout = {COMPUTE: (-0.4, 0.5)}
    h = 0.3 / len(others)
    for i, s in enumerate(others):
        layout[s] = (0.12 + i * h, h * 0.9)
    return layout


def colours(kinds: Sequence[str]) -> Dict[str, str]:
    """One colour per kind: the kind's own (:data:`FIXED`) when it has one, else the next palette colour no
    other kind of this chart holds (colours repeat only past the palette's 15)."""
    taken = {FIXED[k] for k in kinds if k in FIXED}
    free = [c for c in PALETTE if c not in taken] or list(PALETTE)
    out: Dict[str, str] = {}
    for i, k in enumerate([k for k in kinds if k not in FIXED]):
        out[k] = free[i % len(free)]
    return {k: FIXED.get(k) or out[k] for k in kinds}


def _lab(colour: str) -> np.ndarray:
    """CIELAB (D65) of a matplotlib colour: sRGB companding (IEC 61966-2-1), XYZ, then CIE 1976 L*a*b*."""
    from matplotlib.colors import to_rgb

    rgb = np.asarray(to_rgb(colour))
    lin = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    m = np.array([[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750],
                  [0.0193339, 0.1191920, 0.9503041]])  # sRGB -> XYZ (D65), IEC 61966-2-1
    xyz = m @ lin / np.array([0.95047, 1.0, 1.08883])  # relative to the D65 white point
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def delta_e(a: str, b: str) -> float:
    """CIE76 colour difference: the Euclidean distance of two colours in CIELAB."""
    return float(np.linalg.norm(_lab(a) - _lab(b)))


def kind_order(items: Sequence[Span], streams: Sequence[str]) -> List[Tuple[str, str]]:
    """(kind, stream) in drawing and legend order: lane by lane; on the compute lane the passes, the
    optimizer, then exposed communication (drawn over its pass); other kinds as they first appear."""
    first: Dict[str, str] = {}
    for sp in items:
        first.setdefault(sp.kind, sp.stream)
    fixed = [*PASSES, "optimizer"]

    def rank(k: str) -> Tuple[int, int, int]:
        exposed = k.startswith("exposed ")
        return (streams.index(first[k]), fixed.index(k) if k in fixed else len(fixed) + int(exposed),
                list(first).index(k))

    return [(k, first[k]) for k in sorted(first, key=rank)]


def zoom_windows(items: Sequence[Span], width_px: float = 1000.0) -> List[Tuple[str, float, float]]:
    """(title, start, end) of the warm-up, two steady-state periods of stage 0 and the cool-down, when a
    median pass is narrower than :data:`MIN_PASS_PX` over the whole iteration; else none."""
    passes = [sp for sp in items if sp.stream == COMPUTE and sp.kind in PASSES]
    horizon = max((sp.end for sp in items), default=0.0)
    if len(passes) < 8 or horizon <= 0:
        return []
    median = float(np.median([sp.end - sp.start for sp in passes]))
    if median / horizon * width_px >= MIN_PASS_PX:
        return []
    stage0 = sorted((sp for sp in passes if sp.stage == 0), key=lambda sp: sp.start)
    back = [sp.start for sp in stage0 if sp.kind != "forward"]
    fwd = [sp.start for sp in stage0 if sp.kind in ("forward", "fused")]
    if len(back) < 3 or not fwd:
        return []
    period = float(np.median(np.diff(back)))  # one backward (and the forward between) per period
    mid = back[len(back) // 2]
    return [("warm-up", 0.0, min(horizon, back[0] + 2 * period)),
            ("steady state: 2 periods of stage 0", mid - period, mid + period),
            ("cool-down, gradient reduction, optimizer", max(0.0, fwd[-1] - period), horizon)]


def _draw(ax: Any, items: Sequence[Span], lo: float, hi: float, layout: Dict[str, Tuple[float, float]],
          order: Sequence[Tuple[str, str]], colour: Dict[str, str], width_px: float, max_bars: int) -> int:
    """The bars of ``items`` within [lo, hi] on ``ax`` (merged to the panel's pixel); returns how many."""
    from matplotlib.collections import PolyCollection

    inside = [sp for sp in items if sp.end >= lo and sp.start <= hi]
    bars = lane_bars([sp for sp in inside if not sp.kind.startswith("exposed ")], hi - lo, max_bars, width_px)
    # exposed communication sits inside its pass: merged across the passes between, or widened to a pixel,
    # it would paint them over; drawn to scale, a sub-pixel part blends into its pass's colour
    bars.update(lane_bars([sp for sp in inside if sp.kind.startswith("exposed ")], 0.0, max_bars, width_px))
    min_px = (hi - lo) / width_px  # a bar is at least one pixel wide, so no span is invisible
    drawn = 0
    for kind, _ in order:
        verts = []
        min_width = 0.0 if kind.startswith("exposed ") else min_px
        for (stage, stream, k), (s, e) in bars.items():
            if k != kind:
                continue
            off, h = layout[stream]
            quad = np.empty((len(s), 4, 2))
            quad[:, 0, 0] = quad[:, 1, 0] = s
            quad[:, 2, 0] = quad[:, 3, 0] = np.maximum(e, s + min_width)
            quad[:, [0, 3], 1] = stage + off
            quad[:, [1, 2], 1] = stage + off + h
            verts.append(quad)
        if verts:
            block = np.concatenate(verts)
            drawn += len(block)
            ax.add_collection(PolyCollection(cast(Any, block), facecolors=colour[kind], linewidths=0), autolim=False)
    ax.set_xlim(lo, hi)
    return drawn


def plot_timeline(trace: Any, path: str, title: str = "", max_bars: int = MAX_BARS) -> int:
    """Write the Gantt chart of ``trace`` (or its spans) to ``path``; returns the number of bars drawn."""
    from matplotlib.patches import Rectangle

    from vtrain.io.figure import new_figure

    items = spans(trace)
    stages = max((sp.stage for sp in items), default=0) + 1
    horizon = max((sp.end for sp in items), default=1.0)
    streams = streams_in_order(items)
    layout = lane_layout(streams)
    order = kind_order(items, streams)
    colour = colours([k for k, _ in order])
    windows = zoom_windows(items, WIDTH_IN * DPI)

    ncol = min(4, max(1, len(order)))
    legend_in = 0.1 + 0.18 * -(-len(order) // ncol)
    top_in = 0.35 + 0.32 * stages  # the title, the stages' rows
    zoom_in = 0.75 + 0.2 * stages if windows else 0.0  # the panels' titles and tick labels, their rows
    height = legend_in + zoom_in + 0.45 + top_in  # 0.45: the overview's tick labels and axis label
    fig = new_figure(figsize=(WIDTH_IN, height))
    left, right = 0.75 / WIDTH_IN, 1 - 0.15 / WIDTH_IN
    ax = fig.add_axes((left, (legend_in + zoom_in + 0.45) / height, right - left, (top_in - 0.35) / height))
    drawn = _draw(ax, items, 0.0, horizon * 1.01, layout, order, colour, WIDTH_IN * DPI, max_bars)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("time in the iteration (s)", fontsize=8)
    panels = [ax]
    if windows:
        width = (right - left - 0.04 * (len(windows) - 1)) / len(windows)
        for i, (name, lo, hi) in enumerate(windows):
            ax.axvspan(lo, hi, color="0.5", alpha=0.12, linewidth=0)
            z = fig.add_axes((left + i * (width + 0.04), (legend_in + 0.3) / height, width, (zoom_in - 0.75) / height))
            drawn += _draw(z, items, lo, hi, layout, order, colour, width * WIDTH_IN * DPI, max_bars)
            z.set_title(f"{name} ({lo:.2f}-{hi:.2f} s)", fontsize=8)
            z.tick_params(labelsize=7)
            panels.append(z)
    for i, a in enumerate(panels):
        a.set_ylim(stages - 0.5, -0.5)  # stage 0 on top
        a.set_yticks(range(stages))
        a.set_yticklabels([f"stage {s}" for s in range(stages)] if i <= 1 else [],
                          fontsize=7 if stages > 16 or i else 8)
    handles = [Rectangle((0, 0), 1, 1, color=colour[k]) for k, _ in order]
    labels = [k if stream == COMPUTE else f"{k} ({stream})" for k, stream in order]
    fig.legend(handles, labels, loc="lower center", fontsize=7, ncol=ncol, frameon=False)
    fig.savefig(path, dpi=DPI)
    return drawn
