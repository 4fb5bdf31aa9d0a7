"""Memory screens that never drop a class with a fitting cut, built from the class's ``terms.SharedTerms`` with
the cost model's own functions (``memory.memory_terms``): what each rank's memory can hold (``layer_caps``), whether
any cut of a class may fit (``may_fit``, ``quick_may_fit``) and whether one does (``fits_at``). Re-exported by
``planner.search.bounds``; ``tests/test_planner_exact.py`` checks them against the brute force.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from planner.compose.affine import total
from planner.compose.context import Context
from planner.compose.context_parallel import memory_class_terms
from planner.compose.cost import Candidate, ClassCosts, Live, live_vectors_cached, num_microbatches
from planner.compose.memory import rank_buffers, rank_memory, rank_states
from planner.compose.terms import SharedTerms


def layer_caps(s: SharedTerms, c: Candidate, live: Live, num_layers: int, usable: int) -> Iterator[int]:
    """Per rank, an upper bound of the layers its memory can hold (exact for one chunk per rank):
    at each activation peak, every chunk of the rank keeps at least ``kmin`` copies."""
    zero = [0] * c.chunks
    moe = s.moe_prefix[-1] if s.moe_prefix is not None else 0  # a model of two block kinds: its MoE layers
    fixed, per_chunk = _empty_cut(s, c, zero)
    v = c.virtual_stages  # the chunks of each rank (``range(r, chunks, pp)``)
    s_layer, a_layer, s_moe, a_moe = s.states.layer, s.acts.layer, s.states.moe, s.acts.moe
    for r in range(c.pp):
        states, buffers = fixed(r)
        base = usable - states - buffers
        cap = num_layers
        for vec in live[r]:
            if len(vec) == 1:  # one chunk alive (every peak of one chunk per rank): as below, written out
                ((ch, x),) = vec
                room, kmin = base - x * per_chunk(ch), x if v == 1 else 0
            else:
                room = base - sum([x * per_chunk(ch) for ch, x in vec])  # ``rank_activations`` at the empty cut
                kmin = min([k for _, k in vec]) if len(vec) == v else 0  # a chunk of the rank not alive: 0
            per = s_layer + kmin * a_layer
            if moe:  # the lighter kind's layers at most all of them, the heavier ones within the room
                heavy = per + s_moe + kmin * a_moe
                light, many = (per, num_layers - moe) if per <= heavy else (heavy, moe)
                if room >= 0 and light > 0:
                    cap = min(cap, room // light, many + room // heavy)
                    continue
                per = light
            cap = min(cap, -1 if room < 0 else (room // per if per > 0 else num_layers))
        yield cap


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


def kinds_fit(s: SharedTerms, c: Candidate, live: Live, num_layers: int, usable: int) -> bool:
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
        for vec in live[r]:
            room = base - total([x * per_chunk(ch) for ch, x in vec])  # ``rank_activations`` at the empty cut
            kmin = min([k for _, k in vec]) if len(vec) == len(own) else 0
            dense = s.states.layer + kmin * s.acts.layer
            for moe, per in ((False, dense), (True, dense + s.states.moe + kmin * s.acts.moe)):
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
    return caps_fit(layer_caps(s, c, cc.live, L, cc.usable_bytes), c.virtual_stages, L) and kinds_fit(
        s, c, cc.live, L, cc.usable_bytes
    )


def fits_at(cc: ClassCosts, n: list[int]) -> bool:
    """Whether the cut fits (exact)."""
    return max(rank_memory(cc, n, r) for r in range(cc.cand.pp)) <= cc.usable_bytes


def interleaved_peak_copies(p: int, v: int, m: int, i: int) -> int:
    """Chunk activations alive at rank i's peak under Megatron's interleaved order (its warm-up
    2(p − i − 1) + (v − 1)p forwards, then one more before the first backward; all m·v when m = p)."""
    total = m * v
    warm = total if m == p else min(2 * (p - i - 1) + (v - 1) * p, total)
    return total if warm == total else warm + 1


def quick_may_fit(ctx: Context, c: Candidate, cut: list[int] | None = None) -> bool:
    """``may_fit`` without building the class. One chunk per rank: the same function (closed-form
    activation copies: GPipe m, 1F1B min(p − i, m)). With ``cut`` (a class's one allowed cut, e.g.
    interleaved's uniform split): False only when that cut cannot fit — every rank's states and
    buffers plus its peak chunk copies (``interleaved_peak_copies``) × the smallest chunk's layer
    activations, the embedding/LM-head activations left out (a lower bound of ``rank_memory``).
    Interleaved without a cut: True (unknown: cost it)."""
    if c.virtual_stages > 1 and cut is None:
        return True
    if cut is None:  # asked twice of a class (the frontier before its quick bound, the search): memoised
        hit = ctx.may_fit.get(c)
        if hit is None:
            hit = ctx.may_fit[c] = _quick_may_fit(ctx, c, None)
        return hit
    return _quick_may_fit(ctx, c, cut)


def _quick_may_fit(ctx: Context, c: Candidate, cut: list[int] | None) -> bool:
    s, m, usable = memory_class_terms(ctx, c), num_microbatches(ctx, c), ctx.usable_bytes  # no time priced
    if cut is None:
        live, L = live_vectors_cached(c.schedule, c.pp, 1, m), ctx.model.num_layers
        return caps_fit(layer_caps(s, c, live, L, usable), 1, L) and kinds_fit(s, c, live, L, usable)
    for r in range(c.pp):
        copies = (
            interleaved_peak_copies(c.pp, c.virtual_stages, m, r)
            if c.virtual_stages > 1
            else live_vectors_cached(c.schedule, c.pp, 1, m)[r][0][0][1]
        )  # its one peak: ((r, copies),)
        if (
            rank_states(s, c, cut, r) + copies * min(cut[r :: c.pp]) * s.acts.least_layer + rank_buffers(s, c, r)
            > usable
        ):
            return False
    return True
