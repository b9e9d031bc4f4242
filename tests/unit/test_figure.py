"""Figures draw every label as written (cli/figure.py): log-axis ticks as plain numbers, long titles wrapped."""
from vtrain.io.figure import log_scale, new_figure, wrapped


def _tick_texts(fig, axis):
    fig.canvas.draw()
    ax = fig.axes[0]
    labels = ax.get_xticklabels(which="both") if axis == "x" else ax.get_yticklabels(which="both")
    return [t.get_text() for t in labels if t.get_text()]


def test_log_axis_ticks_are_plain_numbers_not_mathtext():
    """plain_text() turns mathtext off for every label (titles carry '$' prices and file names); matplotlib's
    default log labels are mathtext strings, which would then print verbatim ("$\\mathdefault{10^{2}}$")."""
    fig = new_figure(figsize=(4, 3))
    ax = fig.add_subplot()
    ax.plot([20, 400], [60, 2000])
    log_scale(ax, "x")
    log_scale(ax, "y")
    for axis in ("x", "y"):
        texts = _tick_texts(fig, axis)
        assert texts and not any("$" in t or "mathdefault" in t for t in texts), texts
    assert "100" in _tick_texts(fig, "x") and "1000" in _tick_texts(fig, "y")


def test_a_long_summary_title_breaks_at_its_separators():
    title = "file.csv on vtrain_a100\nMAPE: 7.81% | median APE: 5.55% | max APE: 30.5% | within 10%: 62.2% | n=1440"
    lines = wrapped(title, 40).splitlines()
    assert lines[0] == "file.csv on vtrain_a100"
    assert all(len(line) <= 40 for line in lines)
    assert " | ".join(lines[1:]) == title.splitlines()[1]
    assert wrapped("short", 40) == "short"
