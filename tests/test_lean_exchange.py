"""``lean.exchange_floor``: the CP exchange's least F + B per layer over the exchanges a class may use, added to
``lean_bound``'s layer weights. Checked against the computation it stands for, class by class: the exchange each CP
class itself pays (``context_parallel.class_terms`` adds ``ns`` of ``cp_exposed`` to every layer), brute-forced as the
least over the enumerated classes of the same (mbs, tp, cp, recompute); and the bound it tightens stays below the
quick bound that replaces it (so below the class's objective: ``tests/test_planner_exact.py``)."""

from __future__ import annotations

import random

import pytest

from planner.compose.context_parallel import class_terms, cp_exposed
from planner.compose.layer_group import ns
from planner.search import lean, space
from planner.search.bounds import lean_bound, quick_bound
from planner.search.space import enumerate_candidates
from planner.specs import ParallelPins, SearchOptions
from tests.test_planner_cp import floor_instance


@pytest.mark.parametrize("seed", range(12))
def test_the_exchange_floor_is_the_least_exchange_and_the_lean_bound_stays_below_the_quick_bound(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(space, "CP_MIN_SEQ", 0)  # CP at every length: the whole space
    ctx = floor_instance(seed)
    cands = enumerate_candidates(ctx, ParallelPins(), SearchOptions())
    # brute force: the least exchange (forward + backward ns per layer) a class of each (mbs, tp, cp, recompute) pays
    least: dict[tuple, int] = {}
    for c in cands:
        if c.cp > 1:
            f, b = cp_exposed(ctx, c)
            k = (c.micro_batch_size, c.tp, c.cp, c.recompute)
            least[k] = min(least.get(k, ns(f) + ns(b)), ns(f) + ns(b))
    rng = random.Random(seed)
    tighter = 0
    for c in rng.sample(cands, min(400, len(cands))):
        e = lean.exchange_floor(ctx, c)
        if c.cp == 1:
            assert e == 0
        else:
            assert e == least[(c.micro_batch_size, c.tp, c.cp, c.recompute)], c
            s = class_terms(ctx, c)  # the class's own layer weight holds at least it on top of the layer group's
            w, wm, *_ = lean.lean_weights(ctx, c, False)
            assert w <= s.fwd.layer + s.bwd.layer and wm <= s.fwd.moe_layer + s.bwd.moe_layer, c
        got = lean_bound(ctx, c)
        assert got <= quick_bound(ctx, c), c
        with monkeypatch.context() as m:  # the bound it replaces (no exchange): never above it
            m.setattr(lean, "exchange_floor", lambda ctx, c: 0)
            before = lean_bound(ctx, c)
        assert before <= got
        tighter += before < got
    if least:
        assert tighter > 0  # it tightens the CP classes' first keys


@pytest.mark.parametrize(
    "model,stack,nodes,gbs,seq",
    [
        ("llama3.1-8b", {"base": "torchtitan", "kernels": "compiled"}, 2, 8, 65536),  # the ring's waits exposed
        ("mixtral-8x7b", "megatron", 2, 8, 32768),  # two weights (dense and MoE layers) and the MoE floor key
        ("qwen3-30b-a3b", "meshplan", 2, 4, 32768),
    ],
)
def test_the_exchange_floor_on_requests(model, stack, nodes, gbs, seq) -> None:
    """The same on whole requests (the stack's compiled ring, mixtures of experts): the floor is each CP class's own
    exchange at least; ``lean_bound`` (and a MoE model's floor key, ``lean_bound(floor=True)``) ≤ ``quick_bound``."""
    from planner.answer.request import context
    from planner.specs import PlanRequest

    req = PlanRequest.model_validate(
        {
            "model": model,
            "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": nodes, "gpus_per_node": 8},
            "training": {"global_batch_size": gbs, "seq_len": seq, "stack": stack},
        }
    )
    ctx = context(req)
    cands = enumerate_candidates(ctx, req.parallel, req.options)
    cp = [c for c in cands if c.cp > 1]
    assert cp
    for c in random.Random(0).sample(cp, min(300, len(cp))):
        f, b = cp_exposed(ctx, c)
        assert lean.exchange_floor(ctx, c) <= ns(f) + ns(b)
        q = quick_bound(ctx, c)
        assert lean_bound(ctx, c) <= q, c
        if ctx.model.moe is not None:
            assert lean_bound(ctx, c, floor=True) <= lean_bound(ctx, c)
