"""The pipeline timeline as a Gantt chart (PNG): one row per stage, one lane per stream of the stage
(the first, compute, lane is the tall one), one colour per kind of span, so bubbles show as gaps.

Drawn in batches: one PolyCollection per kind for the whole chart (not one call per bar), and at most
``max_bars`` rectangles: bars of one lane and kind closer than a fraction of a pixel are merged first
(invisible at the PNG's resolution), more coarsely only when a trace is larger still. matplotlib is
imported here only, without pyplot (:mod:`vtrain.cli.figure`).
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple, cast

import numpy as np

from vtrain.timeline import COMPUTE, Span, spans, streams_in_order

MAX_BARS = 20_000
WIDTH_IN, DPI = 11.0, 110
_FIXED = {"forward": "tab:blue", "backward": "tab:orange", "optimizer": "tab:green"}
_PALETTE = ("0.45", "tab:purple", "tab:red", "tab:brown", "tab:pink", "tab:olive", "tab:cyan", "0.7")


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
    out: Dict[str, str] = {}
    free = iter(_PALETTE * (1 + len(kinds) // len(_PALETTE)))
    for k in kinds:
        out[k] = _FIXED.get(k) or next(free)
    return out


def plot_timeline(trace: Any, path: str, title: str = "", max_bars: int = MAX_BARS) -> int:
    """Write the Gantt chart of ``trace`` (or its spans) to ``path``; returns the number of bars drawn."""
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Rectangle

    from vtrain.cli.figure import new_figure

    items = spans(trace)
    stages = max((sp.stage for sp in items), default=0) + 1
    horizon = max((sp.end for sp in items), default=1.0)
    streams = streams_in_order(items)
    layout = lane_layout(streams)
    bars = lane_bars(items, horizon, max_bars)
    first = list(dict.fromkeys(k for (_, _, k) in bars))
    stream_of = {k: st for (_, st, k) in bars}
    fixed = list(_FIXED)
    kinds = sorted(first, key=lambda k: (streams.index(stream_of[k]), fixed.index(k) if k in fixed else len(fixed),
                                         first.index(k)))
    colour = colours(kinds)

    ncol = min(4, max(1, len(kinds)))
    legend_rows = -(-len(kinds) // ncol)
    height = 1.0 + 0.32 * stages + 0.18 * legend_rows
    fig = new_figure(figsize=(WIDTH_IN, height))
    bottom_in = 0.55 + 0.18 * legend_rows  # tick labels, axis label, legend
    fig.subplots_adjust(left=0.75 / WIDTH_IN, right=1 - 0.15 / WIDTH_IN, top=1 - 0.35 / height,
                        bottom=bottom_in / height)  # fixed margins: no tight_layout pass
    ax = fig.add_subplot()
    min_width = horizon / (WIDTH_IN * DPI)  # a bar is at least one pixel wide, so no span is invisible
    drawn = 0
    for kind in kinds:
        verts = []
        for (stage, stream, k), (s, e) in bars.items():
            if k != kind:
                continue
            off, h = layout[stream]
            y0, y1 = stage + off, stage + off + h
            quad = np.empty((len(s), 4, 2))
            quad[:, 0, 0] = quad[:, 1, 0] = s
            quad[:, 2, 0] = quad[:, 3, 0] = np.maximum(e, s + min_width)
            quad[:, [0, 3], 1] = y0
            quad[:, [1, 2], 1] = y1
            verts.append(quad)
        block = np.concatenate(verts) if verts else np.empty((0, 4, 2))
        drawn += len(block)
        ax.add_collection(PolyCollection(cast(Any, block), facecolors=colour[kind], linewidths=0), autolim=False)
    ax.set_xlim(0, horizon * 1.01)
    ax.set_ylim(stages - 0.5, -0.5)  # stage 0 on top
    handles = [Rectangle((0, 0), 1, 1, color=colour[k]) for k in kinds]
    labels = [k if stream_of[k] == COMPUTE else f"{k} ({stream_of[k]})" for k in kinds]
    fig.legend(handles, labels, loc="lower center", fontsize=7, ncol=ncol, frameon=False)
    ax.set_yticks(range(stages))
    ax.set_yticklabels([f"stage {s}" for s in range(stages)], fontsize=7 if stages > 16 else 8)
    ax.set_xlabel("time in the iteration (s)", fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.savefig(path, dpi=DPI)
    return drawn
