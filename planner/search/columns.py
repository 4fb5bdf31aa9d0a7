"""A valid lower bound of an interleaved-1F1B class with as many micro-batches as ranks (m = p), from chains that
switch rank at the forward → backward turn (issue 26).

With m = p every rank runs all its forwards, then all its backwards (Megatron-LM's interleaved order: the warm-up is
the whole step, ``simulate.rank_orders``), chunk by chunk, micro-batches 0 … m − 1 of a chunk in a row. So for every
chunks a and b the column chain

    F(0) through chunks 0 … a − 1, F(0 … m − 1) of chunk a (its rank's order), F(m − 1) through chunks a + 1 … C − 1,
    the last rank's turn F(m − 1, C − 1) → B(0, C − 1) (its order), B(0) back through chunks C − 1 … b + 1,
    B(0 … m − 1) of chunk b, B(m − 1) back through chunks b − 1 … 0

is a path of the dependency graph (``column_counts``), crossing every boundary twice. Its length is
P + (m − 1)·(F_a + B_b), P the path of one micro-batch (every chunk once each way, every boundary's lag twice) and
F_c = f·n_c + fe_c, B_c = b·n_c + be_c chunk c's forward and backward; so every cut's makespan is at least
P + (m − 1)·(max_a F_a + max_b B_b) — GPipe's closed form (``simulate.gpipe_makespan``), which the single-rank chains
of ``interleaved`` see only in part. Its least over the cuts that respect the ranks' layer caps (``_least``) is exact,
in integers. Plus the end of step's floor and the gradient sync's least, as ``lift``.

Used three ways: a budgeted class met after the budget is spent (``cutsolver``), which would otherwise rank its even
split unproven, is ruled out when its cuts are all slower than the k-th best plan; without the sync's least it is one
of ``bounds.fitting_bound``'s, so such classes queue and report by it (issue 26: MLPerf v3.1 GPT-3 on 1,344 nodes,
the answer's gap 16.7 → 6.2 %, Llama 3 405B on 2,048 × 8 H100 11.8 → 2.2 %); and the cut solver's model holds the
same closed form for them (``cutsolver.cut_model``, as for GPipe), where the rank chains alone needed many lazy
rounds (a 500B GPT of 97 layers on 4,096 A100, TP2 PP32 v2: budgeted, not proven → proven optimal, 29.406 s).
MLPerf v3.1 GPT-3 on 1,344 nodes (m = p for every class): TP4 PP7 v7, chains 669 ms → 846 ms, its optimum.
``tests/test_columns.py`` checks the chains against the rank orders and the simulation, and the bound against every
cut of small instances.
"""

from __future__ import annotations

import numpy as np

from planner.compose.cost import ClassCosts
from planner.compose.step_end import end_floor, sync_lift
from planner.search.chains import Counts
from planner.search.screens import class_caps
from planner.specs.layout import even_stage_layers


def applies(cc: ClassCosts) -> bool:
    """Whether the column chains are paths of the class's graph (interleaved, m = p) and its model one block kind."""
    c = cc.cand
    return (
        c.schedule == "interleaved-1f1b"
        and c.virtual_stages > 1
        and c.pp > 1
        and cc.m == c.pp
        and cc.moe_prefix is None
        and cc.chunks <= cc.num_layers
    )


def column_counts(C: int, m: int, a: int, b: int) -> Counts:
    """The column chain through chunks a (forward) and b (backward), as counts (forwards, backwards, crossings)."""
    fc = [m if c == a else 1 for c in range(C)]
    bc = [m if c == b else 1 for c in range(C)]
    return tuple(fc), tuple(bc), tuple([2] * (C - 1))


def _least(f: int, b: int, fe: list[int], be: list[int], caps: list[int], p: int, L: int) -> int | None:
    """min over the cuts (n_c ≥ 1, Σ n = L, Σ of rank r's chunks ≤ caps[r]) of max_c (f·n_c + fe_c) +
    max_c (b·n_c + be_c), None when no cut respects the caps. Both maxima take values f·x + fe_c and b·x + be_c
    (x whole); a pair (tf, tb) is reached by a cut iff every chunk holds u_c = min(⌊(tf − fe_c)/f⌋, ⌊(tb − be_c)/b⌋)
    ≥ 1 layers and Σ_r min(caps[r], Σ_{c on r} u_c) ≥ L (a chunk holds at most L − C + 1); the least reachable tb
    falls as tf rises (two pointers, from the least tf reachable at all)."""
    C = len(fe)
    if f <= 0 or b <= 0 or any(cap < C // p for cap in caps):
        return None
    fe_a, be_a, cap_a = np.array(fe, dtype=np.int64), np.array(be, dtype=np.int64), np.array(caps, dtype=np.int64)

    def ok(tf: int, tb: int) -> bool:
        u = np.minimum((tf - fe_a) // f, (tb - be_a) // b)
        return bool(u.min() >= 1) and int(np.minimum(cap_a, u.reshape(-1, p).sum(axis=0)).sum()) >= L

    top = L - C + 1  # the most layers a chunk holds
    low_f, low_b = f + int(fe_a.max()), b + int(be_a.max())
    tfs = np.unique((f * np.arange(1, top + 1)[:, None] + np.unique(fe_a)[None, :]).ravel())
    tbs = np.unique((b * np.arange(1, top + 1)[:, None] + np.unique(be_a)[None, :]).ravel())
    tfs, tbs = tfs[tfs >= low_f].tolist(), tbs[tbs >= low_b].tolist()
    j = len(tbs) - 1
    lo, hi = 0, len(tfs)  # the first tf reachable at all (with the largest tb), by binary search
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(tfs[mid], tbs[j]) else (mid + 1, hi)
    best = None
    for tf in tfs[lo:]:
        if best is not None and tf + low_b >= best:
            break
        while j > 0 and ok(tf, tbs[j - 1]):  # the least tb reachable with tf (it falls as tf rises)
            j -= 1
        best = tf + tbs[j] if best is None else min(best, tf + tbs[j])
    return best


def _parts(cc: ClassCosts, caps: list[int] | None, lift: bool = True) -> tuple[int, int, list[int]]:
    """(one micro-batch's path P, the end of step's floor and (``lift``) the sync's least, the caps within L)."""
    c, s, L, C = cc.cand, cc.shared, cc.num_layers, cc.chunks
    one = (cc.f_layer + cc.b_layer) * L + sum(cc.f_extra) + sum(cc.b_extra) + 2 * sum(cc.lag[: C - 1])
    ends, end_const = end_floor(s, c, L, 0)
    rest = ends // c.pp + end_const + (sync_lift(s, c, L, 0) if lift else 0)
    return one, rest, [min(L, x) for x in (caps if caps is not None else class_caps(cc))]


def column_bound(cc: ClassCosts, caps: list[int] | None = None, lift: bool = True) -> int | None:
    """The module's bound of the class's objective over the cuts within ``caps`` (default: its memory's layer caps,
    ``screens.class_caps``), with the end of step's floor and (``lift``) the gradient sync's least (ns); None where
    the chains do not apply (``applies``) or no cut respects the caps. Without the lift it is one of
    ``bounds.fitting_bound``'s (the search adds the lift to those itself, ``lift.lifted``)."""
    if not applies(cc):
        return None
    one, rest, caps = _parts(cc, caps, lift)
    most = _least(cc.f_layer, cc.b_layer, list(cc.f_extra), list(cc.b_extra), caps, cc.cand.pp, cc.num_layers)
    return None if most is None else one + (cc.m - 1) * most + rest


def rules_out(cc: ClassCosts, incumbent: int) -> bool:
    """Whether ``column_bound`` exceeds ``incumbent`` (False where it is None), settled first where it can be without
    the least: the bound at its floor max_c (f + fe_c) + max_c (b + be_c) already above, or the even split's
    max F + max B (an upper bound of the least, when within the caps) not."""
    if not applies(cc):
        return False
    one, rest, caps = _parts(cc, None)
    p, L, C, f, b = cc.cand.pp, cc.num_layers, cc.chunks, cc.f_layer, cc.b_layer
    if f <= 0 or b <= 0 or any(cap < C // p for cap in caps) or sum(caps) < L:
        return False  # no cut within the caps (``_least`` None): left as it was
    top = (incumbent - one - rest) // (cc.m - 1)  # the bound exceeds the incumbent iff the least exceeds this
    if max(cc.f_extra) + f + max(cc.b_extra) + b > top:
        return True
    even = even_stage_layers(L, C)
    if all(sum(even[r::p]) <= caps[r] for r in range(p)):
        at_even = max(f * n + e for n, e in zip(even, cc.f_extra)) + max(b * n + e for n, e in zip(even, cc.b_extra))
        if at_even <= top:
            return False
    most = _least(f, b, list(cc.f_extra), list(cc.b_extra), caps, p, L)
    return most is not None and most > top
