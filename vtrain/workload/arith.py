"""Integer helpers the plan rules and the plan search share."""
from __future__ import annotations

from typing import List, Optional, Tuple


def divisors(n: int, limit: Optional[int] = None) -> Tuple[int, ...]:
    """The divisors of ``n`` in increasing order, up to ``limit`` (all of them without one).

    Pairs d, n // d with d up to sqrt(n) (and up to ``limit``): a global batch of 10^9 sequences costs at most
    ``limit`` steps, not 10^9 (a search with such a batch hung in the loop over every integer up to n)."""
    small: List[int] = []
    large: List[int] = []
    d = 1
    while d * d <= n and (limit is None or d <= limit):
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return tuple(x for x in small + large[::-1] if limit is None or x <= limit)
