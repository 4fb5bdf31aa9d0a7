"""``interleaved.rank_bound`` (its lines every chain at once, ``replay.bisect`` asking ``feasible`` only where its
threshold does not settle a midpoint) against the computation it replaced: the lines row by row and the plain
bisection over ``feasible``, copied here. The very same float on the seeded classes of ``small_instances`` (every
family and every memory cap), on random integer rows of the bench's shapes (p 2–16, v 2–12, caps from tight to
none) and on random fractional rows (where the lines fall back to the row-by-row loop); and the replay asks
``feasible`` far fewer times (teeth: a replay that asked at every midpoint would pass the equality alone)."""

from __future__ import annotations

import math
import random

import numpy as np
from test_interleaved_bound import small_instances

from planner.compose.cost import class_costs
from planner.search import replay
from planner.search.bounds import layer_caps
from planner.search.chains import as_arrays, price
from planner.search.interleaved import _family, rank_bound
from planner.search.space import enumerate_candidates
from planner.specs import ParallelPins, SearchOptions

PLAIN_ASKS = [0]


def plain_rank_bound(a, b, ranks, caps, p, L):
    """``rank_bound`` as it was: each rank's rows summed alone, then the bisection asking ``feasible`` each time."""
    K, C = a.shape
    v = C // p
    if any(cap < v for cap in caps) or sum(caps) < L:
        return None
    lines = [[] for _ in range(p)]
    rank_of = np.asarray(ranks)
    for r in range(p):
        rows = np.flatnonzero(rank_of == r)
        if not rows.size:
            continue
        mine = np.zeros(C, dtype=bool)
        mine[r::p] = True
        own, off = a[rows][:, mine], a[rows][:, ~mine]
        lo = off.min(axis=1) if off.shape[1] else np.zeros(rows.size)
        total = np.array([row.sum() for row in off]) if off.shape[1] else np.zeros(rows.size)
        slope, const = own.min(axis=1) - lo, b[rows] + total + lo * (L - (C - v))
        lines[r] = list(zip(slope.tolist(), const.tolist()))
    rising = [[(s_, c_) for s_, c_ in lines[r] if s_ > 0] for r in range(p)]
    falling = [[(s_, c_) for s_, c_ in lines[r] if s_ < 0] for r in range(p)]
    flat = [max((c_ for s_, c_ in lines[r] if s_ == 0), default=-math.inf) for r in range(p)]

    def feasible(T):
        PLAIN_ASKS[0] += 1
        least = most = 0
        for r in range(p):
            if flat[r] > T:
                return False
            lo_n, hi_n = v, caps[r]
            for slope, const in rising[r]:
                hi_n = min(hi_n, math.floor((T - const) / slope + 1e-9))
            for slope, const in falling[r]:
                lo_n = max(lo_n, math.ceil((T - const) / slope - 1e-9))
            if lo_n > hi_n:
                return False
            least, most = least + lo_n, most + hi_n
        return least <= L <= most

    def top(r, n):
        return max(slope * n + const for slope, const in lines[r])

    lo_t, hi_t = 0.0, max(max(top(r, v), top(r, caps[r])) for r in range(p))
    if feasible(lo_t):
        return lo_t
    for _ in range(200):
        if hi_t - lo_t <= 1e-12 * hi_t:
            break
        mid = (lo_t + hi_t) / 2
        lo_t, hi_t = (lo_t, mid) if feasible(mid) else (mid, hi_t)
    return lo_t


def check(a, b, ranks, caps, p, L):
    got, want = rank_bound(a, b, ranks, caps, p, L), plain_rank_bound(a, b, ranks, caps, p, L)
    assert got == want and (got is None or math.copysign(1, got) == math.copysign(1, want)), (got, want, p, L, caps)
    return got


def test_seeded_classes_same_float() -> None:
    pins = ParallelPins(schedule="interleaved-1f1b", tp=1, recompute="none", sequence_parallel=False)
    checked = 0
    for ctx in small_instances():
        for cand in enumerate_candidates(ctx, pins, SearchOptions()):
            if cand.virtual_stages == 1 or cand.pp == 1 or cand.chunks > ctx.model.num_layers:
                continue
            cc = class_costs(ctx, cand)
            L, p = cc.num_layers, cand.pp
            counts, ranks = _family(p, cand.virtual_stages, cc.m)
            coef, const = price(cc, as_arrays(counts))
            a, b = coef.astype(float), const.astype(float)
            caps = list(layer_caps(cc.shared, cand, cc.live, L, cc.usable_bytes))
            for cc_caps in ([L] * p, [min(L, x) for x in caps]):
                check(a, b, ranks, cc_caps, p, L)
                checked += 1
    assert checked >= 40, checked


def test_random_rows_same_float_fewer_asks() -> None:
    rng = random.Random(26)
    asks = [0, 0]  # feasible asked by the replay, and by the plain bisection (its midpoints)
    counted = replay.bisect

    def counting(feasible, hi, points):
        def f(t):
            asks[0] += 1
            return feasible(t)

        return counted(f, hi, points)

    replay_bisect = replay.bisect
    PLAIN_ASKS[0] = 0
    import planner.search.interleaved as interleaved

    interleaved.bisect = counting
    try:
        for trial in range(400):
            p, v = rng.choice([2, 3, 4, 6, 7, 8, 12, 16]), rng.randint(2, 12)
            C = p * v
            L = C + rng.randint(0, 3 * C)
            K = p * rng.randint(1, 4)  # every rank has chains (as ``_family``'s)
            whole = trial % 4 != 3
            a = np.array([[rng.randint(10**5, 10**8) for _ in range(C)] for _ in range(K)], dtype=float)
            if rng.random() < 0.5:  # rows that pass most chunks at one coefficient (as the chains do)
                a = np.where(np.array([[rng.random() < 0.7 for _ in range(C)] for _ in range(K)]), a[:, :1], a)
            b = np.array([rng.randint(0, 10**10) for _ in range(K)], dtype=float)
            if not whole:
                a, b = a * 1.000137, b * 0.999713
            ranks = tuple(sorted([*range(p), *(rng.randrange(p) for _ in range(K - p))]))
            caps = [L] * p if rng.random() < 0.4 else [rng.randint(v - (trial % 17 == 0), L) for _ in range(p)]
            check(a, b, ranks, caps, p, L)
    finally:
        interleaved.bisect = replay_bisect
    assert PLAIN_ASKS[0] > 4000 and asks[0] * 2 < PLAIN_ASKS[0], (asks, PLAIN_ASKS)  # it asks under half as often
