"""``search.prescreen``: ``quick_may_fit`` with its first pass at each rank's heaviest peak gives the same verdict
as the full screen alone, class by class (interleaved and 1F1B/GPipe classes with several peaks, dense and MoE)."""

from __future__ import annotations

import pytest

import planner.search.screens as screens
from planner.answer.request import context
from planner.search.space import enumerate_candidates
from planner.specs import PlanRequest
from tests.plan_support import search_request

REQUESTS = [
    ("llama3-70b", "h100-sxm5-80gb", 8, 8, 1024, 8192, {}),
    ("llama3-8b", "h100-sxm5-80gb", 1, 8, 256, 8192, {"stack": "torchtitan"}),
    ("mixtral-8x22b", "h100-sxm5-80gb", 16, 8, 256, 4096, {"stack": "megatron"}),
]


@pytest.mark.parametrize("spec", REQUESTS, ids=lambda s: s[0])
def test_prescreen_same_verdict(spec: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    model, gpu, nodes, gpn, gbs, seq, extra = spec
    req = search_request(model, gpu, nodes, gpn, gbs, seq, extra)
    ctx = context(req)
    cands = [c for c in enumerate_candidates(ctx, req.parallel, req.options) if c.pp > 1][::3]
    with_pre = [screens._quick_may_fit(ctx, c, None) for c in cands]
    monkeypatch.setattr(screens, "heaviest", lambda ctx, live, done, key: (live, done))  # the full screen twice
    without = [screens._quick_may_fit(ctx, c, None) for c in cands]
    assert with_pre == without
    assert 0 < sum(with_pre) < len(cands)  # both verdicts occur


def test_heaviest_peaks_live_on_the_request_context() -> None:
    """The heaviest peaks are memoised on the request's ``Context`` (``top_peaks``), not in the process: a new
    request's context starts empty, and the module keeps no cache of its own."""
    import planner.search.prescreen as prescreen

    def ctx_of() -> object:
        req = PlanRequest.model_validate(
            {
                "model": "llama3-70b",
                "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 8, "gpus_per_node": 8},
                "training": {"global_batch_size": 1024, "seq_len": 8192},
            }
        )
        return context(req), req

    ctx, req = ctx_of()
    for c in [c for c in enumerate_candidates(ctx, req.parallel, req.options) if c.virtual_stages > 1][:200]:
        screens.quick_may_fit(ctx, c)
    assert ctx.top_peaks  # type: ignore[attr-defined]
    assert not ctx_of()[0].top_peaks  # type: ignore[attr-defined]
    assert not [k for k, v in vars(prescreen).items() if isinstance(v, dict) and not k.startswith("__")]


SUMMED = [
    *REQUESTS,
    ("deepseek-v3", "h100-sxm5-80gb", 32, 8, 1920, 4096, {"stack": "megatron"}),  # dense + MoE layers
    ("gpt3-175b", "a100-sxm4-80gb", 8, 8, 512, 2048, {}),
]


@pytest.mark.parametrize("spec", SUMMED, ids=lambda s: s[0])
def test_summed_caps_are_layer_caps(spec: tuple) -> None:
    """``screens.summed_caps`` (from ``prescreen.peak_sums``) gives ``layer_caps``' caps, rank by rank, at every peak
    set and at the heaviest peaks alone, on every class without chunks done."""
    from planner.compose.context_parallel import memory_class_terms
    from planner.compose.cost import class_peaks, num_microbatches
    from planner.search.prescreen import heaviest, peak_sums

    model, gpu, nodes, gpn, gbs, seq, extra = spec
    req = search_request(model, gpu, nodes, gpn, gbs, seq, extra)
    ctx = context(req)
    checked = 0
    for c in enumerate_candidates(ctx, req.parallel, req.options)[::7]:
        s, m = memory_class_terms(ctx, c), num_microbatches(ctx, c)
        live, done = class_peaks(s, c, m)
        if done is not None:
            continue
        key = (c.schedule, c.pp, c.virtual_stages, m, True)
        L = ctx.model.num_layers
        for u in (ctx.usable_bytes, ctx.usable_bytes // 3, 4 * ctx.usable_bytes):
            want = list(screens.layer_caps(s, c, live, L, u))
            assert list(screens.summed_caps(s, c, peak_sums(ctx, live, c.chunks, key), L, u)) == want
            top, _ = heaviest(ctx, live, None, key)
            want = list(screens.layer_caps(s, c, top, L, u))
            assert list(screens.summed_caps(s, c, peak_sums(ctx, top, c.chunks, ("top", *key)), L, u)) == want
        checked += 1
    assert checked > 50


DONE = [
    (
        "llama3-70b",
        "h100-sxm5-80gb",
        8,
        8,
        1024,
        8192,
        {"precision": "fp8", "fp8_recipe": "tensorwise", "stack": "torchtitan"},
    ),
    ("llama3-8b", "h100-sxm5-80gb", 1, 8, 256, 8192, {"stack": "torchtitan"}),
    ("llama3-8b", "h100-sxm5-80gb", 2, 8, 512, 4096, {"stack": "torchtitan"}),
    ("llama4-maverick", "h100-sxm5-80gb", 8, 8, 512, 4096, {"stack": "torchtitan"}),  # dense + MoE layers
]


@pytest.mark.parametrize("spec", DONE, ids=lambda s: f"{s[0]}-{s[4]}")
def test_summed_done_caps_are_layer_caps(spec: tuple) -> None:
    """``screens.summed_done_caps`` (from ``prescreen.done_sums``) gives ``layer_caps``' caps on every class whose
    gradients exist only from a chunk's first backward (torchtitan's FSDP2), at every peak set and the heaviest."""
    from planner.compose.context_parallel import memory_class_terms
    from planner.compose.cost import class_peaks, num_microbatches
    from planner.search.prescreen import done_sums, heaviest

    model, gpu, nodes, gpn, gbs, seq, extra = spec
    extra = {k: v for k, v in extra.items() if v is not None}
    req = search_request(model, gpu, nodes, gpn, gbs, seq, extra)
    ctx = context(req)
    checked = 0
    for c in enumerate_candidates(ctx, req.parallel, req.options)[::5]:
        s, m = memory_class_terms(ctx, c), num_microbatches(ctx, c)
        live, done = class_peaks(s, c, m)
        if done is None:
            continue
        key = (c.schedule, c.pp, c.virtual_stages, m, False)
        L = ctx.model.num_layers
        for u in (ctx.usable_bytes, ctx.usable_bytes // 3, 4 * ctx.usable_bytes):
            want = list(screens.layer_caps(s, c, live, L, u, done))
            assert list(screens.summed_done_caps(s, c, done_sums(ctx, live, done, c.chunks, key), L, u)) == want
            top, top_done = heaviest(ctx, live, done, key)
            assert top_done is not None
            want = list(screens.layer_caps(s, c, top, L, u, top_done))
            got = screens.summed_done_caps(s, c, done_sums(ctx, top, top_done, c.chunks, ("top", *key)), L, u)
            assert list(got) == want
        checked += 1
    assert checked > 50


@pytest.mark.parametrize("spec", [*SUMMED[:3], *DONE[::2]], ids=lambda s: f"{s[0]}-{s[4]}")
def test_class_caps_are_layer_caps(spec: tuple) -> None:
    """``screens.class_caps`` (a shape's ``prescreen.shape_sums``) gives ``layer_caps`` of the class's own peaks, on
    costed classes (``ClassCosts``) with and without chunks done."""
    from planner.compose.cost import class_costs

    model, gpu, nodes, gpn, gbs, seq, extra = spec
    req = search_request(model, gpu, nodes, gpn, gbs, seq, extra)
    ctx = context(req)
    cands = enumerate_candidates(ctx, req.parallel, req.options)
    for c in cands[:: max(1, len(cands) // 40)]:
        cc = class_costs(ctx, c)
        want = list(screens.layer_caps(cc.shared, c, cc.live, cc.num_layers, cc.usable_bytes, cc.done))
        assert list(screens.class_caps(cc)) == want


WARM_SHAPES = [(pp, v, m) for pp in (1, 2, 3, 4, 8) for v in (2, 3, 4, 7) for m in (pp, 2 * pp, 3 * pp, 8 * pp)]


@pytest.mark.parametrize("shape", WARM_SHAPES)
def test_warm_peak_is_a_walk_state(shape: tuple[int, int, int]) -> None:
    """``prescreen.warm_peaks``' closed form is a state of every rank's walk (``peak_walk.walk_states``): an
    activation peak (seen, copies) and, with no chunk done, a peak of the walk with its chunks done. So its caps are
    at least the full screen's (it is one of the peaks, or dominated by one)."""
    from planner.compose.peak_walk import walk_states
    from planner.search.prescreen import warm_peaks

    pp, v, m = shape
    live, done = warm_peaks(pp, v, m, True)
    for r in range(pp):
        with_done, acts = walk_states("interleaved-1f1b", pp, v, m, r)
        ((vec,),), ((d,),) = (live[r],), (done[r],)
        assert d == ()
        counts = [0] * v
        for ch, x in vec:
            assert ch % pp == r and x > 0
            counts[ch // pp] = x
        seen = tuple(j for j in range(v) if counts[j])
        assert (seen, tuple(counts)) in acts
        assert (seen, tuple(counts), ()) in with_done
        assert sum(counts) == screens.interleaved_peak_copies(pp, v, m, r, True)


WARM_REQUESTS = [
    ("llama3-405b", "h100-sxm5-80gb", 2048, 8, 128, 131072, {}),  # CP classes, memory binds
    ("llama3-70b", "h100-sxm5-80gb", 8, 8, 1024, 8192, {}),
    ("llama3-405b", "h100-sxm5-80gb", 64, 8, 64, 32768, {"stack": "torchtitan"}),  # chunks done; torch's ring
]


def _ctx_cands(spec: tuple) -> tuple:
    model, gpu, nodes, gpn, gbs, seq, extra = spec
    req = search_request(model, gpu, nodes, gpn, gbs, seq, extra)
    ctx = context(req)
    return ctx, enumerate_candidates(ctx, req.parallel, req.options)


@pytest.mark.parametrize("spec", WARM_REQUESTS, ids=lambda s: s[0])
def test_warm_prescreen_same_verdict(spec: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    """``screens.warm_rules_out`` (the first pass at the warm-up peaks) leaves every interleaved class's verdict as
    the screen without it gives, and rules some out."""
    ctx, cands = _ctx_cands(spec)
    cands = [c for c in cands if c.virtual_stages > 1][::5]
    with_warm = [screens._quick_may_fit(ctx, c, None) for c in cands]
    ruled = sum(screens.warm_rules_out(screens.memory_class_terms(ctx, c), c, *_m_l_u(ctx, c)) for c in cands)
    monkeypatch.setattr(screens, "warm_rules_out", lambda *a: False)
    without = [screens._quick_may_fit(ctx, c, None) for c in cands]
    assert with_warm == without
    assert ruled > 0 or all(with_warm)


def _m_l_u(ctx: object, c: object) -> tuple[int, int, int]:
    from planner.compose.cost import num_microbatches

    return num_microbatches(ctx, c), ctx.model.num_layers, ctx.usable_bytes  # type: ignore[attr-defined]


@pytest.mark.parametrize("spec", WARM_REQUESTS, ids=lambda s: s[0])
def test_screen_shared_across_cp_exchanges(spec: tuple) -> None:
    """``quick_may_fit``'s memo by ``screens.screen_key`` (the CP exchanges of a class holding the same bytes share a
    verdict) answers each class as its own screen does."""
    ctx, cands = _ctx_cands(spec)
    cands = [c for c in cands if c.pp > 1][::3]
    shared = [screens.quick_may_fit(ctx, c) for c in cands]
    assert shared == [screens._quick_may_fit(ctx, c, None) for c in cands]
    # the key's bytes (``ring_buffer_bytes``) are the ones the class's memory terms hold (the key as it was built)
    former = [(*screens.NOT_CP_COMM(c), screens.memory_class_terms(ctx, c).cp_tmp if c.cp > 1 else 0) for c in cands]
    assert [screens.screen_key(ctx, c) for c in cands] == former
    if spec is WARM_REQUESTS[0]:  # Megatron's exchanges hold no bytes of their own: p2p and all-gather share
        assert len({screens.screen_key(ctx, c) for c in cands}) < len(cands)


@pytest.mark.parametrize("spec", WARM_REQUESTS, ids=lambda s: s[0])
def test_one_layer_a_chunk_at_four_ranks(spec: tuple) -> None:
    """``screens.cut_fits`` at the cut of one layer a chunk checked at ranks 0, 1, pp − 2, pp − 1 (``ONES``) gives
    every rank's verdict, on every interleaved class of one block kind (the former loop over all ranks)."""
    ctx, cands = _ctx_cands(spec)
    seen = set()
    both = 0
    for c in cands:
        s = screens.memory_class_terms(ctx, c)
        m, _, usable = _m_l_u(ctx, c)
        if c.virtual_stages == 1 or s.moe_prefix is not None:
            continue
        ones = [1] * c.chunks
        four = screens.cut_fits(s, c, m, usable, ones, screens.ONES)
        assert four == screens.cut_fits(s, c, m, usable, ones)
        seen.add(four)
        both += c.pp > 4
    assert seen == {True, False} and both > 0
