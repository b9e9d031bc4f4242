"""Pareto fronts, de-duplication and the 2-D hypervolume. Plain Python, no optuna.

All functions take points as tuples of objective values to MINIMISE; negate maximised objectives
first (:func:`to_minimise`).
"""
from __future__ import annotations

from typing import Hashable, List, Sequence, Tuple, TypeVar

T = TypeVar("T")
Point = Tuple[float, ...]


def to_minimise(values: Sequence[float], directions: Sequence[str]) -> Point:
    return tuple(v if d == "minimize" else -v for v, d in zip(values, directions))


def dominates(a: Point, b: Point) -> bool:
    """``a`` is no worse than ``b`` in every objective and better in one (Deb et al. 2002, Def. 1)."""
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))


def pareto_front(items: Sequence[T], points: Sequence[Point], keys: Sequence[Hashable] | None = None) -> List[T]:
    """The non-dominated items, de-duplicated (by ``keys``, else by point), sorted by the first objective.

    Items with equal points (two plans that cost the same) are ordered by their key's text, so the one
    kept does not depend on the order the items came in (a resumed study finishes its trials in another
    order than an uninterrupted one). Two-objective fronts use the O(n log n) sweep (sort by f1, keep
    strictly decreasing f2); more objectives fall back to pairwise checks.
    """
    seen, ranked = set(), []
    for i, (item, pt) in enumerate(zip(items, points)):
        k = keys[i] if keys is not None else pt
        if k in seen:
            continue
        seen.add(k)
        ranked.append((pt, str(k), item))
    ranked.sort(key=lambda x: (x[0], x[1]))
    uniq = [(pt, item) for pt, _, item in ranked]
    if not uniq:
        return []
    if len(uniq[0][0]) == 2:
        front, best2 = [], float("inf")
        for pt, item in uniq:  # sorted by (f1, f2): a point is on the front iff it improves f2
            if pt[1] < best2:
                front.append(item)
                best2 = pt[1]
        return front
    result, seen_pts = [], set()
    for pt, item in uniq:
        if pt not in seen_pts and not any(dominates(q, pt) for q, _ in uniq):
            seen_pts.add(pt)
            result.append(item)
    return result


def normalise(points: Sequence[Point], lo: Point, hi: Point) -> List[Point]:
    """Map each objective to [0, 1] over the range [lo, hi] (a degenerate range maps to 0)."""
    return [tuple((x - a) / (b - a) if b > a else 0.0 for x, a, b in zip(p, lo, hi)) for p in points]


def hypervolume_2d(points: Sequence[Point], ref: Point) -> float:
    """Area dominated by ``points`` and bounded by ``ref`` (Zitzler & Thiele 1999), two objectives.

    The union of the rectangles [f1, ref1] x [f2, ref2], swept in increasing f1: each point that
    improves the best f2 so far adds the strip (ref1 - f1) x (best f2 - f2). Points not strictly
    better than ``ref`` in both objectives add nothing.
    """
    pts = sorted((p for p in points if p[0] < ref[0] and p[1] < ref[1]))
    area, best2 = 0.0, ref[1]
    for f1, f2 in pts:
        if f2 < best2:
            area += (ref[0] - f1) * (best2 - f2)
            best2 = f2
    return area
