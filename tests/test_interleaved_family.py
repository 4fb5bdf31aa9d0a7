"""``interleaved._family`` (each rank's segment counted once from its order as arrays, the head and tail in closed
form) against the path-by-path walk it replaced (issues 24, 26): the operations of every chain from
``simulate.rank_orders``, each consecutive pair that changes rank asserted a data edge and its boundary counted.
Identical counts, ranks and order, on a table of shapes: m < pp is refused by the schedule; m = pp (every forward
before the first backward: no steady entry, no drain exit); v = 1; pp = 1; large m."""

from __future__ import annotations

import pytest

from planner.compose.simulate import Op, rank_orders
from planner.search.chains import Counts, path_counts
from planner.search.interleaved import _family, interleaved_counts


def _lags(path: list[Op], p: int) -> list[int]:
    out = []
    for (k1, j1, c1), (k2, j2, c2) in zip(path, path[1:]):
        if c1 % p != c2 % p:
            assert j1 == j2 and abs(c1 - c2) == 1 and k1 == k2, (path, c1, c2)
            out.append(min(c1, c2))
    return out


def reference_family(p: int, v: int, m: int) -> tuple[tuple[Counts, ...], tuple[int, ...]]:
    """The walk of every chain's operations (the module's computation before issue 24's rewrite)."""
    C = p * v
    orders = rank_orders("interleaved-1f1b", p, v, m)
    out: dict[Counts, int] = {}
    for k in range(p):
        ops = orders[k]
        last = C - p + k
        pos = {op: i for i, op in enumerate(ops)}
        entries = [
            ([("F", 0, c) for c in range(k)], 0),
            ([("F", 0, c) for c in range(C)] + [("B", 0, c) for c in range(C - 1, last, -1)], pos[("B", 0, last)]),
        ]
        exits = [
            (len(ops), [("B", m - 1, c) for c in range(k - 1, -1, -1)]),
            (
                pos[("F", m - 1, last)] + 1,
                [("F", m - 1, c) for c in range(last + 1, C)] + [("B", m - 1, c) for c in range(C - 1, -1, -1)],
            ),
        ]
        for head, start in entries:
            for stop, tail in exits:
                if stop <= start:
                    continue
                path: list[Op] = head + list(ops[start:stop]) + tail
                out.setdefault(path_counts(C, path, _lags(path, p)), k)
    return tuple(out), tuple(out.values())


SHAPES = [
    (1, 1, 1),
    (1, 3, 4),
    (2, 1, 2),
    (2, 1, 8),
    (2, 2, 2),
    (2, 2, 4),
    (3, 2, 3),
    (3, 3, 9),
    (4, 1, 4),
    (4, 1, 16),
    (4, 2, 4),
    (4, 2, 8),
    (4, 4, 4),
    (4, 5, 12),
    (5, 3, 10),
    (8, 2, 8),
    (8, 3, 32),
    (8, 8, 8),
    (8, 8, 64),
    (16, 4, 64),
    (16, 7, 16),
    (16, 2, 256),
    (32, 3, 128),
    (7, 2, 49),
    (16, 6, 32),  # shapes of Llama 3 405B at 131K tokens on 16,384 H100 (the all-ranks-at-once counts)
    (32, 2, 64),
    (64, 2, 128),
    (2, 63, 4),
]


@pytest.mark.parametrize(("p", "v", "m"), SHAPES)
def test_family_matches_walk(p: int, v: int, m: int) -> None:
    ref_counts, ref_ranks = reference_family(p, v, m)
    counts, ranks = _family.__wrapped__(p, v, m)
    assert counts == ref_counts
    assert ranks == ref_ranks
    assert all(type(x) is int for row in counts for part in row for x in part)
    assert interleaved_counts(p, v, m) == ref_counts


@pytest.mark.parametrize(("p", "v", "m"), [(4, 2, 2), (8, 3, 4), (3, 2, 4)])
def test_m_not_a_multiple_of_pp_refused(p: int, v: int, m: int) -> None:
    """m < pp (or any m not a multiple of pp): the schedule does not exist, both refuse it."""
    with pytest.raises(ValueError):
        reference_family(p, v, m)
    with pytest.raises(ValueError):
        _family.__wrapped__(p, v, m)
