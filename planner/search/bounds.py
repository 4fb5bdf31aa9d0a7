"""Valid lower bounds of a class's objective over its stage cuts, and (from ``planner.search.screens``) memory
screens that never drop a class with a fitting cut. All are built from the class's ``terms.SharedTerms`` with the
cost model's own functions (``step_end.end_terms``, ``memory.memory_terms``), so a bound cannot drift from what it
bounds; ``tests/test_planner_exact.py`` and ``tests/test_planner_interleaved.py`` check each against
the brute force.
"""

from __future__ import annotations

import math

from planner.compose.affine import moe_counts
from planner.compose.context import Context
from planner.compose.context_parallel import class_terms, quick_terms
from planner.compose.cost import Candidate, ClassCosts, boundary_lags, num_microbatches
from planner.compose.step_end import end_floor, end_terms, rank_end
from planner.compose.terms import SharedTerms
from planner.search.columns import column_bound
from planner.search.interleaved import interleaved_bound
from planner.search.lean import (  # noqa: F401 (the layer-time bounds, re-exported where they were)
    busiest_rank_load,
    floor_bound,
    kinds_load,
    lean_bound,
    lean_pipe,
)
from planner.search.screens import (  # noqa: F401 (the memory screens, re-exported where they were)
    caps_fit,
    class_caps,
    fits_at,
    interleaved_peak_copies,
    layer_caps,
    may_fit,
    quick_may_fit,
)
from planner.search.steady import steady_bound

# ---------------------------------------------------------------------------------------------
# Lower bounds of the objective


def capped_load(L: int, w: int, extras: list[int], caps: list[int], least: int = 1) -> int | None:
    """min over cuts with ``least`` ≤ n_i ≤ ``caps[i]`` and Σ n_i = L of max_i (n_i·w + extras[i]): the
    busiest rank's least load when rank i's memory holds at most ``caps[i]`` layers (``layer_caps``; a
    fitting cut respects them, so this bounds every fitting cut). None when no such cut exists. Exact
    (the smallest t whose capacity Σ min(caps[i], (t − extras[i]) // w) reaches L, by bisection)."""
    if w <= 0 or len(caps) * least > L or any(c < least for c in caps) or sum(caps) < L:
        return None

    def capacity(t: int) -> int:
        return sum(min(c, (t - e) // w) for c, e in zip(caps, extras))

    lo, hi = max(e + least * w for e in extras), max(e + c * w for e, c in zip(extras, caps))
    if capacity(lo) >= L:
        return lo
    while hi - lo > 1:  # capacity(lo) < L ≤ capacity(hi)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if capacity(mid) >= L else (mid, hi)
    return hi


def _pipe_bound(
    schedule: str,
    m: int,
    p: int,
    v: int,
    L: int,
    f_layer: int,
    b_layer: int,
    extra_sum: int,
    first_extra: int,
    ends_extra: tuple[int, int, int, int],
    lag_sum: int,
    ends_sum: int,
    post_const: int,
    caps: tuple[int, ...] | None = None,
    moe: tuple[int, int, int] = (0, 0, 0),
) -> int:
    """The cut-independent lower bound of ``class_bound`` from the class's scalar terms (``moe``: a model of two
    block kinds' MoE layers and what one adds to ``f_layer`` and ``b_layer``): ``extra_sum``
    = Σ_c (f_extra + b_extra), ``first_extra`` = chunk 0's f_extra + b_extra, ``ends_extra`` = the
    first rank's (f, b) extras and the last rank's, ``ends_sum`` = the optimizer and ZeRO-1/2
    all-gather terms summed over every chunk (the rank average bounds the max). ``caps``: the layers
    each rank's memory can hold (``layer_caps``): the busiest rank's load is then ``capped_load``, a
    bound over the fitting cuts (a deep 1F1B pipeline without recomputation leaves its first stages one
    layer each: Llama 3 405B, TP8×PP64: 7.0 s → 9.1 s for an optimum of 13.4 s)."""
    K, fm, bm = moe
    w, wm = f_layer + b_layer, f_layer + b_layer + fm + bm
    total = L * w + K * (fm + bm) + extra_sum  # one micro-batch through all chunks
    f0, b0, fl, bl = ends_extra
    if p == 1:
        f0, b0, fl, bl = f0 + fl, b0 + bl, 0, 0
    load = kinds_load(L, K, p, w, wm, f0 + b0, fl + bl, v)  # ≤ F_k + B_k of the busiest rank k
    light = min(w, wm) if K else w
    if caps is not None:
        extras = [f0 + b0] + [0] * (p - 2) + [fl + bl] if p > 1 else [f0 + b0]
        load = max(load, capped_load(L, light, extras, list(caps), v) or 0)
    if v == 1:
        # Chains F(0, 0..i-1) → all of rank i → B(m-1, i-1..0), weighted so the cut cancels.
        pipe = total / (1.0 - (1.0 - 1.0 / m) ** p)
        if schedule == "gpipe":
            # Exact closed form ΣF + ΣB + 2·lags + (m−1)·(max F + max B), and max F + max B ≥ load.
            pipe = max(pipe, total + 2 * lag_sum + (m - 1) * max(total / p, load))
        else:
            # 1F1B steady-state chain through the busiest rank k: F(0) through every stage, B(0) down
            # to k, k's m B and m − min(p − k, m) later F, B(m−1) down to 0, every lag twice:
            # total + 2·lags + (m−1)·B_k + max(0, m−p)·F_k, with B_k ≥ ρ·(F_k + B_k) (mediant).
            pairs = ((f_layer, b_layer), (f0, b0), (fl, bl), (f_layer + fm, b_layer + bm) if K else (0, 0))
            rho = min([b / (f + b) for f, b in pairs if f + b > 0] or [0.0])
            pipe = max(pipe, total + 2 * lag_sum + (max(0, m - p) + (min(m, p) - 1) * rho) * load)
    else:
        # Chunks 0..p-2 feed the last rank's first forward (only chunk 0 carries an extra there).
        ramp = (light * (p * (p - 1) // 2) + (p - 1) * first_extra) / p
        pipe = max(m * total / p + ramp, m * load)  # the busiest rank's own work
    return int(math.floor(pipe + (ends_sum / p + post_const)))


def pipe_bound(
    s: SharedTerms,
    c: Candidate,
    m: int,
    num_layers: int,
    lag_sum: int,
    caps: tuple[int, ...] | None = None,
    more: tuple[int, int] = (0, 0),
) -> int:
    """``_pipe_bound`` of a class from its shared terms and the sum of its pipeline lags; ``more``: ns added to a
    layer's forward and backward (``context_parallel.quick_terms``)."""
    L, K = num_layers, s.moe_prefix[-1] if s.moe_prefix is not None else 0
    fe, be, fh, bh = s.fwd.emb, s.bwd.emb, s.fwd.head, s.bwd.head
    ends, end_const = end_floor(s, c, L, K)
    first = fe + be + ((fh + bh) if c.chunks == 1 else 0)
    firsts = (fe, be, fh, bh) if c.chunks > 1 else (fe + fh, be + bh, 0, 0)
    return _pipe_bound(
        c.schedule,
        m,
        c.pp,
        c.virtual_stages,
        L,
        s.fwd.layer + more[0],
        s.bwd.layer + more[1],
        fe + be + fh + bh,
        first,
        firsts,
        lag_sum,
        ends,
        end_const,
        caps,
        (K, s.fwd.moe, s.bwd.moe),
    )


def rank_chain_load(
    L: int,
    m: int,
    w: int,
    extras: list[int],
    lags: list[int],
    caps: list[int],
    least: int = 1,
    steady: tuple[int, list[tuple[int, int]]] | None = None,
    rtol: float = 1e-3,
) -> int | None:
    """A lower bound of min over cuts (``least`` ≤ n_i ≤ ``caps[i]``, Σ n_i = L) of max over ranks i of the
    rank chain Σ_{j<i} (t_j + lags[j]) + m·t_i, with t_i = n_i·w + extras[i] and ``lags[j]`` the delay
    of boundary j there and back: F(0) through the stages before i, all of rank i's m·(F + B), B(m − 1)
    back (one chunk per rank; ``cut_bound``'s chains). Its real relaxation, solved on the makespan T to
    ``rtol`` (false position), returning the largest T found infeasible (≤ the relaxation's optimum ≤
    the best cut).
    Feasibility of T is exact for the relaxation: the chains only grow with any n_j, so the feasible
    cuts are closed downwards and it suffices that the most layers T admits reach L; a rank's room
    only grows with the layers before it, so each takes all it can (its memory cap, its own chain,
    and the room every later rank needs for its extras at its least layers). It binds where memory
    caps the first stages of a deep 1F1B pipeline and pushes its layers to the last ones (Llama 3
    405B, TP8×PP32: ``capped_load``'s bound 8.5 s, this 10.9 s, the optimum 12.2 s).

    ``steady`` = (base, [(a_k, c_k)]): 1F1B's steady-state chains, base + a_k·n_k + c_k ≤ T per rank k
    (``chain_bound``); each caps its rank's layers for a given T."""
    p = len(caps)
    if p * least > L or any(c < least for c in caps) or sum(caps) < L:
        return None
    e = [x + least * w for x in extras]  # n_i = least + r_i, r_i ≥ 0
    room_caps = [(c - least) * w for c in caps]
    need = (L - p * least) * w

    def margin(T: float) -> float | None:
        """Layers (× w) T admits beyond L: ≥ 0 when T is feasible; None when a rank cannot hold even
        its least layers."""
        # (``min`` of two or three written out, the first of equals kept as ``min`` keeps it: called ~10⁵ times)
        thr = [0.0] * (p + 1)  # the largest prefix at rank k from which ranks k… fit at their least layers
        thr[p] = float("inf")
        for k in range(p - 1, -1, -1):
            x, y = T - m * e[k], thr[k + 1] - e[k] - lags[k]
            thr[k] = y if y < x else x
        if thr[0] < 0:
            return None
        s = got = 0.0
        for i in range(p):
            room: float = room_caps[i]
            x, y = (T - s) / m - e[i], thr[i + 1] - s - lags[i] - e[i]
            if x < room:
                room = x
            if y < room:
                room = y
            if steady is not None:
                a, c = steady[1][i]
                x = ((T - steady[0] - c) / a - least) * w
                if x < room:
                    room = x
                if room < 0:
                    return None
            got += room
            s += e[i] + room + lags[i]
        return got - need

    # Bracket: the same chains without caps, lags, floors or steady chains (the geometric profile,
    # ``_pipe_bound``'s first term) are a lower bound; every rank at its cap is feasible.
    lo = (need + sum(e)) / (1.0 - (1.0 - 1.0 / m) ** p)
    g_lo = margin(lo)
    if g_lo is not None and g_lo >= 0:
        return int(lo)
    top = float((m + 1) * sum(r + x + g for r, x, g in zip(room_caps, e, lags)) + 1)
    hi = min(2 * lo, top)
    while (g_hi := margin(hi)) is None or g_hi < 0:
        if hi >= top:  # only by rounding: every rank at its cap takes the L layers
            return int(lo)
        lo, g_lo, hi = hi, g_hi, min(2 * hi, top)
    # The margin grows with T, piecewise linearly (and flat where caps bind): false position, with a
    # bisection whenever the last step moved the same end as the one before or the margin is flat there.
    side = last = 0
    while hi - lo > rtol * hi:
        if g_lo is None or g_hi <= 0 or side == last:
            mid = (lo + hi) / 2
        else:
            mid = lo + (hi - lo) * (-g_lo) / (g_hi - g_lo)
        last, g = side, margin(mid)
        if g is not None and g >= 0:
            hi, g_hi, side = mid, g, 1
        else:
            lo, g_lo, side = mid, g, -1
    return int(lo)


def chain_bound(cc: ClassCosts, caps: list[int]) -> int:
    """``rank_chain_load`` of a class with one chunk per rank, plus the end term's rank average (as in
    ``_pipe_bound``); 0 (no bound) for interleaved classes or when no cut respects the caps."""
    c, s = cc.cand, cc.shared
    if c.virtual_stages > 1 or c.pp == 1:
        return 0
    extras = [f + b for f, b in zip(cc.f_extra, cc.b_extra)]
    K = s.moe_prefix[-1] if s.moe_prefix is not None else 0  # a model of two block kinds: its MoE layers
    fl, bl = (
        (min(cc.f_layer, cc.f_layer + cc.f_moe), min(cc.b_layer, cc.b_layer + cc.b_moe))
        if K
        else (cc.f_layer, cc.b_layer)
    )
    steady = None
    if c.schedule == "1f1b":
        # Rank k's steady state: F(0) through every stage, B(0) back to k, then k's other m − 1
        # backwards and the max(0, m − p + k) forwards after its first backward, B(m − 1) back to 0:
        # ΣF + ΣB + 2·Σlags (the same for every cut) + (m − 1)·B_k + max(0, m − p + k)·F_k.
        m, L = cc.m, cc.num_layers
        base = L * (cc.f_layer + cc.b_layer) + K * (cc.f_moe + cc.b_moe) + sum(extras) + 2 * sum(cc.lag)
        terms = []
        for k in range(c.pp):  # each layer of rank k at the lighter kind's times
            q = max(0, m - c.pp + k)
            terms.append(((m - 1) * bl + q * fl, (m - 1) * cc.b_extra[k] + q * cc.f_extra[k]))
        steady = (base, terms) if all(a > 0 for a, _ in terms) else None
    w = min(cc.f_layer + cc.b_layer, cc.f_layer + cc.b_layer + cc.f_moe + cc.b_moe) if K else cc.f_layer + cc.b_layer
    load = rank_chain_load(cc.num_layers, cc.m, w, extras, [2 * x for x in cc.lag] + [0], caps, steady=steady)
    if load is None:
        return 0
    ends, end_const = end_floor(s, c, cc.num_layers, K)
    return int(math.floor(load + ends / c.pp + end_const))


def class_bound(cc: ClassCosts) -> int:
    """A lower bound of the objective over every stage cut of the class (fitting or not: the
    explanation prices configurations that do not fit with it)."""
    return pipe_bound(cc.shared, cc.cand, cc.m, cc.num_layers, sum(cc.lag))


def fitting_bound(cc: ClassCosts, searched: bool = True, enough: int | None = None, duals: dict | None = None) -> int:
    """A lower bound of the objective over the stage cuts of the class that fit (what the search
    ranks), ≥ ``class_bound``: the busiest rank's load within what each rank's memory holds
    (``capped_load``), its rank chains (``chain_bound``), 1F1B's steady-state chains in whole layers
    (``steady.steady_bound``) and interleaved 1F1B's fill and drain chains (``interleaved.interleaved_bound``,
    only when ``searched``: a class with one allowed cut is simulated there, and its cut bound is already close).
    When no cut fits (``may_fit`` False) it is ``class_bound``. ``enough``: the interleaved bound is left out when the
    others already exceed it, and its LP when its rank bound does (the k-th best plan's step time: ruled out either
    way); ``duals``: the search's last LP weights (``interleaved_bound``)."""
    caps = tuple(class_caps(cc))  # ``layer_caps`` of its peaks
    pipe = pipe_bound(cc.shared, cc.cand, cc.m, cc.num_layers, sum(cc.lag), caps)
    cheap = max(pipe, chain_bound(cc, list(caps)), steady_bound(cc, caps))
    if not searched or cc.cand.virtual_stages == 1 or (enough is not None and cheap > enough):
        return cheap
    cheap = max(cheap, column_bound(cc, list(caps), lift=False) or 0)  # m = p: GPipe's closed form (``columns``)
    if enough is not None and cheap > enough:
        return cheap
    return max(cheap, interleaved_bound(cc, list(caps), enough, duals))


def quick_bound(ctx: Context, c: Candidate) -> int:
    """``class_bound`` without building the class (no pipeline lags): ≤ ``class_bound``, from the
    terms shared by every class with the same (mbs, tp, sp, recompute, ZeRO, dp); microseconds."""
    s, nf, nb = quick_terms(ctx, c)  # ``class_terms``' as ``pipe_bound`` reads them, not built for a CP class
    return pipe_bound(s, c, num_microbatches(ctx, c), ctx.model.num_layers, 0, more=(nf, nb))


def cut_bound(ctx: Context, c: Candidate, cut: list[int]) -> int:
    """A lower bound of the objective of one class at one cut, from the shared terms (no
    ``ClassCosts``, no simulation): the longest rank chain with its p2p lags, F(0) through the chunks
    before rank i, all of rank i's m·(F + B), B(m−1) back through them (every schedule's order starts
    rank i with F(0) of its first chunk and ends it with B(m−1) of that chunk), plus the exact end
    term (``cut_end``). For a uniform interleaved cut rank p−1's chain is the ideal interleaved step,
    so the bound is close to the simulated one (0.1–2 % below on the bench instances)."""
    s = class_terms(ctx, c)
    p, m = c.pp, num_microbatches(ctx, c)
    t = s.fwd.plus(s.bwd).per_chunk(cut, moe_counts(s.moe_prefix, cut))  # F + B of each chunk
    # The chain crosses boundaries 0..i−1 twice (forward and backward).
    lags = [2 * x for x in boundary_lags(ctx, c, s.p2p_bytes)[: p - 1]] + [0]
    pipe = max(sum(t[:i]) + sum(lags[:i]) + m * sum(t[i::p]) for i in range(p))
    return pipe + cut_end(ctx, c, cut)


def cut_end(ctx: Context, c: Candidate, cut: list[int]) -> int:
    """``Evaluation.end_ns`` of a class at a cut, from the shared terms, by the same function."""
    s = class_terms(ctx, c)
    return max(rank_end(end_terms(s, c, cut, r)) for r in range(c.pp))
