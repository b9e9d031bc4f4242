"""A matplotlib figure on the Agg (PNG) canvas, without pyplot: no display, no global figure state,
and a lighter import (matplotlib is imported on the first call only)."""
from __future__ import annotations

from typing import Any


def new_figure(**kwargs: Any) -> Any:
    """``matplotlib.figure.Figure(**kwargs)`` with an Agg canvas attached (``fig.savefig`` writes PNG)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    plain_text()
    fig = Figure(**kwargs)
    FigureCanvasAgg(fig)
    return fig


def plain_text() -> None:
    """Draw every label as written: titles carry file names, config names and prices ("$1,200 to $1,500"),
    which matplotlib's mathtext would parse between two '$' (and fail on an unknown command)."""
    import matplotlib

    matplotlib.rcParams["text.parse_math"] = False


def log_scale(ax: Any, axis: str = "x") -> None:
    """Log-scale ``ax``'s ``axis`` ("x" or "y") with tick labels written as plain numbers ("20", "100", "1000"):
    matplotlib's default log labels are mathtext ("$\\mathdefault{10^{2}}$"), which :func:`plain_text` would print
    verbatim. ``LogFormatter`` is the base of the default formatter: the same ticks, labelled without mathtext."""
    from matplotlib.ticker import LogFormatter

    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_formatter(LogFormatter(labelOnlyBase=False))
    target.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.4)))


def wrapped(text: str, width: int) -> str:
    """``text`` with each line longer than ``width`` characters broken at its ' | ' separators (a figure title
    holding a validation summary), else at spaces."""
    import textwrap

    out = []
    for line in text.splitlines():
        if len(line) <= width:
            out.append(line)
            continue
        parts, cur = line.split(" | "), ""
        for part in parts:
            cand = f"{cur} | {part}" if cur else part
            if cur and len(cand) > width:
                out.append(cur)
                cand = part
            cur = cand
        out.extend(textwrap.wrap(cur, width) or [cur])
    return "\n".join(out)


def colormap(name: str) -> Any:
    from matplotlib import colormaps

    return colormaps[name]
