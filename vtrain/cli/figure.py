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


def colormap(name: str) -> Any:
    from matplotlib import colormaps

    return colormaps[name]
