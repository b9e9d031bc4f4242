"""Ranking accuracy (vtrain.validation.ranking): Kendall's tau-b, the 5% rule, groups and the set's figures."""
import math

import pytest

from vtrain.validation.ranking import kendall_tau_b, order_agreement, ranking_summary


def test_tau_of_the_same_order_is_1_and_of_a_reversed_order_is_minus_1():
    assert kendall_tau_b([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert kendall_tau_b([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)


def test_tau_b_corrects_for_ties():
    # x has one tie (pairs 0-1); y none: C=5, D=0, n0=6, n1=1, n2=0 -> 5 / sqrt(5 * 6)
    assert kendall_tau_b([1, 1, 2, 3], [1, 2, 3, 4]) == pytest.approx(5 / math.sqrt(30))
    # one swapped pair of four: C=5, D=1 -> 4/6
    assert kendall_tau_b([1, 2, 3, 4], [2, 1, 3, 4]) == pytest.approx(4 / 6)
    assert kendall_tau_b([1, 1, 1], [1, 2, 3]) is None  # all ties: undefined
    assert kendall_tau_b([1], [2]) is None


def test_pairs_measured_within_5_percent_are_not_counted():
    measured = [100.0, 104.0, 120.0]  # 100 vs 104: 4% apart, left out; the other two pairs counted
    agree, counted = order_agreement(measured, [110.0, 100.0, 130.0])
    assert (agree, counted) == (2, 2)  # the swapped 100/104 pair does not count against the prediction
    assert order_agreement([100.0, 106.0], [100.0, 90.0]) == (0, 1)  # 6% apart and predicted the other way
    assert order_agreement([100.0, 106.0], [100.0, 100.0]) == (0, 1)  # a predicted tie is a miss


def test_ranking_summary_pools_pairs_and_weights_tau_by_pairs():
    groups = {"a": [(1.0, 1.0), (2.0, 2.0), (3.0, 3.0)],  # 3 pairs, all agree, tau 1
              "b": [(1.0, 2.0), (2.0, 1.0)],  # 1 pair, reversed, tau -1
              "alone": [(5.0, 5.0)]}  # one run: no order, left out
    s = ranking_summary(groups)
    assert [g.label for g in s.groups] == ["a", "b"]
    assert (s.agree, s.pairs) == (3, 4) and s.agreement_pct == pytest.approx(75.0)
    assert s.tau_b == pytest.approx((3 * 1.0 + 1 * -1.0) / 4)
    assert "order agreement 75.0% (3 of 4 pairs" in s.line() and "tau-b 0.50" in s.line()
    assert len(s.group_lines()) == 1 and s.group_lines()[0].startswith("  a: 3 runs, agreement 100% (3/3)")
    d = s.as_dict()
    assert d["kendall_tau_b"] == pytest.approx(0.5) and d["groups"][1]["agreement_pct"] == 0.0


def test_an_empty_set_says_so():
    s = ranking_summary({})
    assert s.agreement_pct is None and s.tau_b is None and "n/a" in s.line()


def test_validate_prints_and_writes_the_ranking_and_the_margin(tmp_path, capfd):
    """task=validate on the Megatron-Core Qwen3 H100 table: the ranking line beside MAPE, one line for its
    group (>= 3 runs), the memory-margin count, and the figures in validation_summary.json."""
    import json

    from tests.clirun import run_inprocess

    res = run_inprocess(["task=validate", "+cluster=h100x1024", "validate.data=megatron_moe_qwen3_h100",
                         "validate.show_rows=0", f"hydra.run.dir={tmp_path}"], capfd)
    assert res.code == 0, res.err
    out = res.out + res.err
    assert "ranking: order agreement" in out and "Kendall's tau-b" in out
    assert "memory margin: 0 of 13 measured runs predicted above the usable memory" in out
    ranking = json.loads((tmp_path / "validation_summary.json").read_text())["ranking"]
    # the five plans of the main table (10 pairs, one measured < 5% apart); the long-context rows pair a plan with
    # itself under another routing (forced balance, dropless): one plan each, not ranked
    assert ranking["pairs"] == 9 and 0 <= ranking["agreeing_pairs"] <= ranking["pairs"]
    assert -1.0 <= ranking["kendall_tau_b"] <= 1.0
    assert any(g["n"] >= 5 and "256 x h100_sxm" in g["label"] for g in ranking["groups"])


def test_many_groups_print_the_worst_ranked_only():
    groups = {f"g{i}": [(1.0, 1.0), (2.0, 2.0 if i else 3.5), (3.0, 3.0 if i else 0.5)] for i in range(12)}
    lines = ranking_summary(groups).group_lines(most=3)
    assert lines[0].startswith("  the 3 groups ranked worst of 12") and len(lines) == 4
    assert lines[1].startswith("  g0: 3 runs") and "tau-b -0.33" in lines[1]  # the one misordered group first
