"""Memory screens that never drop a class with a fitting cut, built from the class's ``terms.SharedTerms`` with
the cost model's own functions (``memory.memory_terms``): what each rank's memory can hold (``layer_caps``), whether
any cut of a class may fit (``may_fit``, ``quick_may_fit``) and whether one does (``fits_at``). Re-exported by
``planner.search.bounds``; ``tests/test_planner_exact.py`` checks them against the brute force.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import fields
from operator import attrgetter

from planner.compose.affine import total
from planner.compose.context import Context
from planner.compose.context_parallel import memory_class_terms, ring_buffer_bytes
from planner.compose.cost import Candidate, ClassCosts, Live, class_peaks, live_vectors_cached, num_microbatches
from planner.compose.grad_peaks import Done
from planner.compose.memory import chunk_moe, pending_grads, rank_buffers, rank_memory, rank_states
from planner.compose.pp_order import interleaved_warmup, peak_schedule
from planner.compose.terms import NOTHING, SharedTerms
from planner.search.bare_screen import bare_may_fit
from planner.search.prescreen import DoneSums, Sums, done_sums, heaviest, peak_sums, shape_sums, warm_sums


def layer_caps(
    s: SharedTerms, c: Candidate, live: Live, num_layers: int, usable: int, done: Done | None = None
) -> Iterator[int]:
    """Per rank, an upper bound of the layers its memory can hold (exact for one chunk per rank): at each
    activation peak, a layer costs at least the least of its rank's chunks' (``per_layer``); ``done``: the chunks
    whose gradients exist at each peak (``ClassCosts.done``)."""
    zero = [0] * c.chunks
    moe = s.moe_prefix[-1] if s.moe_prefix is not None else 0  # a model of two block kinds: its MoE layers
    fixed, per_chunk = _empty_cut(s, c, zero)
    for r in range(c.pp):
        own = range(r, c.chunks, c.pp)
        states, buffers = fixed(r)
        base = usable - states - buffers
        cap = num_layers
        for i, vec in enumerate(live[r]):
            d = None if done is None else done[r][i]
            room = base - total([x * per_chunk(ch) for ch, x in vec])  # ``rank_activations`` at the empty cut
            if d is not None:  # the embedding's and the LM head's gradients not yet there
                room += pending_grads(s, c, zero, r, d, zero)
            per, heavy = per_layer(s, own, vec, d)
            if moe:  # the lighter kind's layers at most all of them, the heavier ones within the room
                light, many = (per, num_layers - moe) if per <= heavy else (heavy, moe)
                if room >= 0 and light > 0:
                    cap = min(cap, room // light, many + room // heavy)
                    continue
                per = light
            cap = min(cap, -1 if room < 0 else (room // per if per > 0 else num_layers))
        yield cap


def summed_caps(s: SharedTerms, c: Candidate, sums: Sums, num_layers: int, usable: int) -> Iterator[int]:
    """``layer_caps`` without chunks done (every chunk's gradients there), from each peak's ``prescreen.Sums``: a
    chunk's copy at the empty cut is ``acts.at(0, first, last)`` = const + emb·[chunk 0] + head·[the last chunk], so
    the peak's activations are const·Σx + emb·x₀ + head·x_last, and ``per_layer``'s least copies k its ``Sums``' (the
    same integers; ``tests/test_prescreen.py`` checks the caps against ``layer_caps`` class by class)."""
    zero = [0] * c.chunks
    moe = s.moe_prefix[-1] if s.moe_prefix is not None else 0
    fixed, _ = _empty_cut(s, c, zero)
    a, sl, sm = s.acts, s.states.layer, s.states.moe
    ac, ae, ah, al, am = a.const, a.emb, a.head, a.layer, a.moe
    for r in range(c.pp):
        states, buffers = fixed(r)
        base = usable - states - buffers
        cap = num_layers
        for sx, x0, xl, k in sums[r]:
            room = base - (ac * sx + ae * x0 + ah * xl)
            per = sl + k * al
            if moe:
                heavy = per + sm + k * am
                light, many = (per, num_layers - moe) if per <= heavy else (heavy, moe)
                if room >= 0 and light > 0:
                    cap = min(cap, room // light, many + room // heavy)
                    continue
                per = light
            cap = min(cap, -1 if room < 0 else (room // per if per > 0 else num_layers))
        yield cap


def summed_done_caps(s: SharedTerms, c: Candidate, sums: DoneSums, num_layers: int, usable: int) -> Iterator[int]:
    """``layer_caps`` with chunks done, from each peak's ``prescreen.DoneSums``: ``summed_caps``' activations, the
    pending gradients at the empty cut (``memory.pending_grads``: grads.at(0, chunk 0, the last chunk with a head of
    its own) of each chunk not done) and ``per_layer``'s least over the chunks not done and over the done ones, each
    term affine in a chunk's copies x: at the least x or the most, by the sign of its coefficient."""
    zero = [0] * c.chunks
    moe = s.moe_prefix[-1] if s.moe_prefix is not None else 0
    fixed, _ = _empty_cut(s, c, zero)
    a, g, sl, sm = s.acts, s.grads, s.states.layer, s.states.moe
    ac, ae, ah, al, am = a.const, a.emb, a.head, a.layer, a.moe
    gh = g.head if s.own_head(c) else 0
    for r in range(c.pp):
        states, buffers = fixed(r)
        base = usable - states - buffers
        cap = num_layers
        for sx, x0, xl, nleft, left0, left_last, groups in sums[r]:
            room = base - (ac * sx + ae * x0 + ah * xl)
            if nleft:
                room += g.const * nleft + (g.emb if left0 else 0) + (gh if left_last else 0)
            dense = heavy = None
            for pend, lo, hi in groups:
                d0 = sl - (g.layer if pend else 0)
                dv = d0 + (al * lo if al >= 0 else al * hi)
                hv = d0 + sm - (g.moe if pend else 0) + ((al + am) * lo if al + am >= 0 else (al + am) * hi)
                dense = dv if dense is None else min(dense, dv)
                heavy = hv if heavy is None else min(heavy, hv)
            assert dense is not None and heavy is not None
            per = dense
            if moe:
                light, many = (per, num_layers - moe) if per <= heavy else (heavy, moe)
                if room >= 0 and light > 0:
                    cap = min(cap, room // light, many + room // heavy)
                    continue
                per = light
            cap = min(cap, -1 if room < 0 else (room // per if per > 0 else num_layers))
        yield cap


def shape_caps(s: SharedTerms, c: Candidate, m: int, grads: bool, num_layers: int, usable: int) -> Iterator[int]:
    """``layer_caps`` at every peak of the class's schedule shape (``cost.class_peaks``: ``grads``, its chunks done
    count), from the shape's ``prescreen.shape_sums``."""
    sums = shape_sums(peak_schedule(s, c), c.pp, c.virtual_stages, m, grads)
    if grads:
        return summed_done_caps(s, c, sums, num_layers, usable)  # type: ignore[arg-type]
    return summed_caps(s, c, sums, num_layers, usable)  # type: ignore[arg-type]


def class_caps(cc: ClassCosts) -> Iterator[int]:
    """``layer_caps`` of a class's own peaks (``ClassCosts.live``, ``done``: ``cost.class_peaks``'), by
    ``shape_caps``."""
    return shape_caps(cc.shared, cc.cand, cc.m, cc.done is not None, cc.num_layers, cc.usable_bytes)


def per_layer(
    s: SharedTerms, own: range, vec: tuple[tuple[int, int], ...], d: tuple[int, ...] | None
) -> tuple[int, int]:
    """The least bytes a dense and a MoE layer of rank ``own``'s chunks cost at a peak ``vec`` (a chunk not in
    ``vec``: no copies alive): its states, less its gradients where its chunk's are not there yet (``d``), and its
    activations × the copies alive of its chunk."""
    if d is None:  # every chunk's gradients there: the least-copied chunk's layer (a chunk not alive: 0)
        k = min([x for _, x in vec]) if len(vec) == len(own) else 0
        one = s.states.layer + k * s.acts.layer
        return one, one + s.states.moe + k * s.acts.moe
    copies = dict(vec)
    g = s.grads
    dense, heavy = [], []
    for ch in own:
        x, pend = copies.get(ch, 0), d is not None and ch not in d
        a = s.states.layer - (g.layer if pend else 0) + x * s.acts.layer
        dense.append(a)
        heavy.append(a + s.states.moe - (g.moe if pend else 0) + x * s.acts.moe)
    return min(dense), min(heavy)


def _empty_cut(
    s: SharedTerms, c: Candidate, zero: list[int]
) -> tuple[Callable[[int], tuple[int, int]], Callable[[int], int]]:
    """``rank_states`` and ``rank_buffers`` of rank r and one copy of chunk ch's activations
    (``rank_activations``' term) at the empty cut ``zero``, by the same functions, memoised by what they read
    there: whether r is the first or the last rank, whether ch is the first or the last chunk (``layer_caps`` asks
    them of every rank of every class it screens)."""
    ranks: dict[tuple[bool, bool], tuple[int, int]] = {}
    chunks: dict[tuple[bool, bool], int] = {}
    last_rank, last_chunk, acts = c.pp - 1, c.chunks - 1, s.acts

    def fixed(r: int) -> tuple[int, int]:
        k = (r == 0, r == last_rank)
        hit = ranks.get(k)
        if hit is None:
            hit = ranks[k] = (rank_states(s, c, zero, r, zero), rank_buffers(s, c, r))
        return hit

    def per_chunk(ch: int) -> int:
        k = (ch == 0, ch == last_chunk)
        hit = chunks.get(k)
        if hit is None:
            hit = chunks[k] = acts.at(0, ch == 0, ch == last_chunk, 0)
        return hit

    return fixed, per_chunk


def kinds_fit(s: SharedTerms, c: Candidate, live: Live, num_layers: int, usable: int, done: Done | None = None) -> bool:
    """A model of two block kinds: whether the ranks' memories can hold each kind's layers, every rank at most
    ``room // per-layer bytes`` of a kind at each activation peak (its other layers only take more room): False only
    when no cut fits. True for a model of one kind."""
    if s.moe_prefix is None:
        return True
    zero = [0] * c.chunks
    need = {False: num_layers - s.moe_prefix[-1], True: s.moe_prefix[-1]}  # dense, MoE
    held = dict.fromkeys(need, 0)
    fixed, per_chunk = _empty_cut(s, c, zero)
    for r in range(c.pp):
        own = range(r, c.chunks, c.pp)
        states, buffers = fixed(r)
        base = usable - states - buffers
        caps = dict.fromkeys(need, num_layers)
        for i, vec in enumerate(live[r]):
            d = None if done is None else done[r][i]
            room = base - total([x * per_chunk(ch) for ch, x in vec])  # ``rank_activations`` at the empty cut
            if d is not None:
                room += pending_grads(s, c, zero, r, d, zero)
            dense, heavy = per_layer(s, own, vec, d)
            for moe, per in ((False, dense), (True, heavy)):
                caps[moe] = min(caps[moe], -1 if room < 0 else (room // per if per > 0 else num_layers))
        for moe in need:
            held[moe] += max(0, caps[moe])
    return all(held[moe] >= need[moe] for moe in need)


def caps_fit(caps: Iterable[int], v: int, num_layers: int) -> bool:
    """Whether every rank can hold its v chunks and all ranks the layers (stops at the first that cannot)."""
    held = 0
    for cap in caps:
        if cap < v:
            return False
        held += cap
    return held >= num_layers


def may_fit(cc: ClassCosts) -> bool:
    """False only when no cut of the class fits (``layer_caps``, ``kinds_fit``)."""
    s, c, L = cc.shared, cc.cand, cc.num_layers
    return caps_fit(class_caps(cc), c.virtual_stages, L) and kinds_fit(s, c, cc.live, L, cc.usable_bytes, cc.done)


def fits_at(cc: ClassCosts, n: list[int]) -> bool:
    """Whether the cut fits (exact)."""
    return max(rank_memory(cc, n, r) for r in range(cc.cand.pp)) <= cc.usable_bytes


def interleaved_peak_copies(p: int, v: int, m: int, i: int, all_warmup: bool) -> int:
    """Chunk activations alive at rank i's peak under the interleaved order (its warm-up
    2(p − i − 1) + (v − 1)p forwards, then one more before the first backward; all m·v when m = p in Megatron's,
    ``all_warmup``, not in torch's nor Megatron-core's since 2024-11: ``compose.pp_order``)."""
    total = m * v
    warm = interleaved_warmup(p, v, m, i, all_warmup)
    return total if warm == total else warm + 1


def quick_may_fit(ctx: Context, c: Candidate, cut: list[int] | None = None) -> bool:
    """``may_fit`` without building the class. One chunk per rank: the same function (closed-form
    activation copies: GPipe m, 1F1B min(p − i, m)). With ``cut`` (a class's one allowed cut, e.g.
    an even-only stack's split): False only when that cut cannot fit — every rank's states and
    buffers plus its peak chunk copies (``interleaved_peak_copies``) × the smallest chunk's layer
    activations, the embedding/LM-head activations left out (a lower bound of ``rank_memory``).
    Without a cut: ``may_fit``'s screen (every rank's v chunks, the L layers within the ranks' ``layer_caps``), for
    an interleaved model of one block kind after this one at one layer per chunk (a lower bound of every cut's:
    each term grows with the layers)."""
    if cut is None:  # asked twice of a class (the frontier before its quick bound, the search): memoised; first the
        # screen of its states alone, shared by its recompute modes (``bare_screen``: most classes ruled out)
        hit = ctx.may_fit.get(c)  # by the class itself (its hash kept), then by what the screen reads
        if hit is None:
            k = screen_key(ctx, c)
            hit = ctx.may_fit.get(k)
            if hit is None:
                hit = ctx.may_fit[k] = bare_may_fit(ctx, c, k) and _quick_may_fit(ctx, c, None)
            ctx.may_fit[c] = hit
        return hit
    # at a cut, memoised by the class and the cut: a one-cut class is asked by the frontier and again by the search
    # (DeepSeek-V3 on 2,048 H100: 1,223 screens of one-stage classes, 612 of them repeats)
    k = (c, tuple(cut))
    hit = ctx.may_fit.get(k)
    if hit is None:
        hit = ctx.may_fit[k] = _quick_may_fit(ctx, c, cut)
    return hit


#: Every field of a class but its CP exchange (``Candidate``'s, as ``cost._FIELDS`` has them)
NOT_CP_COMM = attrgetter(*(f.name for f in fields(Candidate) if f.name != "cp_comm"))


def screen_key(ctx: Context, c: Candidate) -> tuple:
    """``quick_may_fit``'s memo key without a cut: the class's fields but its CP exchange, and the bytes that exchange
    holds (``memory_class_terms``' ``cp_tmp``, the one term of it the exchange changes; no screen reads ``cp_comm``
    otherwise), so the exchanges of one class share one screen where they hold the same (Llama 3 405B at 131K tokens:
    5,990 screens of 3,600 such keys). ``tests/test_prescreen.py`` checks each verdict against the class's own. The bytes
    as ``memory_class_terms`` sets them (``ring_buffer_bytes``; 0 without CP), without its terms."""
    return (*NOT_CP_COMM(c), ring_buffer_bytes(ctx, c))


def warm_rules_out(s: SharedTerms, c: Candidate, m: int, num_layers: int, usable: int) -> bool:
    """Whether an interleaved class's ``layer_caps`` at each rank's warm-up peak alone (``prescreen.warm_sums``) fail
    ``caps_fit``: then the full screen's do too (``prescreen``'s docstring)."""
    if c.virtual_stages == 1 or c.schedule != "interleaved-1f1b" or m % c.pp:
        return False
    grads = s.grads != NOTHING  # ``cost.class_peaks``: the chunks done count
    sums = warm_sums(c.pp, c.virtual_stages, m, grads, s.all_warmup)
    if grads:
        caps = summed_done_caps(s, c, sums, num_layers, usable)  # type: ignore[arg-type]
    else:
        caps = summed_caps(s, c, sums, num_layers, usable)  # type: ignore[arg-type]
    return not caps_fit(caps, c.virtual_stages, num_layers)


def _quick_may_fit(ctx: Context, c: Candidate, cut: list[int] | None) -> bool:
    s, m, usable = memory_class_terms(ctx, c), num_microbatches(ctx, c), ctx.usable_bytes  # no time priced
    if cut is None:
        if c.virtual_stages > 1 and s.moe_prefix is None and not cut_fits(s, c, m, usable, [1] * c.chunks, ONES):
            return False  # not even one layer per chunk fits (one block kind: every cut needs more memory)
        if warm_rules_out(s, c, m, ctx.model.num_layers, usable):
            return False  # at each rank's warm-up peak alone (``prescreen.warm_sums``: its peaks never walked)
        (live, done), L = class_peaks(s, c, m), ctx.model.num_layers
        key = (peak_schedule(s, c), c.pp, c.virtual_stages, m, done is None)
        if len(live[0]) > 1:  # first at each rank's heaviest peak alone (``prescreen``: rules out no more)
            top, top_done = heaviest(ctx, live, done, key)
            if top_done is None:
                top_caps = summed_caps(s, c, peak_sums(ctx, top, c.chunks, ("top", *key)), L, usable)
            else:
                top_caps = summed_done_caps(s, c, done_sums(ctx, top, top_done, c.chunks, ("top", *key)), L, usable)
            if not caps_fit(top_caps, c.virtual_stages, L):
                return False
        caps = shape_caps(s, c, m, done is not None, L, usable)
        return caps_fit(caps, c.virtual_stages, L) and kinds_fit(s, c, live, L, usable, done)
    return cut_fits(s, c, m, usable, cut)


#: ``cut_fits``' ranks at the cut of one layer a chunk: the first, the second, the last but one and the last
ONES = (0, 1, -2, -1)


def cut_fits(
    s: SharedTerms, c: Candidate, m: int, usable: int, cut: list[int], ranks: tuple[int, ...] | None = None
) -> bool:
    """``quick_may_fit`` at a cut: every rank's lower bound of ``rank_memory`` within ``usable``. ``ranks``: only
    those (negative: from the last), for the cut of one layer a chunk of an interleaved class of one block kind
    (``ONES``): there every rank between the first and the last has the same states, pending gradients and buffers
    (they read only whether the rank is the first or the last, and its chunks' layers: v each), and its peak copies
    (``interleaved_peak_copies``) do not grow with r, so its bound, linear in them, is largest at rank 1 or pp − 2.
    ``tests/test_prescreen.py`` checks it against every rank's."""
    k = chunk_moe(s, cut, None)
    for r in range(c.pp) if ranks is None else sorted({x % c.pp for x in ranks}):
        copies = (
            interleaved_peak_copies(c.pp, c.virtual_stages, m, r, s.all_warmup)
            if c.virtual_stages > 1
            else live_vectors_cached(c.schedule, c.pp, 1, m)[r][0][0][1]
        )  # its one peak: ((r, copies),)
        # the rank's gradients that exist only from a backward on left out: its first peak of most copies may precede
        # every backward (``memory.pending_grads``)
        grads = pending_grads(s, c, cut, r, (), k)
        least = copies * min(cut[r :: c.pp]) * s.acts.least_layer
        if rank_states(s, c, cut, r) - grads + least + rank_buffers(s, c, r) > usable:
            return False
    return True
