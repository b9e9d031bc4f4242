"""The calibration's cross-validated ranking (vtrain.calibration.ranking_cv): a source's rows grouped by job, ranked
with held-out and in-sample predictions, pooled by job across sources, and written as sources.csv's cells."""
from types import SimpleNamespace

import pytest

from vtrain.calibration import ranking_cv


def _run(hidden: int, gpus: int, batch: int, pp: int) -> SimpleNamespace:
    """A workload as ranking_group reads it: model shape, GPUs, sequence and batch (the plan's pp differs)."""
    model = SimpleNamespace(hidden_size=hidden, num_layers=32, num_heads=32, num_kv_heads=8, ffn_hidden_size=14336,
                            vocab_size=128256, is_moe=False, num_experts=0, moe_top_k=0)
    plan = SimpleNamespace(num_gpus=gpus, seq_len=8192, global_batch_size=batch, pp=pp)
    return SimpleNamespace(model=model, plan=plan, cluster=SimpleNamespace(gpu=SimpleNamespace(name="h100_sxm")))


# one source: job A (4096 hidden, 8 GPUs, batch 16), three plans; job B (8192 hidden, 64 GPUs), two plans 3% apart;
# job C, one run (no order)
RUNS = [_run(4096, 8, 16, 1), _run(4096, 8, 16, 2), _run(4096, 8, 16, 4),
        _run(8192, 64, 32, 1), _run(8192, 64, 32, 2), _run(4096, 16, 16, 1)]
MEASURED = [10.0, 12.0, 20.0, 10.0, 10.3, 7.0]
HELD = [11.0, 10.5, 21.0, 10.5, 10.0, 6.0]  # job A: the 10 / 12 pair swapped; job B: swapped, but 3% apart
IN_SAMPLE = [10.0, 12.5, 19.0, 10.0, 10.4, 7.0]  # job A in order; job B in order


def test_a_sources_rows_are_grouped_by_job_and_ranked():
    held = ranking_cv.source_ranking(RUNS, MEASURED, HELD)
    assert [g.n for g in held.groups] == [3, 2]  # job C's single run has no order
    a, b = held.groups
    assert (a.agree, a.pairs) == (2, 3) and a.tau_b == pytest.approx(1 / 3)  # C=2, D=1 of 3 pairs
    assert (b.agree, b.pairs) == (0, 0) and b.tau_b == pytest.approx(-1.0)  # 3% apart: not counted, tau still -1
    assert held.agreement_pct == pytest.approx(200 / 3)
    assert held.tau_b == pytest.approx((3 * (1 / 3) + 1 * -1.0) / 4)  # pair-weighted over the groups
    ins = ranking_cv.source_ranking(RUNS, MEASURED, IN_SAMPLE)
    assert ins.agreement_pct == pytest.approx(100.0) and ins.tau_b == pytest.approx(1.0)
    with pytest.raises(ValueError, match="6 workloads, 5 measured"):
        ranking_cv.source_ranking(RUNS, MEASURED[:5], HELD)


def test_pooled_groups_the_sources_rows_by_job_across_sources():
    one = (RUNS, MEASURED, HELD)
    # another release: job A's first plan measured again (15 s, predicted 16 s), job C with a second plan (pp 2)
    two = (RUNS[:1] + [_run(4096, 16, 16, 2)], [15.0, 8.0], [16.0, 6.5])
    both = ranking_cv.pooled([one, two])
    assert [g.n for g in both.groups] == [3, 2, 2]  # job A: its pp1 plan ranked once over both releases
    a, b, c = both.groups
    # job A's pp1 at sqrt(10 x 15) = 12.25 s measured, sqrt(11 x 16) = 13.27 s predicted: within 5% of pp2's 12 s
    # (not counted), below pp4's 20 s as predicted; the order pp2 < pp1 < pp4 predicted as measured
    assert (a.agree, a.pairs) == (2, 2) and a.tau_b == pytest.approx(1.0)
    assert (c.agree, c.pairs) == (1, 1) and c.tau_b == pytest.approx(1.0)  # 7 vs 8 s measured, 6 vs 6.5 predicted
    assert (b.agree, b.pairs) == (0, 0) and b.tau_b == pytest.approx(-1.0)
    assert (both.agree, both.pairs) == (2 + 0 + 1, 2 + 0 + 1)
    assert both.tau_b == pytest.approx((3 * 1.0 + 1 * -1.0 + 1 * 1.0) / 5)
    assert ranking_cv.pooled([]).pairs == 0 and ranking_cv.pooled([]).tau_b is None
    with pytest.raises(ValueError, match="2 workloads, 1 measured"):
        ranking_cv.pooled([(RUNS[:2], [1.0], [1.0, 2.0])])


def test_one_plan_measured_twice_ranks_once_at_its_geometric_means():
    from vtrain.validation.ranking import by_plan

    got = by_plan([("x", 10.0, 11.0), ("y", 12.0, 10.5), ("x", 15.0, 16.0)])
    assert got == [pytest.approx((150 ** 0.5, 176 ** 0.5)), (12.0, 10.5)]


def test_figures_give_held_out_and_in_sample_side_by_side_and_the_csv_cells():
    rec = ranking_cv.figures(ranking_cv.source_ranking(RUNS, MEASURED, HELD),
                             ranking_cv.source_ranking(RUNS, MEASURED, IN_SAMPLE))
    assert (rec["groups"], rec["pairs"], rec["differ_pct"]) == (2, 3, 5.0)
    assert rec["loso"] == {"order_agreement_pct": 66.7, "agreeing_pairs": 2, "kendall_tau_b": 0.0}
    assert rec["in_sample"] == {"order_agreement_pct": 100.0, "agreeing_pairs": 3, "kendall_tau_b": 1.0}
    assert ranking_cv.csv_cells(rec) == [2, 3, 66.7, 0.0, 100.0, 1.0]
    assert len(ranking_cv.csv_cells(rec)) == len(ranking_cv.CSV_COLUMNS)
    assert ranking_cv.csv_cells(None) == [""] * 6  # a line without a ranking keeps the CSV rectangular
    line = ranking_cv.console(rec)
    assert "67%" in line and "+0.00" in line and "100%" in line and "+1.00" in line and "3/2" in line
    with pytest.raises(ValueError, match="different groups"):
        ranking_cv.figures(ranking_cv.source_ranking(RUNS, MEASURED, HELD),
                           ranking_cv.source_ranking(RUNS[:3], MEASURED[:3], HELD[:3]))


def test_a_source_without_two_runs_of_one_job_has_no_ranking():
    alone = ranking_cv.source_ranking(RUNS[3:4] + RUNS[5:], [10.0, 7.0], [9.0, 8.0])
    rec = ranking_cv.figures(alone, alone)
    assert rec["groups"] == 0 and rec["pairs"] == 0
    assert rec["loso"]["order_agreement_pct"] is None and rec["loso"]["kendall_tau_b"] is None
    assert ranking_cv.csv_cells(rec) == [0, 0, "", "", "", ""]
    assert ranking_cv.console(rec).split()[:4] == ["-", "-", "-", "-"]
