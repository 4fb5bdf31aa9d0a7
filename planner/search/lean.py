"""The search's first keys (``frontier``): lower bounds of a class's objective from its layer times alone
(``lean_bound``), or their FLOP floor (``floor_bound``), and the busiest pipeline rank's least load they and
``bounds`` read (``busiest_rank_load``, ``kinds_load``). Re-exported by ``planner.search.bounds``;
``tests/test_planner_exact.py`` checks them against the brute force.
"""

from __future__ import annotations

import math
from operator import attrgetter

from planner.compose.blocks import WINDOW, block_sequence
from planner.compose.context import Context
from planner.compose.context_parallel import cp_exposed, cp_view
from planner.compose.cost import Candidate
from planner.compose.floors import layer_floor
from planner.compose.layer_group import moe_floor, ns
from planner.compose.terms import layer_group
from planner.specs import rules


def busiest_rank_load(L: int, p: int, w: int, e_first: int, e_last: int, least: int = 1) -> int:
    """min over cuts of max over ranks of (layers·w + extras): the least F+B per micro-batch of the
    busiest pipeline rank, where rank 0 carries ``e_first`` and rank p−1 ``e_last`` (the embedding
    and the LM head), every rank holding at least ``least`` layers (its v chunks of ≥ 1 layer each).
    Exact for one chunk per rank (a rank's load is its layers' and its extras'); with v chunks per
    rank it relaxes "≥ 1 layer per chunk" to "≥ v per rank", a lower bound. The floor matters: with
    ≥ 0 layers the LM head's rank could be left with the head alone (OPT-175B, pp = 62: the bound
    missed a whole layer of the busiest rank, and 15 classes went to CP-SAT only to be pruned)."""
    if p == 1:
        return L * w + e_first + e_last
    floor_ = least * max(w, 0)
    if w <= 0:
        return max(e_first, e_last) + floor_

    ef, el, inner = e_first, e_last, p - 2
    t = max(ef + floor_, el + floor_, floor_, (L * w + ef + el) // p)
    # while the ranks' capacity at loads ≤ t is short of L: the next breakpoint, where some rank takes one more
    # layer (a few steps; written out: the search computes this bound for every class)
    while (t - ef) // w + (t - el) // w + inner * (t // w) < L:
        t = min(((t - ef) // w + 1) * w + ef, ((t - el) // w + 1) * w + el, (t // w + 1) * w)
    return t


def kinds_load(
    L: int, K: int, p: int, w: int, wm: int, e_first: int, e_last: int, least: int = 1, memo: dict | None = None
) -> int:
    """``busiest_rank_load`` of a layer sequence whose K layers weigh ``wm`` and the L − K others ``w`` (a model of
    dense and MoE blocks; K = 0: one kind, ``busiest_rank_load`` itself): every layer at the lighter weight, and,
    the weights ≥ 0, each kind's layers alone (a rank's load only drops without the other kind's layers). ``memo``:
    each kind's load alone by its arguments (they read neither ``least`` nor the other kind: shared by v)."""
    if K == 0:
        return busiest_rank_load(L, p, w, e_first, e_last, least)
    light = wm if wm < w else w
    load = busiest_rank_load(L, p, light, e_first, e_last, least)
    if light >= 0:
        memo = {} if memo is None else memo
        for n, x in ((K, wm), (L - K, w)):
            k = ("kind", n, p, x, e_first, e_last)
            alone = memo.get(k)
            if alone is None:
                alone = memo[k] = busiest_rank_load(n, p, x, e_first, e_last, 0)
            if alone > load:
                load = alone
    return load


_WEIGHTS_KEY = attrgetter(
    "micro_batch_size", "tp", "sequence_parallel", "recompute", "tp_comm_overlap", "ep", "etp", "cp"
)


def lean_bound(
    ctx: Context,
    c: Candidate,
    loads: dict[tuple, int] | None = None,
    floor: bool = False,
    weights: dict[tuple, LeanWeights] | None = None,
) -> int:
    """≤ ``quick_bound``, from the layer times alone (``terms.layer_group``, not per ZeRO stage and dp; a CP class's with
    its least exchange, ``exchange_floor``): the chain and busiest-rank terms of ``_pipe_bound`` that only grow with
    the layer times (no ZeRO-3 gathers, end of step or p2p lags). ``loads``: a memo of the busiest rank's load (it reads neither dp nor the schedule). ``floor``: a MoE
    block's times at ``layer_group.moe_floor`` (≤ its own at every ep), so its (ep, etp) pair is not priced.
    ``weights``: a memo of ``lean_weights`` (the frontier's: DeepSeek-V3 on 2,048 GPUs asks 10k classes' bounds
    of a few hundred layer weights)."""
    key = (*_WEIGHTS_KEY(c), floor)
    hit = weights.get(key) if weights is not None else None
    if hit is None:
        hit = lean_weights(ctx, c, floor)
        if weights is not None:
            weights[key] = hit
    w, wm, K, emb, head, at = hit
    return lean_pipe(ctx, c, w, wm, K, emb, head, loads, (at, c.cp))


#: ``lean_pipe``'s layer terms of a class (w, wm, K, emb, head) and its loads' memo key (``lean_weights``)
LeanWeights = tuple[int, int, int, int, int, tuple]


def lean_weights(ctx: Context, c: Candidate, floor: bool) -> LeanWeights:
    """``lean_bound``'s layer terms: they read (mbs, tp, SP, recompute, TP overlap, ep, etp, cp) and ``floor``."""
    at = (c.micro_batch_size, c.tp, c.sequence_parallel, c.recompute, c.tp_comm_overlap, c.ep, c.etp)
    view = cp_view(ctx, c.cp)  # no CP comm
    kinds, prefix = block_sequence(view)
    if floor and not kinds[-1].endswith(WINDOW):  # the embedding and LM head: the dense group's, ep-free
        at = (*at[:5], -c.ep, c.etp)  # −ep: the loads' memo key of the floor's weights
        lg = layer_group(view, *at[:5], kind="transformer_block")
        fm, bm = moe_floor(view, *at[:5], c.ep, c.etp)
        moe_w = fm + bm
        w = moe_w if prefix is None else lg.fwd.layer + lg.bwd.layer
    else:  # exact (a windowed MoE model's two kinds, gpt-oss: the floor is written for dense + MoE blocks)
        lg = layer_group(view, *at, kinds[0])
        w = moe_w = lg.fwd.layer + lg.bwd.layer
        if prefix is not None:
            heavy = layer_group(view, *at, kinds[1])
            moe_w = heavy.fwd.layer + heavy.bwd.layer
    f, b = lg.fwd, lg.bwd
    K, wm = (0, w) if prefix is None else (prefix[-1], moe_w)  # a model of two block kinds: its MoE layers, weight
    e = exchange_floor(ctx, c)  # every layer's (either kind's) CP exchange, at the class's cheapest one
    return w + e, wm + e, K, f.emb + b.emb, f.head + b.head, at


def exchange_floor(ctx: Context, c: Candidate) -> int:
    """The least F + B per layer and micro-batch the CP exchange adds to a CP class (``context_parallel.class_terms``
    adds ``ns`` of ``cp_exposed``'s forward and backward to every layer's), over the exchanges a class at (mbs, tp, cp,
    recompute) may use (the stack's ``cp_comms`` whose head split fits: ``cp_degrees.cp_options``; a pinned one is one
    of them, ``stack_rules``): a function of the fields ``lean_weights``' memo reads, so shared by every class that
    shares its weights whatever its exchange. 0 without CP. ``tests/test_lean_exchange.py`` checks it."""
    if c.cp == 1:
        return 0
    comms: list[str] = [x for x in ctx.stack.cp_comms if rules.cp_splits_heads(ctx.model, c.tp, c.cp, x) is None]
    if c.cp_comm not in comms:  # not a class the search enumerates: its own exchange alone (still a bound of it)
        comms = [c.cp_comm]
    return min(ns(f) + ns(b) for f, b in (cp_exposed(ctx, c.variant(cp_comm=x)) for x in comms))


def floor_bound(ctx: Context, c: Candidate, memo: dict[tuple, tuple[int, int] | None] | None = None) -> int | None:
    """≤ ``lean_bound`` without pricing the layers: ``lean_pipe`` at their FLOP floor (``floors.layer_floor``, the
    embedding at 0; ``memo`` by (mbs, tp, SP, recompute, cp)). None where the floor does not apply."""
    if c.tp_comm_overlap:
        return None
    k = (c.micro_batch_size, c.tp, c.sequence_parallel, c.recompute, c.cp)
    memo = {} if memo is None else memo
    fl = memo[k] if k in memo else memo.setdefault(k, layer_floor(ctx, *k))
    return None if fl is None else lean_pipe(ctx, c, fl[0], fl[0], 0, 0, fl[1])


def lean_pipe(
    ctx: Context, c: Candidate, w: int, wm: int, K: int, emb: int, head: int, loads: dict | None = None, at: tuple = ()
) -> int:
    """``lean_bound``'s terms from a layer's F + B (``w``; ``wm`` for the ``K`` MoE layers of two block kinds), the
    embedding's and the LM head's: non-decreasing in each of them."""
    p, v, L = c.pp, c.virtual_stages, ctx.model.num_layers
    m = ctx.training.global_batch_size // (c.dp * c.micro_batch_size)  # ``num_microbatches``, inline (~25k calls)
    total = (L - K) * w + K * wm + emb + head
    if p == 1:
        emb, head = emb + head, 0
    if loads is None:
        load = kinds_load(L, K, p, w, wm, emb, head, v)
    else:
        lk = (at, p, v)
        hit = loads.get(lk)
        load = hit if hit is not None else loads.setdefault(lk, kinds_load(L, K, p, w, wm, emb, head, v, loads))
    w = wm if wm < w else w
    if v == 1:
        pipe = total / (1.0 - (1.0 - 1.0 / m) ** p)
        if c.schedule == "gpipe":
            pipe = max(pipe, total + (m - 1) * max(total / p, load))
        else:
            pipe = max(pipe, total + max(0, m - p) * load)
    else:
        first = emb + (head if c.chunks == 1 else 0)
        pipe = max(m * total / p + (w * (p * (p - 1) // 2) + (p - 1) * first) / p, m * load)
    return int(math.floor(pipe))
