"""The CP-SAT search returns the brute-force optimum (every class, every stage cut) on seeded random
small instances, and its reported objective is the simulated step time of the plan it returns."""

from __future__ import annotations

import random

import pytest

from planner.compose.cost import Context, class_costs, evaluate
from planner.search import search
from planner.search.bruteforce import brute_force, compositions
from planner.specs import ClusterSpec, GpuSpec, ModelSpec, ParallelPins, SearchOptions, TrainingSpec
from planner.specs.catalog import get_gpu


def random_instance(seed: int) -> tuple[Context, ParallelPins]:
    rng = random.Random(seed)
    heads = rng.choice([2, 4])
    model = ModelSpec(
        name=f"rand-{seed}",
        family=rng.choice(["gpt", "llama"]),
        num_layers=rng.randint(4, 7),
        hidden_size=32 * heads,
        num_attention_heads=heads,
        num_kv_heads=rng.choice([h for h in (1, 2, heads) if heads % h == 0]),
        ffn_hidden_size=rng.choice([128, 256]),
        vocab_size=rng.choice([256, 1000]),
        activation="gelu",
        norm="layernorm",
        max_seq_len=256,
    )
    if model.family == "llama":
        model = model.model_copy(update={"activation": "swiglu", "norm": "rmsnorm"})
    base = get_gpu("a100-sxm4-80gb")
    # Small memories so that memory constraints bind on some instances; slow links so comm matters.
    gpu = base.model_copy(
        update={
            "id": f"toy-{seed}",
            "memory_gib": 1.0 + rng.choice([0.003, 0.006, 0.012, 1.0]),
            "nvlink_bandwidth_GBps": rng.choice([1.0, 50.0]),
            "nic_bandwidth_GBps": rng.choice([0.1, 5.0]),
        }
    )
    cluster = ClusterSpec(gpu=gpu, num_nodes=rng.choice([1, 2]), gpus_per_node=rng.choice([2, 4]))
    training = TrainingSpec(global_batch_size=rng.choice([4, 8, 16]), seq_len=rng.choice([64, 128]))
    ctx = Context(model=model, gpu=GpuSpec.model_validate(gpu.model_dump()), cluster=cluster, training=training)
    pins = ParallelPins()
    if rng.random() < 0.3:
        pins = ParallelPins(schedule="interleaved-1f1b", virtual_stages=2)
    return ctx, pins


def search_against_brute_force(ctx: Context, pins: ParallelPins, top_k: int = 3):
    """The search (on a fresh context) and the brute force of one instance, checked against each other: the same
    top-k objectives, each class at its own optimal cut, INFEASIBLE when the brute force finds nothing, every result
    re-evaluated to its own objective and fitting. Returns (search result, brute-force ranking) for more checks."""
    options = SearchOptions(time_limit_s=20, num_workers=1)
    ref, scored = brute_force(ctx, pins, options)
    got = search(
        Context(model=ctx.model, gpu=ctx.gpu, cluster=ctx.cluster, training=ctx.training), pins, options, top_k=top_k
    )
    assert scored > 0
    if not ref:
        assert got.results == [] and got.status == "INFEASIBLE"
    assert [r.evaluation.objective_ns for r in got.results] == [t[0] for t in ref[: len(got.results)]]
    assert len(got.results) == min(top_k, len(ref))
    for r in got.results:
        ev = evaluate(class_costs(ctx, r.cand), r.stage_layers)
        assert ev.fits and ev.objective_ns == r.evaluation.objective_ns
    return got, ref


@pytest.mark.parametrize("seed", range(16))
def test_search_matches_brute_force(seed: int) -> None:
    ctx, pins = random_instance(seed)
    got, ref = search_against_brute_force(ctx, pins)
    if ref:
        assert got.status == "OPTIMAL"
        assert got.objective_ns == ref[0][0]
        assert got.bound_ns == ref[0][0]


def test_some_random_instances_bind_on_memory() -> None:
    """The instance generator exercises the memory constraints (else the exactness test is weak)."""
    binding = 0
    for seed in range(16):
        ctx, pins = random_instance(seed)
        unconstrained = ctx.gpu.model_copy(update={"memory_gib": 1000.0})
        free = Context(model=ctx.model, gpu=unconstrained, cluster=ctx.cluster, training=ctx.training)
        a = search(ctx, pins, SearchOptions(num_workers=1), top_k=1)
        b = search(free, pins, SearchOptions(num_workers=1), top_k=1)
        if a.objective_ns != b.objective_ns:
            binding += 1
    assert binding >= 2


@pytest.mark.parametrize("total,parts,count", [(5, 1, 1), (5, 2, 4), (6, 3, 10), (7, 4, 20)])
def test_compositions_count(total: int, parts: int, count: int) -> None:
    from math import comb

    cuts = list(compositions(total, parts))
    assert len(cuts) == count == comb(total - 1, parts - 1)
    assert all(sum(c) == total and min(c) >= 1 for c in cuts)


@pytest.mark.parametrize("seed", range(0, 16, 3))
def test_class_bounds_are_valid(seed: int) -> None:
    """The cut-independent bounds used to skip classes (the quick one, before the class is costed, and
    the exact one) never exceed the class's true optimum, and
    the memory screen never drops a class that has a fitting cut (the pre-costing screen is the same).
    The search's bound over the fitting cuts (``fitting_bound``: the busiest rank within what each rank's
    memory holds) is ≥ ``class_bound`` and ≤ the best fitting cut."""
    from planner.search.bounds import class_bound, fitting_bound, lean_bound, may_fit, quick_bound, quick_may_fit

    ctx, pins = random_instance(seed)
    from planner.search.space import enumerate_candidates

    for cand in enumerate_candidates(ctx, pins, SearchOptions()):
        cc = class_costs(ctx, cand)
        evs = [evaluate(cc, n) for n in compositions(cc.num_layers, cc.chunks)]
        assert lean_bound(ctx, cand) <= quick_bound(ctx, cand) <= class_bound(cc) <= min(e.objective_ns for e in evs)
        if any(e.fits for e in evs):
            assert may_fit(cc)
            assert class_bound(cc) <= fitting_bound(cc) <= min(e.objective_ns for e in evs if e.fits)
        if cand.virtual_stages == 1:
            assert quick_may_fit(ctx, cand) == may_fit(cc)


@pytest.mark.parametrize(
    "L,p,w,e_first,e_last",
    [
        (7, 1, 5, 3, 4),
        (7, 2, 5, 0, 9),
        (6, 3, 4, 11, 2),
        (9, 4, 3, 1, 13),
        (5, 5, 10, 0, 0),
        (8, 3, 7, 20, 20),
        (12, 4, 2, 0, 7),
        (8, 6, 10, 1, 13),  # fewer than 2 layers per rank, an LM head of 1.3 layers (OPT-175B at pp = 62)
        (7, 5, 10, 0, 14),
    ],
)
def test_busiest_rank_load_is_the_min_max_load(L: int, p: int, w: int, e_first: int, e_last: int) -> None:
    """Equal to the brute-force min over real cuts (≥ 1 layer per rank) of the max rank load (and with
    ``least=0`` to the min over cuts with ≥ 0 layers per rank, the relaxation used before issue 12)."""
    from itertools import product

    from planner.search.bounds import busiest_rank_load

    extras = [e_first + (e_last if p == 1 else 0)] + [0] * (p - 2) + ([e_last] if p > 1 else [])
    relaxed = min(
        max(n * w + e for n, e in zip(cut, extras)) for cut in product(range(L + 1), repeat=p) if sum(cut) == L
    )
    real = min(max(n * w + e for n, e in zip(cut, extras)) for cut in compositions(L, p))
    # one chunk per rank (≥ 1 layer each): exactly the min over real cuts; ≥ 0 layers: the relaxation
    assert busiest_rank_load(L, p, w, e_first, e_last) == real
    assert busiest_rank_load(L, p, w, e_first, e_last, least=0) == relaxed <= real


@pytest.mark.parametrize(
    "L,w,extras,caps,least",
    [
        (7, 5, [3, 4], [3, 7], 1),
        (12, 4, [11, 0, 0, 2], [1, 2, 9, 9], 1),  # memory leaves the first ranks one or two layers
        (12, 4, [11, 0, 0, 2], [1, 1, 1, 9], 1),
        (9, 3, [1, 0, 13], [5, 5, 5], 1),
        (10, 10, [0, 0, 0, 0, 14], [1, 1, 2, 3, 6], 1),
        (8, 2, [0, 7], [2, 8], 2),  # two chunks per rank
        (8, 2, [0, 7], [1, 8], 2),  # a rank cannot hold its chunks: no cut
        (8, 2, [0, 7], [3, 4], 1),  # the caps cannot take every layer: no cut
        (6, 7, [5, 0, 9], [6, 6, 6], 1),
    ],
)
def test_capped_load_is_the_min_max_load_over_fitting_cuts(
    L: int, w: int, extras: list[int], caps: list[int], least: int
) -> None:
    """``bounds.capped_load`` = the brute-force min over cuts with least ≤ n_i ≤ caps[i] of the max rank
    load (None when there is no such cut); with roomy caps it is ``busiest_rank_load``."""
    from itertools import product

    from planner.search.bounds import busiest_rank_load, capped_load

    loads = [
        max(n * w + e for n, e in zip(cut, extras))
        for cut in product(range(L + 1), repeat=len(caps))
        if sum(cut) == L and all(least <= n <= c for n, c in zip(cut, caps))
    ]
    assert capped_load(L, w, extras, caps, least) == (min(loads) if loads else None)
    if len(extras) > 1 and not any(extras[1:-1]):
        roomy = capped_load(L, w, extras, [L] * len(extras), least)
        assert roomy == busiest_rank_load(L, len(extras), w, extras[0], extras[-1], least)


def test_fitting_bound_is_valid_when_memory_binds() -> None:
    """``bounds.fitting_bound`` ≤ the best fitting cut of the class on 8 seeded instances, with the usable
    memory set to levels at which the cuts' peak memories change (from only the leanest cut fitting to
    most of them), and it is tighter than ``class_bound`` on some (the caps bind; with caps one layer
    too small the bound cuts optima here)."""
    from dataclasses import replace

    from planner.compose.memory import rank_memory
    from planner.search.bounds import class_bound, fitting_bound
    from planner.search.space import enumerate_candidates

    tighter = checked = 0
    for seed in range(8):
        ctx, pins = random_instance(seed)
        for cand in enumerate_candidates(ctx, pins, SearchOptions()):
            base = class_costs(ctx, cand)
            cuts = list(compositions(base.num_layers, base.chunks))
            peaks = sorted({max(rank_memory(base, n, r) for r in range(cand.pp)) for n in cuts})
            for usable in peaks[:: max(1, len(peaks) // 6)]:
                cc = replace(base, usable_bytes=usable)
                fit = [e.objective_ns for e in (evaluate(cc, n) for n in cuts) if e.fits]
                assert fit, "the leanest cut fits at its own peak"
                assert class_bound(cc) <= fitting_bound(cc) <= min(fit), (cand, usable)
                tighter += fitting_bound(cc) > class_bound(cc)
                checked += 1
    assert checked and tighter, (checked, tighter)


def _chain_lp(L, m, w, extras, lags, caps, least, steady):
    """The LP relaxation of ``rank_chain_load`` solved by GLOP (an independent computation): min T over
    real least ≤ n_i ≤ caps[i], Σ n = L, every rank chain (and steady-state chain) ≤ T."""
    from ortools.linear_solver import pywraplp

    solver = pywraplp.Solver.CreateSolver("GLOP")
    n = [solver.NumVar(least, c, f"n{i}") for i, c in enumerate(caps)]
    T = solver.NumVar(0, solver.infinity(), "T")
    solver.Add(sum(n) == L)
    for i in range(len(caps)):
        before = sum(n[j] * w + extras[j] + lags[j] for j in range(i))
        solver.Add(before + m * (n[i] * w + extras[i]) <= T)
        if steady is not None:
            a, c = steady[1][i]
            solver.Add(steady[0] + a * n[i] + c <= T)
    solver.Minimize(T)
    assert solver.Solve() == pywraplp.Solver.OPTIMAL
    return T.solution_value()


@pytest.mark.parametrize(
    "L,m,w,extras,lags,caps,steady",
    [
        (8, 4, 10, [3, 0, 9], [2, 2, 0], [8, 8, 8], None),
        (12, 8, 7, [5, 0, 0, 20], [1, 1, 1, 0], [2, 3, 9, 9], None),  # memory leaves the first ranks few layers
        (12, 4, 7, [5, 0, 0, 20], [0, 0, 0, 0], [12, 12, 12, 12], None),
        (10, 2, 5, [0, 0], [4, 0], [3, 9], None),
        (9, 6, 4, [2, 0, 11], [3, 3, 0], [9, 9, 9], (100, [(10, 2), (12, 0), (14, 9)])),  # 1F1B steady chains
        (
            16,
            16,
            3,
            [1, 0, 0, 0, 6],
            [1, 1, 1, 1, 0],
            [2, 2, 4, 8, 16],
            (60, [(20, 1), (20, 0), (21, 0), (22, 0), (23, 5)]),
        ),
    ],
)
def test_rank_chain_load_is_the_lp_relaxation(L, m, w, extras, lags, caps, steady) -> None:
    """``bounds.rank_chain_load`` is the optimum of its LP relaxation (GLOP) to its tolerance, and no more
    than the brute-force min over integer cuts of the same chains (a valid bound)."""
    from itertools import product

    from planner.search.bounds import rank_chain_load

    got = rank_chain_load(L, m, w, extras, lags, caps, steady=steady)
    lp = _chain_lp(L, m, w, extras, lags, caps, 1, steady)
    assert got is not None and got <= lp + 1e-6 and got >= lp * (1 - 2e-4) - 1
    best = None
    for cut in product(*(range(1, c + 1) for c in caps)):
        if sum(cut) != L:
            continue
        t = [n * w + e for n, e in zip(cut, extras)]
        chains = [sum(t[j] + lags[j] for j in range(i)) + m * t[i] for i in range(len(caps))]
        if steady is not None:
            chains += [steady[0] + a * n + c for (a, c), n in zip(steady[1], cut)]
        best = max(chains) if best is None else min(best, max(chains))
    assert best is not None and got <= best


def test_rank_chain_load_without_a_cut() -> None:
    from planner.search.bounds import rank_chain_load

    assert rank_chain_load(8, 4, 10, [0, 0], [0, 0], [3, 4]) is None  # the caps cannot take every layer
    assert rank_chain_load(8, 4, 10, [0, 0], [0, 0], [0, 8]) is None  # a rank cannot hold one layer


@pytest.mark.parametrize(
    "model,gpu,nodes,gbs,seq",
    [("llama3-8b", "h100-sxm5-80gb", 1, 256, 8192), ("llama3-70b", "h100-sxm5-80gb", 4, 512, 4096)],
)
def test_lean_bound_is_below_the_quick_bound_on_every_class(model, gpu, nodes, gbs, seq) -> None:
    """The search's first key (``bounds.lean_bound``, from the layer times alone) never exceeds the quick
    bound it is replaced by (ZeRO-3 gathers, host hooks and the end of step only add), on every class of
    real instances (every ZeRO stage, schedule, v, recomputation)."""
    from planner.answer.request import context
    from planner.search.bounds import lean_bound, quick_bound
    from planner.search.space import enumerate_candidates
    from planner.specs import PlanRequest

    req = PlanRequest.model_validate(
        {
            "model": model,
            "cluster": {"gpu": gpu, "num_nodes": nodes, "gpus_per_node": 8},
            "training": {"global_batch_size": gbs, "seq_len": seq},
        }
    )
    ctx = context(req)
    cands = enumerate_candidates(ctx, req.parallel, req.options)
    assert len(cands) > 500
    assert all(lean_bound(ctx, c) <= quick_bound(ctx, c) for c in cands)
