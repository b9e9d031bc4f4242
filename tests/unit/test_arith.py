"""Divisors: the plan search's dp and pp choices and the plan rules' hints."""
from __future__ import annotations

import random

from vtrain.config.compose import compose
from vtrain.search.run import prepare
from vtrain.workload.arith import divisors


def _every_integer(n: int, limit=None) -> tuple:
    return tuple(d for d in range(1, n + 1) if n % d == 0 and (limit is None or d <= limit))


def test_divisors_match_the_definition():
    rng = random.Random(0)
    for n in [1, 2, 4, 36, 97, 1024, 1536, 5040] + [rng.randint(1, 20000) for _ in range(300)]:
        for limit in (None, 0, 1, 3, 8, 64, 100, 1 << 16):
            assert divisors(n, limit) == _every_integer(n, limit), (n, limit)


def test_a_huge_batch_costs_its_limit_not_its_size():
    # 10^20 - 1 = 3^2 * 11 * 41 * 101 * 271 * 3541 * 9091 * 27961: a loop up to n (or sqrt(n)) never ends
    assert divisors(10**20 - 1, 1024) == (1, 3, 9, 11, 33, 41, 99, 101, 123, 271, 303, 369, 451, 813, 909)
    assert divisors(10**18 + 3, 8) == (1,)  # no small divisor: 8 steps


def test_a_search_with_a_batch_of_five_million_sequences_builds_its_space():
    """Near the tokens-per-batch bound (2^34, vtrain/config/validate.py) dp is still the divisors up to the GPUs."""
    ctx = prepare(compose(["+model=gpt_1_7b", "+cluster=h200x8", "training.global_batch_size=5000000"]))
    assert ctx.space.dp == (1, 2, 4, 5, 8)
    assert ctx.space.pp == divisors(ctx.workload.model.num_layers, 8)
    odd = prepare(compose(["+model=gpt_1_7b", "+cluster=h200x8", "training.global_batch_size=4782969"]))  # 3^14
    assert odd.space.dp == (1, 3)
