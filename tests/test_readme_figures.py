"""The accuracy figures of README.md and docs/calibration.md are the calibration run's, never typed by hand:
each page's figures block is exactly what bench/readme_figures.py renders from the committed sources.csv (which
`bash bench/figures.sh --cv` regenerates from `task=calibrate calibrate.scope=all`)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.bench_scripts import load_bench

ROOT = Path(__file__).resolve().parents[1]
figures = load_bench("readme_figures")


@pytest.mark.parametrize("page", ["README.md", "docs/calibration.md"])
def test_the_accuracy_table_is_the_calibration_runs(page: str) -> None:
    text = (ROOT / page).read_text()
    block = re.search(r"<!-- figures:accuracy -->\n(.*?)<!-- /figures:accuracy -->", text, re.S)
    assert block, f"{page} has no figures block"
    assert block.group(1) == figures.render(figures.read_sources(figures.SHIPPED))


def test_the_table_puts_the_held_out_figure_first_and_names_every_source() -> None:
    rows = figures.read_sources(figures.SHIPPED)
    table = figures.render(rows)
    header = table.splitlines()[0]
    assert header.index("leave-one-source-out") < header.index("in-sample")
    assert len(table.splitlines()) == len(rows) + 2
    for r in rows:  # each row's held-out MAPE, bold, as the CSV has it
        assert f"**{float(r['loso_mape_pct']):.1f}%**" in table
