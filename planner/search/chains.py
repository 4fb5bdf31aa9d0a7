"""Chains of a pipeline schedule's dependency graph, kept as operation counts so that one chain serves
every class with the same graph (``dag_key``: schedule, pp, v, m) whatever its costs.

A chain is a path of operations, each after the previous one on its rank or depending on it (a
forward on the previous chunk, a backward on the next one, the last chunk's forward before its
backward). Its length — Σ of its operations' durations plus the p2p lags of the rank boundaries it
crosses — is a lower bound of the makespan of every cut (``cutsolver.Chain``, affine in the cut).
As counts (forwards per chunk, backwards per chunk, crossings per boundary) it is independent of the
class, and ``counts_chain`` prices it for one class with the class's own coefficients (the same sum
as ``cutsolver.chain`` of its operations).

**Window chains** (1F1B, one chunk per rank; ``window_counts``): the critical paths that uneven
stages produce are cycles through a few adjacent stages — a heavy stage (forward and backward
alternating on it), or two adjacent stages whose zig-zag (forward a→b, backward b→a: one F and one
B of each per turn, the boundary's lag twice) is longer than either alone. The window chain of
stages a..b: micro-batch 0 forward (to b, or through the pipeline and back up to b: ``deep``), the
steady-state cycle through a..b, then out by stage a's cooldown and the last backward up to stage 0,
or by the last micro-batch forward through every later stage and backward through all (``down``).
Seeding the cut solver with them proves most 1F1B classes (optimal or pruned) in one or a few
rounds instead of tens (OPT-175B on 992 A100, pp = 31: 15 rounds → 1 for a pruned class).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from planner.compose.simulate import Op, chunk_ranks, rank_orders

if TYPE_CHECKING:
    from planner.compose.cost import ClassCosts
    from planner.search.cutsolver import Chain

#: Window chains cover every window of at most this many adjacent stages (wider cycles are found
#: lazily, from simulations, and from ``wide_window_family`` when a class needs more rounds:
#: ``cutsolver.WIDE_AFTER``). 2 measured best on the wide benchmark: 1 leaves more rounds, 3 makes
#: every CP-SAT solve slower than the rounds it saves.
WINDOW = 2

#: (forwards per chunk, backwards per chunk, crossings per chunk boundary) of a chain of operations.
Counts = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]


def dag_key(cc: ClassCosts) -> tuple[str, int, int, int]:
    """What a chain (as counts) depends on: the schedule's dependency graph."""
    c = cc.cand
    return (c.schedule, c.pp, c.virtual_stages, cc.m)


def path_counts(chunks: int, path: list[Op], lags: list[int]) -> Counts:
    """The counts of a chain of operations crossing the boundaries ``lags`` (with multiplicity)."""
    fc, bc, lc = [0] * chunks, [0] * chunks, [0] * max(0, chunks - 1)
    for k, _, c in path:
        (fc if k == "F" else bc)[c] += 1
    for x in lags:
        lc[x] += 1
    return tuple(fc), tuple(bc), tuple(lc)


def counts_chain(cc: ClassCosts, counts: Counts) -> Chain:
    """The chain's length for class ``cc`` as a function of the cut: Σ coef[c]·n_c + const (ns)."""
    from planner.search.cutsolver import Chain

    fc, bc, lc = counts
    coef = tuple(f * cc.f_layer + b * cc.b_layer for f, b in zip(fc, bc))
    const = sum(f * e for f, e in zip(fc, cc.f_extra)) + sum(b * e for b, e in zip(bc, cc.b_extra))
    moe = tuple(f * cc.f_moe + b * cc.b_moe for f, b in zip(fc, bc)) if cc.moe_prefix is not None else ()
    return Chain(coef, const + sum(x * g for x, g in zip(lc, cc.lag)), moe)


@lru_cache(maxsize=256)
def initial_counts(schedule: str, p: int, v: int, m: int) -> tuple[Counts, ...]:
    """The rank chains every solve starts from: per rank i, F(0) through the chunks before i, every
    operation of rank i, B(m−1) back through them; for 1F1B with one chunk per rank also the
    steady-state shapes: micro-batch 0 forward through every stage and backward down to stage k, then
    stage k's remaining operations, then B(m−1) down to stage 0."""
    orders = rank_orders(schedule, p, v, m)
    where = chunk_ranks(p, v)
    out: dict[Counts, None] = {}
    for i in range(p):
        path = [("F", 0, ch) for ch in range(i)] + list(orders[i]) + [("B", m - 1, ch) for ch in range(i - 1, -1, -1)]
        lags = [b for b in list(range(i)) * 2 if where[b] != where[b + 1]]
        out[path_counts(p * v, path, lags)] = None
    if schedule == "1f1b" and v == 1 and p > 1:
        for k in range(p):
            ops = list(orders[k])
            start = ops.index(("B", 0, k))
            path = (
                [("F", 0, ch) for ch in range(p)]
                + [("B", 0, ch) for ch in range(p - 1, k, -1)]
                + ops[start:]
                + [("B", m - 1, ch) for ch in range(k - 1, -1, -1)]
            )
            lags = list(range(p - 1)) + list(range(k, p - 1)) + list(range(k))
            out[path_counts(p, path, lags)] = None
    return tuple(out)


def price(cc: ClassCosts, family: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``counts_chain`` of every chain of a family (forward, backward and crossing counts as int64
    matrices, one row per chain) at once: (coefficients, one row per chain; constants)."""
    fc, bc, lc = family
    coef = fc * cc.f_layer + bc * cc.b_layer
    const = fc @ np.array(cc.f_extra, dtype=np.int64) + bc @ np.array(cc.b_extra, dtype=np.int64)
    if lc.shape[1]:
        const = const + lc @ np.array(cc.lag, dtype=np.int64)
    return coef, const


def as_arrays(counts: Sequence[Counts]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return tuple(np.array([k[i] for k in counts], dtype=np.int64).reshape(len(counts), -1) for i in range(3))  # type: ignore[return-value]


def window_path(p: int, m: int, a: int, b: int, deep: bool, down: bool) -> tuple[list[Op], list[int]]:
    """The window chain of stages a..b of 1F1B (p stages, m micro-batches) as operations, and the
    boundaries its data edges cross: at a forward on a stage other than b it follows the data (down;
    the last stage's forward to its backward), at b it stays on the rank; at a backward on a stage
    other than a it follows the data up, at a it stays on the rank. The reference for ``window_counts``."""
    orders = rank_orders("1f1b", p, 1, m)
    pos = [{(k, j): i for i, (k, j, _) in enumerate(order)} for order in orders]
    op: Op = ("F", 0, 0)
    path: list[Op] = [op]
    lags: list[int] = []
    while True:
        nxt, crossed = _step(p, m, a, b, deep, down, op, lambda c, i: orders[c][i] if i < 2 * m else None, pos)
        if nxt is None:
            return path, lags
        if crossed is not None:
            lags.append(crossed)
        path.append(nxt)
        op = nxt


def _step(
    p: int,
    m: int,
    a: int,
    b: int,
    deep: bool,
    down: bool,
    op: Op,
    at: Callable[[int, int], Op | None],
    pos: list[dict[tuple[str, int], int]] | None,
) -> tuple[Op | None, int | None]:
    """The window chain's next operation after ``op`` and the boundary crossed to reach it (if any)."""
    k, j, c = op
    on_rank = at(c, pos[c][(k, j)] + 1) if pos is not None else at(c, _index(p, m, c, k, j) + 1)
    data: Op | None
    if k == "F":
        data = ("F", j, c + 1) if c < p - 1 else ("B", j, c)
        use = (deep and j == 0) or (down and j == m - 1) or c != b or on_rank is None
    else:
        data = ("B", j, c - 1) if c > 0 else None
        use = data is not None and (c != a or on_rank is None)
    nxt = data if use else on_rank
    crossed = min(c, nxt[2]) if nxt is not None and use and nxt[2] != c else None
    return nxt, crossed


def _warm(p: int, m: int, c: int) -> int:
    return min(p - c - 1, m)


def _index(p: int, m: int, c: int, k: str, j: int) -> int:
    """Position of F(j)/B(j) in rank c's 1F1B order (``simulate.rank_orders``): warm-up forwards,
    then forward/backward pairs, then the cooldown backwards."""
    w = _warm(p, m, c)
    if k == "F":
        return j if j < w else w + 2 * (j - w)
    return w + 2 * j + 1 if j < m - w else m + j


def _op(p: int, m: int, c: int, i: int) -> Op | None:
    """The operation at position i of rank c's 1F1B order (None past its end)."""
    if i >= 2 * m:
        return None
    w = _warm(p, m, c)
    if i < w:
        return ("F", i, c)
    t = i - w
    if t < 2 * (m - w):
        return ("F", w + t // 2, c) if t % 2 == 0 else ("B", t // 2, c)
    return ("B", i - m, c)


def fast_window_counts(p: int, m: int, a: int, b: int, deep: bool, down: bool) -> Counts:
    """``path_counts`` of ``window_path`` in O(p) steps: the steady-state turns are regular (from B(i)
    on stage a: F(w_a + i + 1) down to b, B(i + d) back up to a, d = b − a + 1) while the forward's
    micro-batch stays below m − 2, so all but the last few are added at once."""
    fc, bc, lc = [0] * p, [0] * p, [0] * max(0, p - 1)
    d, wa = b - a + 1, _warm(p, m, a)
    op: Op | None = ("F", 0, 0)
    skipped = False
    fc[0] = 1
    while op is not None:
        k, j, c = op
        if k == "B" and c == a and not skipped and _op(p, m, a, _index(p, m, a, "B", j) + 1) is not None:
            # a turn point: regular turns from B(i) while w_a + i + 1 ≤ m − 3
            turns = max(0, (m - 4 - wa - j) // d + 1) if m - 4 - wa - j >= 0 else 0
            if turns:
                skipped = True
                for s in range(a, b + 1):
                    fc[s] += turns
                    bc[s] += turns
                for s in range(a, b):
                    lc[s] += 2 * turns
                op = ("B", j + turns * d, a)
                continue
        nxt, crossed = _step(p, m, a, b, deep, down, op, lambda cc_, i: _op(p, m, cc_, i), None)
        if crossed is not None:
            lc[crossed] += 1
        if nxt is not None:
            (fc if nxt[0] == "F" else bc)[nxt[2]] += 1
        op = nxt
    return tuple(fc), tuple(bc), tuple(lc)


#: From this many stages on the window families are counted by ``window_walk`` (all windows in lockstep); below, window
#: by window with ``fast_window_counts`` (the same chains in the same order; the walk's numpy steps cost more than
#: the few short walks there: ≤ 2-stage windows at p = 8, m = 64: 3.9 ms walked, 1.5 ms one by one; p = 64, m = 256:
#: 35 ms walked, 116 ms one by one).
WALK_FROM = 24


@lru_cache(maxsize=64)
def window_family(p: int, m: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``window_counts`` as int64 matrices (for ``price``), cached (read-only)."""
    if p >= WALK_FROM:
        return distinct(*window_walk(p, m, width))
    out = as_arrays(window_counts(p, m, width))
    for x in out:
        x.setflags(write=False)  # cached and shared
    return out


def distinct(fc: np.ndarray, bc: np.ndarray, lc: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct rows (chains) of a family, each at its first occurrence, in order; read-only (cached)."""
    rows = np.ascontiguousarray(np.concatenate([fc, bc, lc], axis=1))
    _, first = np.unique(rows.view(np.dtype((np.void, rows.itemsize * rows.shape[1]))).ravel(), return_index=True)
    keep = np.sort(first)  # the first of each distinct chain, in enumeration order
    out = fc[keep], bc[keep], lc[keep]
    for x in out:
        x.setflags(write=False)  # cached and shared
    return out


@lru_cache(maxsize=64)
def window_counts(p: int, m: int, width: int) -> tuple[Counts, ...]:
    """The distinct window chains of 1F1B with p stages and m micro-batches: every window of at most
    ``width`` adjacent stages, both entries, both exits (cached: they depend on (p, m) only), in the order
    (a, b, deep, down) of their first window."""
    if p >= WALK_FROM:
        return tuple(
            (tuple(f.tolist()), tuple(b.tolist()), tuple(x.tolist())) for f, b, x in zip(*window_family(p, m, width))
        )
    out: dict[Counts, None] = {}
    for a in range(p):
        for b in range(a, min(p, a + width)):
            for deep in (False, True):
                for down in (False, True):
                    out[fast_window_counts(p, m, a, b, deep, down)] = None
    return tuple(out)


@lru_cache(maxsize=4)  # ~13 MB each at p = 64
def wide_window_family(p: int, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The window chains of every width (1 to p stages), both entries and both exits, distinct, in
    ``window_counts``' order: ``fast_window_counts`` of all of them at once (``window_walk``), as int64 matrices.

    A deep pipeline whose stages are (nearly) even is bound by a wide cycle, not by one or two stages: each
    turn through stages a..b runs one F and one B on each and crosses every inner boundary twice, so a
    turn of d stages costs d·(F + B) + 2·(d − 1)·lag for d micro-batches, and with a p2p lag the wider
    cycle is the longer (Llama 3 405B at 8,192 tokens, TP4 + SP × CP8 × PP64, m = 256: the critical path
    at the optimum is the window of stages 1..48; with windows of ≤ 2 stages the cut solver took 24
    rounds to prove the class; with every width from the second round 2, from the fourth (``cutsolver.WIDE_AFTER``) 4)."""
    return distinct(*window_walk(p, m, p))


def window_walk(p: int, m: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``fast_window_counts`` of every window of at most ``width`` stages, both entries and both exits (rows in
    ``window_counts``' order (a, b, deep, down), duplicates kept): the walks of ``_step`` (with ``_index`` and
    ``_op``) run in lockstep, one numpy lane per window, the regular turns added at once as in
    ``fast_window_counts`` (``tests/test_planner_chains.py`` checks every row against it)."""
    spec = np.array(
        [(a, b, d, dn) for a in range(p) for b in range(a, min(p, a + width)) for d in (0, 1) for dn in (0, 1)],
        dtype=np.int64,
    ).reshape(-1, 4)
    n = len(spec)
    a, b, deep, down = (spec[:, i] for i in range(4))
    fc = np.zeros((n, p), dtype=np.int64)
    bc = np.zeros((n, p), dtype=np.int64)
    lc = np.zeros((n, p), dtype=np.int64)  # one column more than the boundaries: the turns' difference arrays
    turns_f = np.zeros((n, p + 1), dtype=np.int64)  # regular turns added to stages a..b (difference array)
    turns_l = np.zeros((n, p), dtype=np.int64)  # twice the turns on boundaries a..b − 1 (difference array)
    fc[:, 0] = 1  # F(0) on stage 0
    k = np.zeros(n, dtype=np.int64)  # the current operation: 0 = F, 1 = B
    j = np.zeros(n, dtype=np.int64)
    c = np.zeros(n, dtype=np.int64)
    skipped = np.zeros(n, dtype=bool)
    warm = np.minimum(p - np.arange(p) - 1, m)  # ``_warm`` per stage
    width_of = b - a + 1

    def index(k: np.ndarray, j: np.ndarray, c: np.ndarray) -> np.ndarray:  # ``_index``
        w = warm[c]
        return np.where(k == 0, np.where(j < w, j, w + 2 * (j - w)), np.where(j < m - w, w + 2 * j + 1, m + j))

    def at(c: np.ndarray, i: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # ``_op``: (exists, k, j)
        w = warm[c]
        t = i - w
        steady = t < 2 * (m - w)
        k = np.where(i < w, 0, np.where(steady, t % 2, 1))
        j = np.where(i < w, i, np.where(steady, np.where(t % 2 == 0, w + t // 2, t // 2), i - m))
        return i < 2 * m, k, j

    live = np.arange(n)
    while live.size:
        K, J, C, A = k[live], j[live], c[live], a[live]
        exists, kr, jr = at(C, index(K, J, C) + 1)  # the next operation on the rank
        left = m - 4 - warm[A] - J
        d = width_of[live]
        turns = np.where(left >= 0, left // d + 1, 0)
        turn = (K == 1) & (C == A) & ~skipped[live] & exists & (turns > 0)
        if turn.any():  # a turn point: the regular turns at once
            rows, t = live[turn], turns[turn]
            turns_f[rows, A[turn]] += t
            turns_f[rows, b[rows] + 1] -= t
            turns_l[rows, A[turn]] += 2 * t
            turns_l[rows, b[rows]] -= 2 * t
            skipped[rows] = True
            j[rows] = J[turn] + t * d[turn]
        step = ~turn
        rows = live[step]
        K, J, C, A, exists, kr, jr = K[step], J[step], C[step], A[step], exists[step], kr[step], jr[step]
        B, forward = b[rows], K == 0
        last = C == p - 1
        data_k = np.where(forward & ~last, 0, 1)
        data_c = np.where(forward, np.where(last, C, C + 1), C - 1)
        data = forward | (C > 0)
        use_f = ((deep[rows] == 1) & (J == 0)) | ((down[rows] == 1) & (J == m - 1)) | (C != B) | ~exists
        use = np.where(forward, use_f, data & ((C != A) | ~exists))
        nk, nj = np.where(use, data_k, kr), np.where(use, J, jr)
        nc, ok = np.where(use, data_c, C), np.where(use, data, exists)
        cross = ok & use & (nc != C)
        lc[rows[cross], np.minimum(C, nc)[cross]] += 1
        f, bw = ok & (nk == 0), ok & (nk == 1)
        fc[rows[f], nc[f]] += 1
        bc[rows[bw], nc[bw]] += 1
        k[rows], j[rows], c[rows] = nk, nj, nc
        live = np.sort(np.concatenate([live[turn], rows[ok]]))
    turned = np.cumsum(turns_f, axis=1)[:, :p]
    return fc + turned, bc + turned, (lc + np.cumsum(turns_l, axis=1))[:, : p - 1]
