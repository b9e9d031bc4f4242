"""``pareto.html``: the search's plans as an inline-SVG scatter, no JavaScript, a few tens of kB.

MLflow's artifact preview shows HTML in a sandboxed frame, where a page that loads plotly.js (4.6 MB
inlined, or from a CDN offline) stays blank; plain SVG renders there and in any browser offline. Every
point carries a ``<title>`` tooltip with its plan and figures; the Pareto front is drawn as a line and
listed as a table below the plot.
"""
from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any, Callable, List, Sequence, Tuple

from vtrain.io.labels import plan_label
from vtrain.search.records import SearchResult, TrialRecord

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 760, 460, 78, 20, 36, 52
LABELS = {"time_to_train_s": "time to train (days)", "cost_usd": "cost (million USD)",
          "iteration_time_s": "iteration time (s)", "mfu": "MFU (%)", "gpus_used": "GPUs",
          "peak_memory_bytes": "peak memory (GiB)", "tokens_per_s": "tokens/s", "gpu_hours": "GPU-hours"}
SCALE = {"time_to_train_s": 1 / 86400.0, "cost_usd": 1e-6, "mfu": 100.0, "peak_memory_bytes": 2.0**-30}


def _axis(values: Sequence[float]) -> Tuple[float, float, bool]:
    lo, hi = min(values), max(values)
    log = lo > 0 and hi > 5 * lo
    if log:
        return math.log10(lo), math.log10(hi), True
    if hi == lo:
        hi, lo = hi + 0.5, lo - 0.5
    return lo, hi, False


def _ticks(lo: float, hi: float, log: bool) -> List[float]:
    if log:
        return [10 ** e * m for e in range(math.floor(lo), math.ceil(hi) + 1) for m in (1, 2, 5)
                if lo <= math.log10(10 ** e * m) <= hi]
    step = 10 ** math.floor(math.log10((hi - lo) / 4 or 1))
    step *= next(m for m in (1, 2, 5, 10) if (hi - lo) / (step * m) <= 6)
    start = math.ceil(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step) + 1)]


def _mapper(values: Sequence[float], size: float, offset: float, flip: bool) -> Tuple[Callable[[float], float], Any]:
    lo, hi, log = _axis(values)
    span = (hi - lo) or 1.0

    def f(v: float) -> float:
        t = ((math.log10(v) if log else v) - lo) / span
        return offset + (1 - t) * size if flip else offset + t * size
    return f, (lo, hi, log)


def _tip(r: TrialRecord) -> str:
    m = r.metrics
    return html.escape(f"trial {r.number}: {plan_label(r.plan or {})}\n{m.get('gpus_used', 0):.0f} GPUs, "
                       f"{m.get('time_to_train_s', 0) / 86400:.1f} days, ${m.get('cost_usd', 0):,.0f}, "
                       f"MFU {100 * m.get('mfu', 0):.1f}%, {m.get('peak_memory_gib', 0):.1f} GiB/GPU")


def svg(result: SearchResult) -> str:
    ox = result.objectives[0]
    oy = result.objectives[1] if len(result.objectives) > 1 else "cost_usd"
    pts = [r for r in result.feasible if ox in r.metrics and oy in r.metrics]
    if not pts:
        return "<p>no feasible plan</p>"
    xs = [r.metrics[ox] * SCALE.get(ox, 1.0) for r in pts]
    ys = [r.metrics[oy] * SCALE.get(oy, 1.0) for r in pts]
    fx, (xl, xh, xlog) = _mapper(xs, W - PAD_L - PAD_R, PAD_L, False)
    fy, (yl, yh, ylog) = _mapper(ys, H - PAD_T - PAD_B, PAD_T, True)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" '
           f'font-size="12"><rect width="{W}" height="{H}" fill="white"/>']
    for t in _ticks(xl, xh, xlog):
        x = fx(t)
        out.append(f'<line x1="{x:.1f}" y1="{PAD_T}" x2="{x:.1f}" y2="{H - PAD_B}" stroke="#eee"/>'
                   f'<text x="{x:.1f}" y="{H - PAD_B + 16}" text-anchor="middle">{t:g}</text>')
    for t in _ticks(yl, yh, ylog):
        y = fy(t)
        out.append(f'<line x1="{PAD_L}" y1="{y:.1f}" x2="{W - PAD_R}" y2="{y:.1f}" stroke="#eee"/>'
                   f'<text x="{PAD_L - 6}" y="{y + 4:.1f}" text-anchor="end">{t:.4g}</text>')
    out.append(f'<text x="{(W + PAD_L) / 2}" y="{H - 12}" text-anchor="middle">{LABELS.get(ox, ox)}'
               f'{" (log)" if xlog else ""}</text><text transform="translate(16,{(H + PAD_T) / 2}) rotate(-90)" '
               f'text-anchor="middle">{LABELS.get(oy, oy)}{" (log)" if ylog else ""}</text>'
               f'<text x="{PAD_L}" y="22" font-weight="bold">{html.escape(_title(result))}</text>')
    front = {r.number for r in result.front}
    for r, x, y in zip(pts, xs, ys):
        ok = r.satisfies
        color = "#d62728" if r.number in front else ("#9e9e9e" if ok else "#f0c0a0")
        size = 5 if r.number in front else 3
        out.append(f'<circle cx="{fx(x):.1f}" cy="{fy(y):.1f}" r="{size}" fill="{color}"><title>{_tip(r)}'
                   f'{"" if ok else " (outside the constraints)"}</title></circle>')
    line = [(fx(r.metrics[ox] * SCALE.get(ox, 1.0)), fy(r.metrics[oy] * SCALE.get(oy, 1.0))) for r in result.front]
    if len(line) > 1:
        out.append('<polyline fill="none" stroke="#d62728" stroke-width="1.5" points="'
                   + " ".join(f"{x:.1f},{y:.1f}" for x, y in line) + '"/>')
    out.append("</svg>")
    return "".join(out)


def _title(result: SearchResult) -> str:
    extra = f", constraints {result.constraints.text()}" if result.constraints and result.constraints.active else ""
    return f"{result.model} on {result.cluster}: {result.sampler}, {len(result.records)} plans{extra}"


def write_html(result: SearchResult, path: Path) -> Path:
    rows = "".join(
        f"<tr><td>{r.number}</td><td>{html.escape(plan_label(r.plan or {}))}</td>"
        f"<td>{r.metrics['gpus_used']:.0f}</td><td>{r.metrics['time_to_train_s'] / 86400:.1f}</td>"
        f"<td>{r.metrics['cost_usd'] / 1e6:.3f}</td><td>{100 * r.metrics['mfu']:.1f}</td>"
        f"<td>{r.metrics['peak_memory_gib']:.1f}</td></tr>" for r in result.front)
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(_title(result))}</title>"
            "<style>body{font-family:sans-serif;margin:12px}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}td:nth-child(2){text-align:left}</style>"
            f"</head><body>{svg(result)}<p>red: Pareto front; grey: other feasible plans; orange: outside the "
            "constraints. Hover a point for its plan.</p><table><tr><th>trial</th><th>(tp, pp, dp) ...</th>"
            "<th>GPUs</th><th>days</th><th>$M</th><th>MFU %</th><th>GiB/GPU</th></tr>"
            f"{rows}</table></body></html>")
    path.write_text(page)
    return path
