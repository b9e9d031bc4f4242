"""A matplotlib figure on the Agg (PNG) canvas, without pyplot: no display, no global figure state,
and a lighter import (matplotlib is imported on the first call only)."""
from __future__ import annotations

from typing import Any


def new_figure(**kwargs: Any) -> Any:
    """``matplotlib.figure.Figure(**kwargs)`` with an Agg canvas attached (``fig.savefig`` writes PNG)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(**kwargs)
    FigureCanvasAgg(fig)
    return fig


def colormap(name: str) -> Any:
    from matplotlib import colormaps

    return colormaps[name]
