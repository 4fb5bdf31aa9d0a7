"""A lower bound of a 1F1B class's objective over its fitting cuts from the steady-state chains alone, in whole layers
(``steady_bound``; ``bounds.fitting_bound`` takes the largest of its bounds).

Rank k's steady-state chain of 1F1B with one chunk per rank (``bounds.chain_bound``, ``chains.initial_counts``):
F(0) through every stage, B(0) back to k, then k's other m − 1 backwards and the q_k = max(0, m − p + k) forwards
after its first backward, B(m − 1) back to 0 — ΣF + ΣB + 2·Σlags (the same for every cut) + (m − 1)·B_k + q_k·F_k.
With B_k and F_k at least rank k's layers at a per-layer time (each layer at the lighter kind's; or a mixed model's
layers of one kind only, the other kind's left out: every time ≥ 0) plus its extras, chain k ≥ base + a_k·n_k + c_k
for the n_k layers rank k holds. The makespan is at least every chain, so at least

    min over cuts (least ≤ n_k ≤ caps[k], Σ n_k = N) of max_k (base + a_k·n_k + c_k),

which is exact in whole layers: the smallest T at which Σ_k min(caps[k], ⌊(T − base − c_k) / a_k⌋) ≥ N, every term
≥ least (each rank's bound only grows with its own layers). ``bounds.rank_chain_load`` takes these chains into its
real relaxation; in whole layers they bind where the layers do not split evenly: of DeepSeek-V3's 58 MoE layers on
16 stages, ten stages hold four, and the last of them, k ≥ 9, waits for q_k ≥ m − 7 forwards of four layers (its
classes bound 27.8 s before, 29.6 s now, the best plan 28.5 s: the classes that CP-SAT only pruned are bounded out).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from planner.compose.cost import ClassCosts
from planner.compose.step_end import end_floor


def steady_load(n: int, base: int, a: Sequence[int], c: Sequence[int], caps: Sequence[int], least: int) -> int | None:
    """min over integer cuts (least ≤ n_k ≤ caps[k], Σ n_k = n) of max_k (base + a[k]·n_k + c[k]), all a[k] > 0;
    None when no such cut exists."""
    if any(cap < least for cap in caps) or sum(caps) < n or len(caps) * least > n:
        return None

    def held(t: int) -> int:  # the most layers the ranks hold with every chain ≤ t; −1 when one cannot hold least
        total = 0
        for ak, ck, cap in zip(a, c, caps):
            x = (t - base - ck) // ak
            if x < least:
                return -1
            total += x if x < cap else cap  # min(cap, x)
        return total

    lo = base + max(ck + least * ak for ak, ck in zip(a, c))  # every rank at its least layers
    hi = base + max(ck + cap * ak for ak, ck, cap in zip(a, c, caps))  # every rank at its cap: Σ caps ≥ n
    if held(lo) >= n:
        return lo
    while hi - lo > 1:  # held(lo) < n ≤ held(hi)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if held(mid) >= n else (mid, hi)
    return hi


def steady_bound(cc: ClassCosts, caps: Sequence[int]) -> int:
    """``steady_load`` of a 1F1B class with one chunk per rank over its fitting cuts (``caps``: ``layer_caps``), for
    every layer at the lighter kind's times and, for a model of two block kinds, each kind's layers alone; plus the
    end term's rank average (as ``bounds.chain_bound``). 0 (no bound) for other classes or when no cut fits."""
    c, s = cc.cand, cc.shared
    if c.schedule != "1f1b" or c.virtual_stages > 1 or c.pp == 1:
        return 0
    m, p, L = cc.m, c.pp, cc.num_layers
    K = s.moe_prefix[-1] if s.moe_prefix is not None else 0  # a model of two block kinds: its MoE layers
    base = L * (cc.f_layer + cc.b_layer) + K * (cc.f_moe + cc.b_moe)
    base += sum(cc.f_extra) + sum(cc.b_extra) + 2 * sum(cc.lag)
    q = [max(0, m - p + k) for k in range(p)]
    extra = [(m - 1) * cc.b_extra[k] + q[k] * cc.f_extra[k] for k in range(p)]
    dense, moe = (cc.f_layer, cc.b_layer), (cc.f_layer + cc.f_moe, cc.b_layer + cc.b_moe)
    # (layers counted, their forward and backward ns each, least per rank)
    cases = [(L, min(dense[0], moe[0]), min(dense[1], moe[1]), 1)] if K else [(L, dense[0], dense[1], 1)]
    if K:
        cases += [(K, moe[0], moe[1], 0), (L - K, dense[0], dense[1], 0)]
    load = 0
    for n, f, b, least in cases:
        a = [(m - 1) * b + qk * f for qk in q]
        if n > 0 and f >= 0 and b >= 0 and all(x > 0 for x in a):
            t = steady_load(n, base, a, extra, caps, least)
            if t is None:
                return 0
            load = max(load, t)
    if load == 0:
        return 0
    ends, end_const = end_floor(s, c, L, K)
    return int(math.floor(load + ends / p + end_const))
