"""The explanation's variants (``planner.answer.variants``):

* ``cut_floor`` never exceeds the simulated step time, at every cut of small instances (``bruteforce.compositions``)
  on four stacks (pp 1/2/4, 1F1B, GPipe and interleaved 1F1B, p2p that blocks, a dense/MoE model): it is the step
  time itself at pp 1 (one rank: nothing waits), and raised by 5 % it exceeds some cut's (teeth);
* ``best`` picks the variant the former selection (``old_best``, kept here: every variant in bound order simulated
  and estimated while its class bound can win) picks, for every setting of the explanations of plans on three stacks
  and of the bench's gpt-1t on 3,072 A100 (where the floor spares most of the simulations).
"""

from __future__ import annotations

import pytest
from test_end_floor import request
from test_expert_floor import random_instance

import planner.answer.variants as variants
from planner.answer.explain import SETTINGS, _price_all
from planner.answer.request import context
from planner.api import plan
from planner.compose.cost import class_costs, evaluate
from planner.search.bruteforce import compositions
from planner.search.space import enumerate_candidates
from planner.specs import ParallelPins, PlanRequest, SearchOptions

STACKS = {
    "megatron": "megatron",
    "overlap": {"base": "megatron", "overlap_grad_reduce": True, "overlap_param_gather": True},
    "deepspeed": "deepspeed",
    "torchtitan": "torchtitan",
}


def check_every_cut(ctx, cands) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """(cuts, cuts whose step time the floor raised by 5 % exceeds), asserting the floor ≤ the step time."""
    cuts = over = 0
    for c in cands:
        cc = class_costs(ctx, c)
        for n in compositions(cc.num_layers, cc.chunks):
            floor, step = variants.cut_floor(cc, list(n)), evaluate(cc, n).objective_ns
            assert floor <= step, (c, n)
            if c.pp == 1:
                assert floor == step, (c, n)
            cuts += 1
            over += floor * 1.05 > step
    return cuts, over


@pytest.mark.parametrize("name", list(STACKS))
@pytest.mark.parametrize("pp", [1, 2, 4])
def test_cut_floor_never_exceeds_any_cut(name: str, pp: int) -> None:
    ctx = context(request(STACKS[name], 16))
    pins = ParallelPins(tp=1, pp=pp, recompute="none")
    cands = [c for c in enumerate_candidates(ctx, pins, SearchOptions()) if c.chunks <= 8]
    assert cands
    if pp > 1:
        assert {c.schedule for c in cands} >= ({"1f1b", "interleaved-1f1b"} if name != "deepspeed" else {"1f1b"})
    cuts, over = check_every_cut(ctx, cands)
    assert cuts > 0 and over > 0


@pytest.mark.parametrize("seed", range(4))
def test_cut_floor_on_mixtures_of_experts(seed: int) -> None:
    ctx = random_instance(seed)
    assert ctx.model.moe is not None
    L = ctx.model.num_layers
    cands = [c for c in enumerate_candidates(ctx, ParallelPins(), SearchOptions()) if c.chunks <= min(4, L)][:12]
    assert check_every_cut(ctx, cands)[0] > 0


def old_best(priced, want_fit: bool, faster_than_ns: float | None = None):  # type: ignore[no-untyped-def]
    """The selection before ``cut_floor``: in bound order, each variant estimated while its bound can win."""
    best = None
    for v in sorted((v for v in priced if v.fits == want_fit), key=lambda v: v.bound):
        limit = best.estimate.step_time_s * 1e9 if best is not None else faster_than_ns
        if limit is not None and v.bound > limit:
            break
        e = v.estimate
        if faster_than_ns is not None and e.step_time_s * 1e9 >= faster_than_ns:
            continue
        if best is None or (e.step_time_s, e.peak_memory_gib) < (
            best.estimate.step_time_s,
            best.estimate.peak_memory_gib,
        ):
            best = v
    return best


def gpt_1t() -> dict:
    from bench_support import bench_module

    return dict(
        next(body for cid, body in bench_module("bench_plan_wide").cases() if cid == "large: gpt-1t 3072 A100 megatron")
    )


def small(model: str, nodes: int, stack: str) -> dict:
    return {
        "model": model,
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": nodes, "gpus_per_node": 8},
        "training": {"global_batch_size": 512, "seq_len": 4096, "stack": stack},
    }


@pytest.mark.parametrize(
    "body",
    [
        small("llama3-8b", 2, "megatron"),
        small("llama3-70b", 8, "deepspeed"),
        small("llama3-70b", 8, "torchtitan"),
        "gpt-1t",
    ],
    ids=["8b-megatron", "70b-deepspeed", "70b-torchtitan", "gpt-1t"],
)
def test_best_is_the_former_selection(body, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    if body == "gpt-1t":
        body = gpt_1t()
    req = PlanRequest.model_validate(dict(body, top_k=1))
    ctx = context(req)
    p = plan(req).plans[0]
    step_ns = p.estimate.step_time_s * 1e9
    new, old = _price_all(ctx, req, p), _price_all(ctx, req, p)  # two sets: what each selection simulates
    simulated: list = []
    real = variants.evaluate
    monkeypatch.setattr(variants, "evaluate", lambda cc, n: simulated.append((cc.cand, tuple(n))) or real(cc, n))
    runs = [(s, fit, faster) for s in SETTINGS for fit, faster in ((True, None), (False, step_ns))]
    picked = [variants.best(new[s], fit, faster) for s, fit, faster in runs]
    monkeypatch.setattr(variants, "evaluate", real)
    chosen = 0
    for (setting, fit, faster), a in zip(runs, picked):
        b = old_best(old[setting], fit, faster)
        assert (a is None) == (b is None), setting
        if a is not None:
            assert new[setting].index(a) == old[setting].index(b), setting
            assert a.estimate == b.estimate
            chosen += 1
    assert chosen > 0
    former = {(v.cand, tuple(v.n)) for vs in old.values() for v in vs if v._estimate is not None}
    assert set(simulated) <= former  # never a simulation the former selection did not run
    if body is not None and "gpt-1t" in str(body["model"]):
        assert len(set(simulated)) < len(former)  # teeth: the floor spares simulations
