"""The memory screen of a class's states and buffers alone, which no recompute mode changes: memoised across the
modes, it rules out at once the modes of a class after the first (``screens.quick_may_fit`` asks it first). The
fourth mode, Megatron-core's ``layernorm+moe_act`` (``compose.recompute_modules``), added a third more classes to
screen on a MoE model; most classes its memory rules out, its states alone do.
"""

from __future__ import annotations

from dataclasses import fields

from planner.compose.context import Context
from planner.compose.context_parallel import memory_class_terms
from planner.compose.cost import Candidate
from planner.compose.memory import rank_buffers
from planner.compose.terms import SharedTerms

#: ``screens.screen_key``'s place of the recompute mode (``NOT_CP_COMM``'s fields, then the CP exchange's bytes)
_RECOMPUTE = [f.name for f in fields(Candidate) if f.name != "cp_comm"].index("recompute")


def bare_may_fit(ctx: Context, c: Candidate, key: tuple) -> bool:
    """A screen of the class's states and buffers alone: False only when no cut fits even with no activation saved,
    every gradient still to come and no recomputation buffer — a rank's ``memory.peaks`` are ``states − pending +
    activations + buffers``, and ``pending_grads`` ≤ all of its v chunks' gradients (each ≥ 0) — so the class's
    own screen rules it out too (``layer_caps``, valid for any terms, on those at one peak of no copies alive:
    ``bare_fit``). Those terms read no recompute mode (``layer_group``: the parameters; the buffers but the
    rematerialised layer's), so the verdict is memoised without it (``key``: ``screens.screen_key``): the other modes
    of a class its states rule out (DeepSeek-V3 on 2,048 H100: 94% of the classes ruled out, a fourth of them
    ``layernorm+moe_act``'s) skip their memory terms and screen. ``tests/test_bare_screen.py`` checks the terms
    equal across modes and each verdict against the class's own screen."""
    k = ("bare", *key[:_RECOMPUTE], *key[_RECOMPUTE + 1 :])
    hit = ctx.may_fit.get(k)
    if hit is None:
        hit = ctx.may_fit[k] = bare_fit(memory_class_terms(ctx, c), c, ctx.model.num_layers, ctx.usable_bytes)
    return hit


def bare_fit(s: SharedTerms, c: Candidate, num_layers: int, usable: int) -> bool:
    """``caps_fit`` and ``kinds_fit`` of ``layer_caps`` at one peak of no copies alive on ``s`` less its activations,
    its recomputation buffer and all its gradients (``grads``' constant per chunk: v on a rank, as ``pending_grads``
    counts it; the states' once), in closed form: a rank's room is the same for every rank but the first and the
    last (what ``rank_states`` and ``rank_buffers`` read at the empty cut), each cap ``layer_caps``' at that room.
    ``tests/test_bare_screen.py`` checks it against those functions on such terms."""
    st, g, v, pp, L = s.states, s.grads, c.virtual_stages, c.pp, num_layers
    moe = s.moe_prefix[-1] if s.moe_prefix is not None else 0
    dense = st.layer - g.layer
    heavy = dense + st.moe - g.moe
    base = usable - (st.const - v * g.const) + s.recompute_tmp  # ``rank_buffers`` less the rematerialised layer
    caps, held = 0, {False: 0, True: 0}
    head = s.own_head(c)
    for r, n in ((0, 1), (1, pp - 2), (pp - 1, 1)) if pp > 1 else ((0, 1),):
        if n <= 0:
            continue
        room = base - rank_buffers(s, c, r) - (st.emb - g.emb if r == 0 else 0)
        room -= st.head - g.head if r == pp - 1 and head else 0
        if moe:
            light, many = (dense, L - moe) if dense <= heavy else (heavy, moe)
            if room >= 0 and light > 0:
                cap = min(L, room // light, many + room // heavy)
            else:
                cap = min(L, -1 if room < 0 else (room // light if light > 0 else L))
            for kind, per in ((False, dense), (True, heavy)):  # ``kinds_fit``
                held[kind] += n * max(0, min(L, -1 if room < 0 else (room // per if per > 0 else L)))
        else:
            cap = min(L, -1 if room < 0 else (room // dense if dense > 0 else L))
        if cap < v:
            return False
        caps += n * cap
    return caps >= L and (not moe or (held[False] >= L - moe and held[True] >= moe))
