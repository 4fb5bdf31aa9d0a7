"""``search.bare_screen``: the screen of a class's states and buffers alone, memoised across recompute modes, against
the computation it stands for — ``screens.layer_caps``/``caps_fit``/``kinds_fit`` on the class's terms less their
activations, recomputation buffer and gradients (the former path, kept here) — and ``quick_may_fit`` with it first
against the class's own screen alone (``screens._quick_may_fit``), class by class: dense, MoE (with
``layernorm+moe_act``), windowed MoE, MLA + dense and MoE layers, context parallel."""

from __future__ import annotations

from dataclasses import replace

import pytest

import planner.search.screens as screens
from planner.answer.request import context
from planner.compose.affine import NOTHING, Affine
from planner.compose.context_parallel import memory_class_terms
from planner.compose.cost import Candidate
from planner.compose.recompute_modules import MODULES
from planner.compose.terms import SharedTerms
from planner.search.bare_screen import bare_fit
from planner.search.space import enumerate_candidates
from tests.plan_support import search_request

REQUESTS = [
    ("deepseek-v3", "h100-sxm5-80gb", 256, 8, 15360, 4096, {"stack": "megatron"}, 13),
    ("mixtral-8x22b", "h100-sxm5-80gb", 16, 8, 256, 4096, {"stack": "megatron"}, 3),
    ("gpt-oss-120b", "h100-sxm5-80gb", 8, 8, 512, 4096, {"stack": "megatron"}, 3),
    ("llama3-70b", "h100-sxm5-80gb", 8, 8, 1024, 8192, {}, 3),
    ("llama3.1-8b", "h100-sxm5-80gb", 2, 8, 8, 65536, {"stack": "torchtitan"}, 1),
]


def reference(s: SharedTerms, c: Candidate, num_layers: int, usable: int) -> bool:
    """The bare screen by the screens' own functions: ``s`` with no activations, no recomputation buffer, its states
    less every gradient (the constant per chunk: v on a rank), at one peak of no copies alive."""
    st, g, v = s.states, s.grads, c.virtual_stages
    states = Affine(st.const - v * g.const, st.layer - g.layer, st.emb - g.emb, st.head - g.head, st.moe - g.moe)
    bare = replace(s, states=states, grads=NOTHING, acts=NOTHING, recompute_tmp=0)
    live = tuple((tuple((ch, 0) for ch in range(r, c.chunks, c.pp)),) for r in range(c.pp))
    caps = screens.layer_caps(bare, c, live, num_layers, usable)
    return screens.caps_fit(caps, v, num_layers) and screens.kinds_fit(bare, c, live, num_layers, usable)


def read(s: SharedTerms) -> tuple:
    """What ``bare_fit`` reads of the terms (``rank_buffers`` less ``recompute_tmp``)."""
    return (s.states, s.grads, s.moe_prefix, s.z3_tmp, s.p2p_bytes, s.logits_fp32, s.cp_tmp, s.tie_embeddings)


@pytest.mark.parametrize("spec", REQUESTS, ids=lambda s: s[0])
def test_bare_screen(spec: tuple) -> None:
    model, gpu, nodes, gpn, gbs, seq, extra, step = spec
    req = search_request(model, gpu, nodes, gpn, gbs, seq, extra)
    ctx = context(req)
    cands = enumerate_candidates(ctx, req.parallel, req.options)
    modes = sorted({c.recompute for c in cands})
    L, usable = ctx.model.num_layers, ctx.usable_bytes
    verdicts = []
    for c in cands[::step]:
        s = memory_class_terms(ctx, c)
        bare = bare_fit(s, c, L, usable)
        assert bare == reference(s, c, L, usable), c
        own = screens._quick_may_fit(ctx, c, None)
        assert bare or not own, c  # the bare screen never rules out a class its own screen keeps
        assert screens.quick_may_fit(ctx, c) == own, c  # the same verdict with it first (memoised across modes)
        for m in modes:  # what it reads is every recompute mode's
            t = memory_class_terms(ctx, c.variant(recompute=m))
            assert read(t) == read(s) and bare_fit(t, c.variant(recompute=m), L, usable) == bare, (c, m)
        verdicts.append((bare, own))
    assert {b for b, _ in verdicts} == {True, False} or model == "llama3.1-8b"
    if model == "llama3.1-8b":
        assert any(c.cp > 1 for c in cands)
    if model in ("deepseek-v3", "mixtral-8x22b"):
        assert MODULES in modes
