"""Interleaved 1F1B searched by default over every v and every cut, as a pinned schedule searches it (issue 26;
``planner.search.uneven``). The search returns the brute-force optimum of that space (every cut of every class) on
seeded instances where interleaving wins; the memory screens never drop a class that fits."""

from __future__ import annotations

import random

import pytest

from planner.compose.cost import (
    Context,
    class_costs,
    evaluate,
    live_vectors_cached,
)
from planner.compose.memory import rank_memory
from planner.search import search
from planner.search.bounds import fits_at, interleaved_peak_copies, may_fit, quick_may_fit
from planner.search.bruteforce import brute_force, compositions
from planner.search.space import enumerate_candidates, forced_cut
from planner.specs import (
    ClusterSpec,
    GpuSpec,
    ModelSpec,
    ParallelPins,
    SearchOptions,
    TrainingSpec,
)
from planner.specs.catalog import get_gpu
from planner.specs.layout import even_stage_layers

SEEDS = range(24)


def interleaved_instance(seed: int) -> tuple[Context, ParallelPins]:
    """One node of 4 GPUs, a model big enough that compute dominates the p2p latency, memory from
    "one GPU holds it all" down to "nothing fits"; the schedule (and pp, dp, micro-batch) is searched."""
    rng = random.Random(seed)
    heads = rng.choice([8, 16])
    model = ModelSpec(
        name=f"il-{seed}",
        family="gpt",
        num_layers=rng.choice([8, 12]),
        hidden_size=128 * heads,
        num_attention_heads=heads,
        num_kv_heads=heads,
        ffn_hidden_size=512 * heads,
        vocab_size=rng.choice([1000, 32000]),
        activation="gelu",
        norm="layernorm",
        max_seq_len=4096,
    )
    gpu = get_gpu("a100-sxm4-80gb").model_copy(
        update={
            "id": f"toy-il-{seed}",
            "memory_gib": 1.0 + rng.choice([1.0, 1.5, 2.0, 3.0, 6.0]),
            "nvlink_bandwidth_GBps": rng.choice([50.0, 300.0]),
        }
    )
    ctx = Context(
        model=model,
        gpu=GpuSpec.model_validate(gpu.model_dump()),
        cluster=ClusterSpec(gpu=gpu, num_nodes=1, gpus_per_node=4),
        training=TrainingSpec(global_batch_size=rng.choice([4, 8]), seq_len=rng.choice([1024, 2048])),
    )
    return ctx, ParallelPins(tp=1, recompute="none", sequence_parallel=False, zero_stage=0)


@pytest.mark.parametrize("seed", SEEDS)
def test_search_matches_brute_force_with_interleaved(seed: int) -> None:
    ctx, pins = interleaved_instance(seed)
    options = SearchOptions(num_workers=1)
    ref, scored = brute_force(ctx, pins, options)
    got = search(
        Context(model=ctx.model, gpu=ctx.gpu, cluster=ctx.cluster, training=ctx.training), pins, options, top_k=3
    )
    assert scored > 0
    if not ref:
        assert got.results == [] and got.status == "INFEASIBLE"
        return
    assert got.status == "OPTIMAL" and got.objective_ns == got.bound_ns == ref[0][0]
    assert [r.evaluation.objective_ns for r in got.results] == [t[0] for t in ref[:3]]
    for r in got.results:
        assert len(r.stage_layers) == r.cand.pp * r.cand.virtual_stages
        ev = evaluate(class_costs(ctx, r.cand), r.stage_layers)
        assert ev.fits and ev.objective_ns == r.evaluation.objective_ns


def test_interleaving_wins_on_some_instances() -> None:
    """The generator exercises the new space: interleaved 1F1B is the optimum on several seeds (4 of 12
    since cost model 5's collectives, 7 before)."""
    wins = 0
    for seed in SEEDS:
        ctx, pins = interleaved_instance(seed)
        got = search(ctx, pins, SearchOptions(num_workers=1), top_k=1)
        wins += bool(got.results) and got.results[0].cand.schedule == "interleaved-1f1b"
    assert wins >= 4


@pytest.mark.parametrize("seed", range(0, 24, 2))
def test_memory_screens_are_valid(seed: int) -> None:
    """The pre-costing screens of an interleaved class never drop a class with a fitting cut: at the even cut, and
    over every cut (``quick_may_fit`` without a cut: ``may_fit``'s screen, from the memory terms alone)."""
    ctx, pins = interleaved_instance(seed)
    for cand in enumerate_candidates(ctx, pins, SearchOptions()):
        if cand.virtual_stages == 1:
            continue
        cc = class_costs(ctx, cand)
        cut = even_stage_layers(cc.num_layers, cc.chunks)
        fits = max(rank_memory(cc, cut, r) for r in range(cand.pp)) <= cc.usable_bytes
        assert quick_may_fit(ctx, cand, cut) or not fits
        any_fits = any(fits_at(cc, n) for n in compositions(cc.num_layers, cc.chunks))
        assert (may_fit(cc) or not quick_may_fit(ctx, cand)) and (quick_may_fit(ctx, cand) or not any_fits)


@pytest.mark.parametrize(
    "p,v,m", [(2, 2, 2), (2, 2, 4), (2, 3, 6), (3, 2, 3), (3, 2, 9), (4, 2, 4), (4, 3, 8), (4, 4, 12), (5, 2, 10)]
)
def test_interleaved_peak_copies_is_the_schedules_peak(p: int, v: int, m: int) -> None:
    live = live_vectors_cached("interleaved-1f1b", p, v, m)
    for i in range(p):
        assert interleaved_peak_copies(p, v, m, i, True) == max(sum(k for _, k in vec) for vec in live[i])


def _ctx(layers: int) -> Context:
    gpu = get_gpu("h100-sxm5-80gb")
    model = ModelSpec(
        name="t",
        family="gpt",
        num_layers=layers,
        hidden_size=256,
        num_attention_heads=4,
        num_kv_heads=4,
        ffn_hidden_size=1024,
        vocab_size=1000,
        activation="gelu",
        norm="layernorm",
        max_seq_len=512,
    )
    return Context(
        model=model,
        gpu=gpu,
        cluster=ClusterSpec(gpu=gpu, num_nodes=1, gpus_per_node=4),
        training=TrainingSpec(global_batch_size=16, seq_len=128),
    )


@pytest.mark.parametrize(
    "pins,stack,uniform_only",
    [
        (ParallelPins(), "meshplan", False),
        (ParallelPins(virtual_stages=5), "meshplan", False),  # pp·v = 10 ∤ 12
        (ParallelPins(schedule="interleaved-1f1b"), "meshplan", False),
        (ParallelPins(), "megatron-2021", True),  # interleaves, but splits evenly only (``Stack.even_stages``)
    ],
)
def test_enumeration_of_interleaved_classes(pins: ParallelPins, stack: str, uniform_only: bool) -> None:
    """Pinned schedule or not, every v with pp·v ≤ layers, the cut searched (CP-SAT; issue 26) but where pp·v = layers
    (one layer a chunk, the only cut); on a stack that splits evenly only, interleaved only where pp·v divides the
    layers, the cut forced to the even split."""
    ctx = _ctx(12)
    ctx = Context(
        model=ctx.model, gpu=ctx.gpu, cluster=ctx.cluster, training=ctx.training.model_copy(update={"stack": stack})
    )
    il = [c for c in enumerate_candidates(ctx, pins, SearchOptions()) if c.virtual_stages > 1]
    assert il
    assert all(c.micro_batch_size * c.dp * c.pp <= 16 and (16 // (c.dp * c.micro_batch_size)) % c.pp == 0 for c in il)
    divides = {12 % c.chunks == 0 for c in il}
    if pins.virtual_stages is not None:
        assert {c.virtual_stages for c in il} == {pins.virtual_stages}
    if uniform_only:
        assert divides == {True}
        assert all(forced_cut(ctx, pins, c) == [12 // c.chunks] * c.chunks for c in il)
    else:
        assert False in divides
        assert all(forced_cut(ctx, pins, c) == ([1] * 12 if c.chunks == 12 else None) for c in il)
        assert any(c.chunks == 12 for c in il) == (pins.virtual_stages != 5)


@pytest.mark.parametrize("seed", [*range(1, 24, 2), *(100 + s for s in range(16))])
def test_cut_bound_is_valid(seed: int) -> None:
    """The bound that orders and skips one-cut classes never exceeds that cut's simulated objective,
    and the quick bound holds too (so the best-first order stays a valid proof). Seeds ≥ 100: the
    exactness test's instances (slow links: large p2p lags), schedule unpinned."""
    from planner.search.bounds import cut_bound, cut_end, quick_bound

    if seed >= 100:
        from test_planner_exact import random_instance

        ctx, _ = random_instance(seed - 100)
        pins = ParallelPins()
    else:
        ctx, pins = interleaved_instance(seed)
    for cand in enumerate_candidates(ctx, pins, SearchOptions()):
        cut = forced_cut(ctx, pins, cand)
        if cut is None and cand.virtual_stages > 1:  # an interleaved class's cut is searched: its even split
            cut = even_stage_layers(ctx.model.num_layers, cand.chunks)
        if cut is None:
            continue
        ev = evaluate(class_costs(ctx, cand), cut)
        assert cut_end(ctx, cand, cut) == ev.end_ns
        assert cut_bound(ctx, cand, cut) <= ev.objective_ns and quick_bound(ctx, cand) <= ev.objective_ns


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize(
    "stack, stages", [("meshplan", {0, 1, 3}), ("deepspeed", {0, 1, 2, 3}), ("torchtitan", {0, 2, 3})]
)
def test_cut_end_is_the_evaluated_end_term(tie: bool, stack: str, stages: set[int]) -> None:
    """Over every ZeRO stage the stack runs and distinguishes (``space.zero_stages``: the bundled runtime's ZeRO-2
    is its ZeRO-1; torchtitan has no ZeRO-1; ``Stack.zero_stages``), recompute, tp/sp and dp: the end term computed from the shared terms equals the
    evaluation's (the bound relies on it being exact, never larger)."""
    from planner.search.bounds import cut_end

    ctx = _ctx(12)
    ctx = Context(
        model=ctx.model.model_copy(update={"tie_embeddings": tie}),
        gpu=ctx.gpu,
        cluster=ctx.cluster,
        training=ctx.training.model_copy(update={"stack": stack}),
    )
    cands = [c for c in enumerate_candidates(ctx, ParallelPins(), SearchOptions()) if c.micro_batch_size <= 2]
    assert {c.zero_stage for c in cands} == stages and any(c.virtual_stages == 1 and c.pp == 1 for c in cands)
    for cand in cands:
        cut = forced_cut(ctx, ParallelPins(), cand) or [
            12 // cand.chunks + (1 if i < 12 % cand.chunks else 0) for i in range(cand.chunks)
        ]
        assert cut_end(ctx, cand, cut) == evaluate(class_costs(ctx, cand), cut).end_ns, cand


def test_interleaved_quick_bound_does_not_depend_on_v() -> None:
    """The search shares one quick bound across the v of an interleaved class (``search.qbound``)."""
    from planner.search.bounds import quick_bound

    ctx = _ctx(24)
    by_key: dict[tuple, set[int]] = {}
    for c in enumerate_candidates(ctx, ParallelPins(schedule="interleaved-1f1b"), SearchOptions()):
        by_key.setdefault(
            (c.tp, c.pp, c.dp, c.cp, c.cp_comm, c.micro_batch_size, c.recompute, c.sequence_parallel, c.zero_stage),
            set(),
        ).add(quick_bound(ctx, c))
    assert by_key and all(len(b) == 1 for b in by_key.values())
