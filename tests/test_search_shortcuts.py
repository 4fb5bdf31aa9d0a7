"""The search's shortcuts (issues 23/24/26: planning time) compute what they replace: ``Candidate.variant`` is
``dataclasses.replace``; ``simplicity`` orders tied classes as the classes themselves order; the frontier's memo of
``lean_bound``'s layer weights gives the bound without it; ``layer_caps`` and ``kinds_fit`` (the empty cut's terms
read once per first/last rank and chunk) give what the memory functions give rank by rank. Each is checked against
the direct computation on tables of classes of real and random requests."""

from __future__ import annotations

import random
from dataclasses import asdict, replace

import pytest
from test_planner_exact import random_instance

from planner.answer.request import context
from planner.compose.blocks import has_moe_blocks
from planner.compose.context_parallel import memory_class_terms
from planner.compose.cost import Candidate, live_vectors_cached, num_microbatches
from planner.compose.memory import rank_activations, rank_buffers, rank_states
from planner.compose.simulate import simulate
from planner.search.bounds import layer_caps, lean_bound
from planner.search.screens import kinds_fit
from planner.search.space import enumerate_candidates, simplicity
from planner.specs import ParallelPins, PlanRequest, SearchOptions
from tests.plan_support import search_request

#: (model, gpu, nodes, gpus per node, global batch, sequence, stack or None): bench_plan's two slowest requests, a
#: dense one and a model of two block kinds
REQUESTS = [
    ("llama3-405b", "h100-sxm5-80gb", 2048, 8, 128, 131072, None),
    ("deepseek-v3", "h100-sxm5-80gb", 256, 8, 15360, 4096, "megatron"),
    ("llama3-70b", "h100-sxm5-80gb", 8, 8, 1024, 8192, None),
]


def _request(model: str, gpu: str, nodes: int, gpn: int, gbs: int, seq: int, stack: str | None) -> PlanRequest:
    return search_request(model, gpu, nodes, gpn, gbs, seq, {"stack": stack} if stack else None)


def _sample(cands: list[Candidate], k: int, seed: int) -> list[Candidate]:
    return random.Random(seed).sample(cands, min(k, len(cands)))


@pytest.mark.parametrize(
    "changes",
    [
        {"zero_stage": 3},
        {"zero_stage": 0, "cp_comm": "all_gather", "tp_comm_overlap": False},
        {"tp_comm_overlap": True, "cp_comm": "a2a"},
        {},
    ],
)
def test_variant_is_replace(changes: dict) -> None:
    c = Candidate(8, 16, 4, 1, "1f1b", 1, "selective", True, 1, False, cp=4, cp_comm="p2p", ep=2, etp=1)
    got, ref = c.variant(**changes), replace(c, **changes)
    assert got == ref and hash(got) == hash(ref) and asdict(got) == asdict(ref) and repr(got) == repr(ref)
    assert not (got < ref) and not (ref < got)
    with pytest.raises(AttributeError):
        got.tp = 4  # type: ignore[misc]  # still frozen


def test_simplicity_orders_ties_as_the_classes() -> None:
    """Classes whose ``simplicity`` ranks agree (they differ in dp, cp or the CP exchange: a long-context request)
    compare as the classes themselves (the heap's order before the shortcut)."""
    ctx = context(_request(*REQUESTS[0]))
    cands = enumerate_candidates(ctx, ParallelPins(), SearchOptions())
    keyed = sorted((simplicity(c)[:11], c) for c in cands)  # the ranks before (dp, cp, cp_comm, class)
    pairs = 0
    for (a, x), (b, y) in zip(keyed, keyed[1:]):
        if a == b:
            pairs += 1
            assert (simplicity(x) < simplicity(y)) == (x < y) and simplicity(x)[:-1] != simplicity(y)[:-1]
    assert pairs > 100  # the tables have ties to check


@pytest.mark.parametrize("req", REQUESTS)
def test_lean_bound_memo_is_the_bound(req: tuple) -> None:
    ctx = context(_request(*req))
    cands = _sample(enumerate_candidates(ctx, ParallelPins(), SearchOptions()), 300, 1)
    weights: dict = {}
    for floor in (False, True) if has_moe_blocks(ctx) else (False,):  # the floor key: a MoE model's (``frontier``)
        for c in cands:
            assert lean_bound(ctx, c, {}, floor, weights) == lean_bound(ctx, c, None, floor)


def _caps_by_rank(s, c, live, L: int, usable: int) -> list[int]:
    """``layer_caps`` as written before the shortcut: every rank's terms by ``rank_states``, ``rank_buffers`` and
    ``rank_activations`` at the empty cut."""
    zero, out = [0] * c.chunks, []
    moe = s.moe_prefix[-1] if s.moe_prefix is not None else 0
    for r in range(c.pp):
        base, cap = usable - rank_states(s, c, zero, r, zero) - rank_buffers(s, c, r), L
        for vec in live[r]:
            room = base - rank_activations(s, c, zero, vec, zero)
            kmin = min(k for _, k in vec) if len(vec) == len(range(r, c.chunks, c.pp)) else 0
            per = s.states.layer + kmin * s.acts.layer
            if moe:
                heavy = per + s.states.moe + kmin * s.acts.moe
                light, many = (per, L - moe) if per <= heavy else (heavy, moe)
                if room >= 0 and light > 0:
                    cap = min(cap, room // light, many + room // heavy)
                    continue
                per = light
            cap = min(cap, -1 if room < 0 else (room // per if per > 0 else L))
        out.append(cap)
    return out


@pytest.mark.parametrize("req", REQUESTS)
def test_layer_caps_are_the_ranks_own(req: tuple) -> None:
    ctx = context(_request(*req))
    L, checked = ctx.model.num_layers, 0
    for c in _sample(enumerate_candidates(ctx, ParallelPins(), SearchOptions()), 400, 2):
        if c.chunks > L:
            continue
        s = memory_class_terms(ctx, c)
        live = live_vectors_cached(c.schedule, c.pp, c.virtual_stages, num_microbatches(ctx, c))
        for usable in (ctx.usable_bytes, ctx.usable_bytes // 3):
            assert list(layer_caps(s, c, live, L, usable)) == _caps_by_rank(s, c, live, L, usable)
            checked += 1
    assert checked > 100


@pytest.mark.parametrize("seed", range(12))
def test_layer_caps_on_random_instances(seed: int) -> None:
    ctx, _ = random_instance(seed)
    L = ctx.model.num_layers
    for c in enumerate_candidates(ctx, ParallelPins(), SearchOptions()):
        if c.chunks > L:
            continue
        s = memory_class_terms(ctx, c)
        live = live_vectors_cached(c.schedule, c.pp, c.virtual_stages, num_microbatches(ctx, c))
        assert list(layer_caps(s, c, live, L, ctx.usable_bytes)) == _caps_by_rank(s, c, live, L, ctx.usable_bytes)


def test_kinds_fit_is_the_ranks_own() -> None:
    """A model of two block kinds: ``kinds_fit`` against the per-rank terms at several memory sizes."""
    ctx = context(_request(*REQUESTS[1]))
    L, seen = ctx.model.num_layers, set()
    for c in _sample(enumerate_candidates(ctx, ParallelPins(), SearchOptions()), 300, 3):
        s = memory_class_terms(ctx, c)
        assert s.moe_prefix is not None
        live = live_vectors_cached(c.schedule, c.pp, c.virtual_stages, num_microbatches(ctx, c))
        zero = [0] * c.chunks
        for usable in (ctx.usable_bytes, ctx.usable_bytes // 2, ctx.usable_bytes // 4):
            need = {False: L - s.moe_prefix[-1], True: s.moe_prefix[-1]}
            held = dict.fromkeys(need, 0)
            for r in range(c.pp):
                base = usable - rank_states(s, c, zero, r, zero) - rank_buffers(s, c, r)
                caps = dict.fromkeys(need, L)
                for vec in live[r]:
                    room = base - rank_activations(s, c, zero, vec, zero)
                    kmin = min(k for _, k in vec) if len(vec) == len(range(r, c.chunks, c.pp)) else 0
                    dense = s.states.layer + kmin * s.acts.layer
                    for moe, per in ((False, dense), (True, dense + s.states.moe + kmin * s.acts.moe)):
                        caps[moe] = min(caps[moe], -1 if room < 0 else (room // per if per > 0 else L))
                for moe in need:
                    held[moe] += max(0, caps[moe])
            want = all(held[moe] >= need[moe] for moe in need)
            assert kinds_fit(s, c, live, L, usable) == want
            seen.add(want)
    assert seen == {True, False}  # both answers checked


@pytest.mark.parametrize(
    "shape",
    [
        ("1f1b", 16, 1, 64),
        ("1f1b", 4, 1, 9),
        ("gpipe", 6, 1, 5),
        ("interleaved-1f1b", 4, 3, 8),
        ("1f1b", 1, 1, 3),
        ("1f1b", 2, 1, 40),
    ],
)
def test_replayed_critical_path_is_the_eager_one(shape: tuple) -> None:
    """A replay without the timeline binds the critical path's operations from the ends (``simulate._Bindings``):
    the same path, lags and times as the replay that records every operation's binding predecessor."""
    schedule, pp, v, m = shape
    rng, chunks = random.Random(pp * 100 + m), pp * v
    for _ in range(6):
        fwd = [rng.randint(1, 50) for _c in range(chunks)]
        bwd = [rng.choice([x, 2 * x, rng.randint(1, 90)]) for x in fwd]  # ties and unequal stages
        lag = [rng.choice([0, 0, 3, rng.randint(1, 40)]) for _c in range(chunks - 1)]
        simulate(schedule, pp, v, m, fwd, bwd, lag, record=True)  # the shape recorded (a first run)
        eager, lazy = (simulate(schedule, pp, v, m, fwd, bwd, lag, record=r) for r in (True, False))
        assert (lazy.makespan, lazy.rank_finish) == (eager.makespan, eager.rank_finish)
        assert (lazy.critical_path, lazy.critical_lags) == (eager.critical_path, eager.critical_lags)
