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
    assert len([ln for ln in table.splitlines() if ln.startswith("|")]) == len(rows) + 2
    for r in rows:  # each row's held-out MAPE, bold, as the CSV has it
        assert f"**{float(r['loso_mape_pct']):.1f}%**" in table


def test_the_ranking_table_of_the_search_page_is_the_calibration_runs() -> None:
    text = figures.RANKING_PAGE.read_text()
    block = figures.RANKING_BLOCK.search(text)
    assert block, "docs/search.md has no ranking block"
    assert block.group(0).removeprefix(block.group(1)).removesuffix(block.group(2)) == \
        figures.render_ranking(figures.read_sources(figures.SHIPPED))


def test_the_ranking_sentence_names_exactly_the_sets_below_the_bar() -> None:
    rows = [{"source": "torchtitan", "ranking_groups": "9", "ranking_pairs": "58", "loso_order_agreement_pct": "91.4",
             "loso_kendall_tau_b": "0.75", "in_sample_order_agreement_pct": "91.4", "in_sample_kendall_tau_b": "0.75"},
            {"source": "pooled (every row)", "ranking_groups": "207", "ranking_pairs": "9290",
             "loso_order_agreement_pct": "94.7", "loso_kendall_tau_b": "0.84", "in_sample_order_agreement_pct": "94.7",
             "in_sample_kendall_tau_b": "0.84"},
            {"source": "nemo", "ranking_groups": "0", "ranking_pairs": "0", "loso_order_agreement_pct": "",
             "loso_kendall_tau_b": "", "in_sample_order_agreement_pct": "", "in_sample_kendall_tau_b": ""}]
    table = figures.render_ranking(rows)
    assert "| pooled: every row | 9,290 / 207 | 94.7% | 0.84 | 94.7%, 0.84 |" in table
    assert "nemo" not in table  # no pair to rank
    assert table.rstrip().endswith("held out: torchtitan FSDP2 (H100, B200, GB200) (91.4%, 0.75).")


def test_the_sentence_under_the_table_names_exactly_the_sources_above_the_target() -> None:
    rows = [{"source": "a", "n": "20", "loso_mape_pct": "10.4"}, {"source": "b", "n": "20", "loso_mape_pct": "9.9"},
            {"source": "c", "n": "9", "loso_mape_pct": "30.0"},  # under 10 rows: no target
            {"source": "pooled published runs", "n": "49", "loso_mape_pct": "8.2"}]
    said = figures._above_target(rows)
    assert said == "Above the held-out target (10% per source): a (10.4%); the published pool (8.2% against 8%)."
    rows = [dict(r, loso_mape_pct="7.0") for r in rows]
    assert figures._above_target(rows).startswith("Every source is within 10% held out")


# --- the README's example outputs are what the commands print ------------------------------------------------

EXAMPLE_PAGES = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))


def readme_examples(pages: tuple[str, ...] = EXAMPLE_PAGES) -> list[tuple[str, list[str]]]:
    """(command, expected lines) of each code block of the README and docs/ that starts with ``$ python -m vtrain``
    (a command continued with a trailing backslash joined) and shows output; ``...`` in an expected line stands
    for text left out."""
    out = []
    for page in pages:
        text = (ROOT / page).read_text()
        for block in re.findall(r"```\n(\$ python -m vtrain.*?)```", text, re.S):
            for example in re.split(r"\n(?=\$ python -m vtrain)", block):  # a block may show two commands
                lines = example.splitlines()
                command = lines.pop(0)
                while command.endswith("\\") and lines:
                    command = command[:-1].rstrip() + " " + lines.pop(0).strip()
                expected = [ln for ln in lines if ln.strip() and ln.strip() != "..."]
                if expected:
                    out.append((command.removeprefix("$ python -m vtrain "), expected))
    merged: dict[str, list[str]] = {}  # one command shown on two pages runs once, checked for both pages' lines
    for command, expected in out:
        key = " ".join(a for a in command.split() if a != "tracking=off")
        merged.setdefault(key, []).extend(ln for ln in expected if ln not in merged.get(key, []))
    return list(merged.items())


def shows(expected: str, printed: list[str]) -> bool:
    """Whether one printed line holds every fragment of ``expected`` (split at ``...``) in order."""
    parts = [p.strip() for p in expected.split("...") if p.strip()]
    for line in printed:
        at = 0
        for part in parts:
            at = line.find(part, at)
            if at < 0:
                break
            at += len(part)
        else:
            return True
    return False


def test_the_readme_shows_examples_with_output() -> None:
    assert len(readme_examples()) >= 3


@pytest.mark.slow
@pytest.mark.parametrize("command,expected", readme_examples(), ids=lambda x: str(x)[:40])
def test_a_readme_example_prints_what_the_readme_shows(command: str, expected: list[str], tmp_path: Path,
                                                       capfd) -> None:
    """Each example of the README and docs/ prints what the page shows; an example of a refused input (its
    output a ``vtrain: error:`` line) exits 2, any other 0."""
    import shlex

    from tests.clirun import run_inprocess

    args = shlex.split(command)
    args += [a for a in ("tracking=off",) if a not in args] + [f"hydra.run.dir={tmp_path}"]
    res = run_inprocess(args, capfd)
    assert res.code == (2 if expected[0].startswith("vtrain: error:") else 0), res.err[-2000:]
    printed = (res.out + res.err).splitlines()
    missing = [ln for ln in expected if not shows(ln, printed)]
    assert not missing, "lines the command no longer prints (regenerate them):\n" + "\n".join(missing)


def test_the_table_shows_the_cross_validated_ranking_beside_the_error() -> None:
    base = {"n": "45", "loso_mape_pct": "21.06", "loso_within_10_pct": "62.2", "in_sample_mape_pct": "20.72",
            "coverage80_pct": "88.9"}
    ranked = {**base, "source": "torchtitan", "ranking_groups": "9", "ranking_pairs": "58",
              "loso_order_agreement_pct": "84.5", "loso_kendall_tau_b": "0.631",
              "in_sample_order_agreement_pct": "86.2", "in_sample_kendall_tau_b": "0.65"}
    alone = {**base, "source": "megatron_2021_weak_scaling", "ranking_groups": "0", "ranking_pairs": "0",
             "loso_order_agreement_pct": "", "loso_kendall_tau_b": "", "in_sample_order_agreement_pct": "",
             "in_sample_kendall_tau_b": ""}
    older = {**base, "source": "torchtitan"}  # a sources.csv written before the ranking columns
    lines = figures.render([ranked, alone, older]).splitlines()
    assert lines[0].index("leave-one-source-out MAPE") < lines[0].index("plan order agreement, held out")
    assert lines[0].count("|") == lines[1].count("|") == lines[2].count("|") == lines[3].count("|")
    assert lines[2].endswith("| 88.9% | 84.5% (86.2%) | 0.63 (0.65) | 58 / 9 |")
    assert lines[3].endswith("| 88.9% |  |  |  |") and lines[4].endswith("| 88.9% |  |  |  |")


def test_the_shipped_table_gives_each_ranked_sources_held_out_agreement() -> None:
    rows = figures.read_sources(figures.SHIPPED)
    table = figures.render(rows).splitlines()
    ranked = [(r, line) for r, line in zip(rows, table[2:]) if int(r.get("ranking_groups") or 0)]
    assert ranked, "the shipped sources.csv has no ranking columns: regenerate it (bench/readme_figures.py)"
    for r, line in ranked:
        if r["loso_order_agreement_pct"]:
            assert f"| {float(r['loso_order_agreement_pct']):.1f}% (" in line, (r["source"], line)
