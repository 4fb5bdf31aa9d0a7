"""A valid lower bound of an interleaved-1F1B class's objective over every stage cut (issue 26), from chains of its
dependency graph that enter the busiest rank after the warm-up and leave it before the drain.

``_pipe_bound``'s interleaved term, m·total/p plus a ramp of one layer per chunk before the last rank, is the
water-filling optimum of the per-rank chains (F(0) down to rank k, all of k's operations, B(m − 1) back): every
cut could give the first chunks one layer each, so it sees almost none of the pipeline's fill and drain
(≈ (p − 1)/(v·m) of the step). The chains here see them: for each rank k of Megatron-LM's interleaved order
(``simulate.rank_orders``: warm-up 2(p − k − 1) + (v − 1)p forwards, then forward/backward pairs, then the
cooldown backwards; Megatron-LM ``forward_backward_pipelining_with_interleaving``), with

* entry ``first``: F(0) through the chunks before k's first, then rank k from its first operation; or ``steady``:
  micro-batch 0 forward through every chunk and backward down to k's last chunk, then rank k from its first
  backward (its warm-up forwards are inside that chain's forward);
* exit ``last``: rank k to its last operation B(m − 1) on its first chunk, then B(m − 1) back to chunk 0; or
  ``drain``: rank k to its last forward F(m − 1) on its last chunk, then F(m − 1) through every later chunk and
  B(m − 1) back through all.

Each is a path of the graph (rank order or data dependency between consecutive operations, each data edge across
ranks with its boundary's lag), so its length bounds the makespan of every cut (``chains``); as counts it is shared
by every class of the graph. The bound is the larger of two relaxations of min over cuts of the max of these chains
(cuts with n_c ≥ 1, Σ n_c = L, each rank within its memory's layer cap ``screens.layer_caps``):

* ``rank_bound``: each chain bounded below by an affine function of its rank's layer count alone, the counts whole
  (exact per rank, by bisection on the makespan: where the busiest rank must hold one layer more than the average);
* the LP over real layer counts (OR-Tools GLOP), whose dual weights λ are then re-checked exactly — min over the
  same cuts of Σ λ_k·chain_k, a greedy fill (``_least``) — so it is valid whatever the LP's tolerance.

Plus the end of step's rank average, as in ``_pipe_bound``. Measured: Llama 3 405B, TP8 × PP16 × DP64 on 8,192 H100
(m = 32), the classes' bound 10.40 → 10.75 s (recompute none), 13.05 → 13.77–14.68 s (full, no SP); Llama 3 8B,
PP4 on 8 H100 (m = 128) 28.517 → 28.544 s against optima of 28.677–30.38 s. ``tests/test_interleaved_bound.py``
checks it against every cut of small instances.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import lru_cache

import numpy as np

from planner.compose.cost import ClassCosts
from planner.compose.peak_walk import rank_arrays
from planner.compose.step_end import end_floor
from planner.search.chains import Counts, as_arrays, price
from planner.search.lp_proto import add_row, cut_lp, solve_duals
from planner.search.replay import bisect, breakpoints


def interleaved_counts(p: int, v: int, m: int) -> tuple[Counts, ...]:
    """The chains of the module docstring (entry × exit, per rank), as counts."""
    return _family(p, v, m)[0]


@lru_cache(maxsize=256)
def _family(p: int, v: int, m: int) -> tuple[tuple[Counts, ...], tuple[int, ...]]:
    """``interleaved_counts`` and the rank each chain runs through, in the order of rank, entry (``first``,
    ``steady``), exit (``last``, ``drain``), each counts once. Per chain: its rank's segment counted per chunk from
    the rank's order as arrays (``peak_walk.rank_arrays``; every rank's four at once, as differences of prefix
    counts), the head and tail in closed form. Rank k's order starts
    with F(0, k) and ends with B(m − 1, k); its first backward is B(0, last) and its last forward F(m − 1, last)
    (``simulate.rank_orders``: fwd(k, ·) and bwd(k, ·) at index 0 and total − 1). Two operations of one rank never
    cross ranks, so a chain's crossings are its head's and tail's, with their junctions: every boundary crosses
    ranks when p > 1, none when p = 1. ``tests/test_interleaved_family.py`` checks it against the path-by-path
    walk on a table of shapes."""
    C = p * v
    arrays = [rank_arrays("interleaved-1f1b", p, v, m, k) for k in range(p)]
    fwd, local = np.stack([f for f, _ in arrays]), np.stack([x for _, x in arrays])
    n, ks = fwd.shape[1], np.arange(p)
    # every rank's segment counts at once: prefix counts of its ops by key (F of local chunk l: l; B: v + l), a
    # segment [start, stop) their difference (= the bincount of the ops in it)
    hot = np.zeros((p, n + 1, 2 * v), np.int64)
    hot[ks[:, None], np.arange(1, n + 1)[None, :], np.where(fwd, local, v + local)] = 1
    prefix = np.cumsum(hot, axis=1)
    first_b = np.argmin(fwd, axis=1)  # B(0, last): the first backward
    last_f = n - 1 - np.argmax(fwd[:, ::-1], axis=1)  # F(m − 1, last): the last forward
    last = C - p + ks  # rank k's last chunk
    chunk = np.arange(C)
    after, before = (chunk > last[:, None]).astype(np.int64), (chunk < ks[:, None]).astype(np.int64)
    none, every = np.zeros_like(after), np.ones_like(after)
    # entries (``first``, ``steady``): head's forwards, backwards, where rank k's segment starts; exits (``last``,
    # ``drain``): where it stops, tail's forwards, backwards — [rank, entry or exit, chunk]
    hf, hb, start = np.stack([before, every], 1), np.stack([none, after], 1), np.stack([0 * ks, first_b], 1)
    tf, tb, stop = np.stack([none, after], 1), np.stack([before, every], 1), np.stack([0 * ks + n, last_f + 1], 1)
    seg = prefix[ks[:, None, None], stop[:, None, :]] - prefix[ks[:, None, None], start[:, :, None]]  # [k, e, x, key]
    fc, bc = hf[:, :, None, :] + tf[:, None, :, :], hb[:, :, None, :] + tb[:, None, :, :]  # [k, e, x, chunk]
    fc.reshape(p, 2, 2, v, p)[ks, :, :, :, ks] += seg[..., :v]  # rank k's chunks k, k + p, …
    bc.reshape(p, 2, 2, v, p)[ks, :, :, :, ks] += seg[..., v:]
    # crossings: the heads' F(0) up to chunk k − 1 (boundaries < k) and every boundary plus those from rank k's last
    # chunk on; the tails' B(m − 1) below k, and those from the last chunk on plus every boundary
    if p > 1:
        bound = np.arange(C - 1)
        below, past = (bound < ks[:, None]).astype(np.int64), (bound >= last[:, None]).astype(np.int64)
        heads, tails = np.stack([below, 1 + past], 1), np.stack([below, past + 1], 1)
        lc = heads[:, :, None, :] + tails[:, None, :, :]
    else:
        lc = np.zeros((p, 2, 2, C - 1), np.int64)
    out: dict[Counts, int] = {}
    starts, stops = start.tolist(), stop.tolist()
    for k, (fk, bk, lk) in enumerate(zip(fc.tolist(), bc.tolist(), lc.tolist())):
        for e in range(2):
            for x in range(2):
                if stops[k][x] <= starts[k][e]:
                    continue
                out.setdefault((tuple(fk[e][x]), tuple(bk[e][x]), tuple(lk[e][x])), k)
    return tuple(out), tuple(out.values())


@lru_cache(maxsize=256)
def _arrays(p: int, v: int, m: int) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], tuple[int, ...]]:
    """``_family``'s chains as count matrices (``chains.as_arrays``, read only), once per (p, v, m)."""
    counts, ranks = _family(p, v, m)
    family = as_arrays(counts)
    for x in family:
        x.flags.writeable = False
    return family, ranks


def _least(a: list[float], caps: list[int], p: int, L: int) -> float | None:
    """min Σ a_c·n_c over real n_c ≥ 1 with Σ n_c = L and each rank's chunks within its cap: every chunk at one
    layer, the rest greedily to the cheapest chunks whose rank has room (exact: a rank's room is shared by its
    chunks, and the cheapest chunk of a rank is the only one of it that takes more). None when no cut fits."""
    C = len(a)
    room = [caps[r] - C // p for r in range(p)]
    if min(room) < 0:
        return None
    total, left = sum(a), L - C
    for r in sorted(range(p), key=lambda r: min(a[r::p])):
        take = min(left, room[r])
        total += take * min(a[r::p])
        left -= take
    return total if left == 0 else None


def interleaved_bound(
    cc: ClassCosts, caps: list[int] | None = None, enough: int | None = None, duals: dict | None = None
) -> int:
    """A lower bound of the class's objective over every cut (``caps``: over the cuts that respect each rank's
    layer cap): the larger of ``rank_bound`` and the re-checked LP, plus the end of step's rank average; 0 when it
    is not interleaved or no cut respects the caps. A model of two block kinds: every layer at the lighter kind.
    ``enough``: the LP is left out when ``rank_bound``'s already exceeds it (the search's k-th best plan), or when
    the dual weights of the last LP of the same chains (``duals``, by (p, v, m): a search's classes that differ in
    ZeRO stage, overlap, … weigh their chains alike), re-checked exactly for this class, do: any weights on the
    simplex give a valid bound (``_least``)."""
    c, s = cc.cand, cc.shared
    p, v, L, C = c.pp, c.virtual_stages, cc.num_layers, cc.chunks
    if v == 1 or p == 1 or C > L:
        return 0
    caps = list(caps) if caps is not None else [L] * p
    family, ranks = _arrays(p, v, cc.m)
    coef, const = price(cc, family)
    K = s.moe_prefix[-1] if s.moe_prefix is not None else 0
    if K:  # a model of two block kinds: every layer at the lighter kind's times, the K MoE layers' extra at its least
        fc, bc, _ = family
        lf, lb = min(0, cc.f_moe), min(0, cc.b_moe)
        coef = coef + fc * lf + bc * lb
    a_rows, b_rows = coef.astype(float), const.astype(float)
    whole = rank_bound(a_rows, b_rows, ranks, caps, p, L)
    if whole is None:
        return 0
    ends, end_const = end_floor(s, c, L, K)

    def bound(pipe: float) -> int:
        # the re-check is in floating point: a relative margin far above its rounding (1e-9 of a ~10 s step: 10 ns)
        return int(math.floor(pipe * (1 - 1e-9) + ends / p + end_const))

    pipe = whole
    if enough is not None and bound(pipe) > enough:
        return bound(pipe)
    key = (p, v, cc.m)
    if enough is not None and duals is not None and key in duals:
        least = _least((duals[key] @ a_rows).tolist(), caps, p, L)
        if least is not None and bound(float(duals[key] @ b_rows) + least) > enough:
            return bound(max(pipe, float(duals[key] @ b_rows) + least))
    lam = _lp_weights(a_rows, b_rows, caps, p, L)
    if duals is not None and lam is not None:
        duals[key] = lam
    least = _least((lam @ a_rows).tolist(), caps, p, L) if lam is not None else None
    if lam is not None and least is not None:
        pipe = max(pipe, float(lam @ b_rows) + least)
    return bound(pipe)


def rank_bound(a: np.ndarray, b: np.ndarray, ranks: tuple[int, ...], caps: list[int], p: int, L: int) -> float | None:
    """min over whole layer counts N_r per rank (v ≤ N_r ≤ caps[r], Σ N_r = L) of the max over the chains
    (chain i of rank ``ranks[i]``: a_i·n + b_i), each bounded below by an affine function of its rank's N_r alone
    (its coefficient on r's chunks at their least; the other chunks one layer each and the L − N_r − (C − v)
    layers left at the least of their coefficients). Exact in whole layers per rank, where the LP is not (a
    32-layer model on 4 ranks has a rank of 9 layers), by bisection on the makespan (``replay``). None when no cut respects
    the caps."""
    K, C = a.shape
    v = C // p
    if any(cap < v for cap in caps) or sum(caps) < L:
        return None
    lines = _lines(a, b, ranks, p, L)
    if lines is None:  # not whole numbers (nor within 2^52): row by row, as the chain-by-chain loop prices them
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
            # chain ≥ Σ_own a·n + Σ_off a·1 + lo·(L − N_r − (C − v)) ≥ (min own − lo)·N_r + const (each row summed
            # alone: numpy's 1-D sum, the same float as the chain-by-chain loop's)
            total = np.array([row.sum() for row in off]) if off.shape[1] else np.zeros(rows.size)
            slope, const = own.min(axis=1) - lo, b[rows] + total + lo * (L - (C - v))
            lines[r] = list(zip(slope.tolist(), const.tolist()))

    # each rank's lines by the sign of their slope (``feasible`` reads them so, in their order), and its flat ones'
    # highest constant
    rising = [[(s_, c_) for s_, c_ in lines[r] if s_ > 0] for r in range(p)]
    falling = [[(s_, c_) for s_, c_ in lines[r] if s_ < 0] for r in range(p)]
    flat = [max((c_ for s_, c_ in lines[r] if s_ == 0), default=-math.inf) for r in range(p)]

    def feasible(T: float) -> bool:
        """Whether some N (v ≤ N_r ≤ caps[r], Σ N_r = L) keeps every chain's bound ≤ T (each rank an interval;
        a hair permissive in rounding: the bound only falls)."""
        least = most = 0
        for r in range(p):
            if flat[r] > T:
                return False
            # min over lines of floor(x + 1e-9) is floor(min x + 1e-9) (each step monotone); max and ceil alike
            lo_n, hi_n, up, down = v, caps[r], rising[r], falling[r]
            if up:
                hi_n = min(hi_n, math.floor(min([(T - const) / slope for slope, const in up]) + 1e-9))
            if down:
                lo_n = max(lo_n, math.ceil(max([(T - const) / slope for slope, const in down]) - 1e-9))
            if lo_n > hi_n:
                return False
            least, most = least + lo_n, most + hi_n
        return least <= L <= most

    def top(r: int, n: int) -> float:
        return max(slope * n + const for slope, const in lines[r])

    hi_t = max(max(top(r, v), top(r, caps[r])) for r in range(p))  # hi: every N feasible (convex)
    # from 0: bisection to a relative 1e-12, feasible asked only where its threshold does not settle it (``replay``)
    return bisect(feasible, hi_t, breakpoints(lines, caps, v))


def _lines(a: np.ndarray, b: np.ndarray, ranks: tuple[int, ...], p: int, L: int) -> list | None:
    """``rank_bound``'s lines (slope, const) per rank, every chain at once: None unless p > 1 and every entry of
    ``a`` and ``b`` is a whole number with every sum below 2^52 (the search's chains: integer ns), where the sums and
    products are exact in any order, so each is the very float of the row-by-row loop."""
    K, C = a.shape
    v = C // p
    if p == 1 or K == 0:
        return None
    big = float(np.abs(a).max()) * (L + C) + float(np.abs(b).max())
    if not big < 2.0**52 or not (np.array_equal(a, np.floor(a)) and np.array_equal(b, np.floor(b))):
        return None
    rank_of = np.asarray(ranks)
    own = a.reshape(K, v, p)[np.arange(K), :, rank_of]  # row i's chunks on its rank (chunk c on rank c mod p)
    on_rank = (np.arange(C) % p)[None, :] == rank_of[:, None]
    lo = np.where(on_rank, np.inf, a).min(axis=1)
    total = a.sum(axis=1) - own.sum(axis=1)
    slope, const = own.min(axis=1) - lo, b + total + lo * (L - (C - v))
    lines: list[list[tuple[float, float]]] = [[] for _ in range(p)]
    for r, s_, c_ in zip(ranks, slope.tolist(), const.tolist()):
        lines[r].append((s_, c_))
    return lines


def most_frequent(row: list[float]) -> float:
    """The most frequent value of ``row``, the least of those on a tie (``np.unique``'s sorted values at the first
    ``argmax`` of their counts: the same value, without its sort)."""
    counts = Counter(row)
    top = max(counts.values())
    return min(x for x, n in counts.items() if n == top)


def _lp_weights(a: np.ndarray, b: np.ndarray, caps: list[int], p: int, L: int) -> np.ndarray | None:
    """The LP min T s.t. T ≥ a_k·n + b_k (every chain), n_c ≥ 1, Σ n = L, Σ_{c on rank r} n_c ≤ caps[r]: its
    chains' dual weights (≥ 0, Σ = 1), or None when GLOP finds no optimum. Written as one proto (``lp_proto``)."""
    K, C = a.shape
    pr = cut_lp(C, L, caps, p, ["T"])
    first = len(pr.constraint)
    for k in range(K):  # T − a_k·n ≥ b_k, as T − (a_k − μ)·n ≥ b_k + μ·L (Σ n = L; μ: a_k's most frequent value)
        vals = a[k].tolist()
        mu = most_frequent(vals)
        index = [c for c, val in enumerate(vals) if val != mu]
        add_row(pr, float(b[k]) + mu * L, C, index, [mu - vals[c] for c in index])
    duals = solve_duals(pr, first)
    if duals is None:
        return None
    lam = np.array([max(0.0, d) for d in duals])
    total = lam.sum()
    return lam / total if total > 0 else None
