"""The search's first key of a mixture of experts (issue 26): ``layer_group.moe_floor`` (a MoE block's forward and
backward per layer at (ep, etp), priced without its experts' layout: ``experts.expert_floor``) is never above the
block's own ``LayerGroup`` times, and ``bounds.lean_bound(floor=True)`` never above ``lean_bound``, on every class of
the catalog's mixtures of experts on the bench clusters and of seeded random instances (load imbalance, capacity
factors, shared experts, slow links, a CPU host). A floor above the exact value would reorder the queue and could
drop the optimum; these tests fail on a floor that misses a term (e.g. the ETP exchange, or the all-to-all at ep)."""

from __future__ import annotations

import random

import pytest

from planner.answer.request import context
from planner.compose.context import Context
from planner.compose.context_parallel import cp_view
from planner.compose.layer_group import layer_group, moe_floor
from planner.search.bounds import lean_bound
from planner.search.space import enumerate_candidates
from planner.specs import ClusterSpec, GpuSpec, ModelSpec, ParallelPins, PlanRequest, SearchOptions, TrainingSpec
from planner.specs.catalog import get_gpu
from planner.workload.ops import MOE_BLOCK
from tests.host_support import CPU


def check_floors(ctx: Context, pins: ParallelPins, options: SearchOptions) -> int:
    """Every (ep, etp) point's floor ≤ its layer group, every class's floor key ≤ its lean bound; the points checked."""
    cands = enumerate_candidates(ctx, pins, options)
    assert cands
    points = set()
    for c in cands:
        at = (c.micro_batch_size, c.tp, c.sequence_parallel, c.recompute, c.tp_comm_overlap)
        if (at, c.ep, c.etp, c.cp) not in points:
            points.add((at, c.ep, c.etp, c.cp))
            view = cp_view(ctx, c.cp)
            lg = layer_group(view, *at, c.ep, c.etp, MOE_BLOCK)
            f, b = moe_floor(view, *at, c.ep, c.etp)
            assert f <= lg.fwd.layer and b <= lg.bwd.layer, (c, f, lg.fwd.layer, b, lg.bwd.layer)
        assert lean_bound(ctx, c, floor=True) <= lean_bound(ctx, c), c
    return len(points)


BENCH = [  # bench/bench_plan.py's mixtures of experts and more of the catalog's, on the clusters they are run on
    ("deepseek-v3", "h100-sxm5-80gb", 256, 8, 15360, 4096, "megatron"),
    ("mixtral-8x22b", "h100-sxm5-80gb", 16, 8, 256, 4096, "megatron"),
    ("qwen3-30b-a3b", "h100-sxm5-80gb", 4, 8, 512, 4096, "torchtitan"),
    ("gpt-oss-120b", "h100-sxm5-80gb", 8, 8, 512, 4096, "megatron"),
    ("llama4-maverick", "a100-sxm4-80gb", 32, 8, 1024, 8192, "megatron"),
    ("olmoe-1b-7b", "h100-sxm5-80gb", 1, 8, 256, 4096, "meshplan"),
    ("mixtral-8x7b", "h100-sxm5-80gb", 8, 8, 64, 32768, "megatron"),  # long context: classes with cp > 1 (their views)
]


@pytest.mark.parametrize(("model", "gpu", "nodes", "gpn", "gbs", "seq", "stack"), BENCH)
def test_floor_is_below_the_layer_group_on_the_catalog(model, gpu, nodes, gpn, gbs, seq, stack) -> None:
    req = PlanRequest.model_validate(
        {
            "model": model,
            "cluster": {"gpu": gpu, "num_nodes": nodes, "gpus_per_node": gpn},
            "training": {"global_batch_size": gbs, "seq_len": seq, "stack": stack},
        }
    )
    ctx = context(req)
    assert check_floors(ctx, req.parallel, req.options) > 10
    if seq >= 16_384:
        assert any(c.cp > 1 for c in enumerate_candidates(ctx, req.parallel, req.options))


def random_instance(seed: int) -> Context:
    """A small MoE with a random layout, routing, shared experts and links; a CPU host on some seeds."""
    rng = random.Random(2600 + seed)
    heads = rng.choice([2, 4, 8])
    experts = rng.choice([4, 8, 16])
    moe: dict = {"num_experts": experts, "top_k": rng.choice([1, 2, 4]), "expert_ffn_hidden_size": rng.choice([48, 64])}
    if rng.random() < 0.5:
        moe["load_imbalance"] = rng.choice([1.3, 2.0])
        if rng.random() < 0.5:
            moe["capacity_factor"] = 1.25
    if rng.random() < 0.5:
        moe["shared_experts"], moe["shared_expert_ffn_hidden_size"] = rng.choice([1, 2]), 64
    layers = rng.randint(4, 8)
    if rng.random() < 0.5:
        moe["first_dense_layers"] = rng.randint(1, 2)  # a model of two block kinds
    model = ModelSpec.model_validate(
        {
            "name": f"floor-{seed}",
            "family": "llama",
            "num_layers": layers,
            "hidden_size": 32 * heads,
            "num_attention_heads": heads,
            "num_kv_heads": heads,
            "ffn_hidden_size": 128,
            "vocab_size": 256,
            "activation": "swiglu",
            "norm": "rmsnorm",
            "max_seq_len": 512,
            "moe": moe,
        }
    )
    if seed % 4 == 3:
        gpu = CPU
    else:
        gpu = get_gpu("h100-sxm5-80gb").model_copy(
            update={
                "id": f"toy-floor-{seed}",
                "nvlink_bandwidth_GBps": rng.choice([1.0, 50.0, 900.0]),
                "nic_bandwidth_GBps": rng.choice([0.1, 5.0, 50.0]),
            }
        )
    cluster = ClusterSpec(gpu=gpu, num_nodes=rng.choice([1, 2, 4]), gpus_per_node=rng.choice([2, 4, 8]))
    training = TrainingSpec(
        global_batch_size=rng.choice([8, 16, 32]),
        seq_len=rng.choice([64, 128, 512]),
        stack=rng.choice(["megatron", "torchtitan"]),
        **({"precision": "fp32"} if gpu.on_host else {}),  # the host's one rate
    )
    return Context(model=model, gpu=GpuSpec.model_validate(gpu.model_dump()), cluster=cluster, training=training)


FP8 = [  # FP8 mixtures on the megatron stack (grouped experts in FP8, their per-expert casts and padding, the dense
    # MLP's FP8 GEMMs and casts taken away) and on torchtitan (16-bit grouped experts)
    ("qwen3-30b-a3b", 2, 512, "megatron", "current"),
    ("qwen3-30b-a3b", 2, 512, "megatron", "delayed"),
    ("gpt-oss-120b", 8, 512, "megatron", "current"),
    ("deepseek-v3", 32, 1024, "megatron", "delayed"),
    ("qwen3-30b-a3b", 2, 512, "torchtitan", "rowwise"),
]


@pytest.mark.parametrize(("model", "nodes", "gbs", "stack", "recipe"), FP8)
def test_floor_is_below_the_layer_group_under_fp8(model, nodes, gbs, stack, recipe) -> None:
    req = PlanRequest.model_validate(
        {
            "model": model,
            "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": nodes, "gpus_per_node": 8},
            "training": {
                "global_batch_size": gbs,
                "seq_len": 4096,
                "stack": stack,
                "precision": "fp8",
                "fp8_recipe": recipe,
            },
        }
    )
    ctx = context(req)
    assert check_floors(ctx, req.parallel, req.options) > 10


@pytest.mark.parametrize("seed", range(24))
def test_floor_is_below_the_layer_group_on_random_instances(seed: int) -> None:
    ctx = random_instance(seed)
    assert check_floors(ctx, ParallelPins(), SearchOptions()) > 0


def test_random_instances_have_experts_spread_and_shared() -> None:
    """The seeds cover ep > 1 with etp 1 and etp = tp > 1, a CPU host, and two block kinds (the test really checks)."""
    seen = set()
    for seed in range(24):
        ctx = random_instance(seed)
        cands = enumerate_candidates(ctx, ParallelPins(), SearchOptions())
        seen |= {("ep", c.ep > 1, c.etp > 1) for c in cands}
        seen |= {("host", ctx.gpu.on_host), ("kinds", ctx.model.moe.first_dense_layers > 0)}  # type: ignore[union-attr]
    assert {("ep", True, False), ("ep", True, True), ("host", True), ("kinds", True)} <= seen


def check_families(ctx: Context, pins: ParallelPins, options: SearchOptions) -> int:
    """``frontier.family_floor`` of every family (classes that differ only in ZeRO stage, CP exchange and (ep, etp))
    equals the least ``lean_bound(floor=True)`` of its members, and ``frontier.family_chain`` orders its members in
    groups of one floor key each, the keys non-decreasing; the number of families whose members' floors differ (where
    a family key above that least one would pass a member's place in the queue)."""
    from planner.search.frontier import family_chain, family_floor, lean_key

    cands = enumerate_candidates(ctx, pins, options)
    families: dict[tuple, list] = {}
    for c in cands:
        families.setdefault(lean_key(c)[:-2], []).append(c)
    spread = 0
    for members in families.values():
        floors = [lean_bound(ctx, c, floor=True) for c in members]
        assert family_floor(ctx, members, {}, {}) == min(floors), members[0]
        spread += len(set(floors)) > 1
        # ``family_chain``: every member once, a group's members at one floor key, the groups' keys non-decreasing
        # (the frontier unfolds a family group by group, the rest keyed at the next group's floor)
        chain = family_chain(ctx, members)
        assert sorted(c for g in chain for c in g) == sorted(members)
        group_floors = [{lean_bound(ctx, c, floor=True) for c in g} for g in chain]
        assert all(len(f) == 1 for f in group_floors), members[0]
        firsts = [min(f) for f in group_floors]
        assert firsts == sorted(firsts), members[0]
    return spread


@pytest.mark.parametrize("model", ["deepseek-v3", "mixtral-8x22b", "qwen3-30b-a3b"])
def test_a_family_key_is_its_least_member_floor_on_the_catalog(model: str) -> None:
    """The frontier's one queue item per family of a MoE model (``Key.FAMILY``) is keyed by its least member's floor
    key: a key above it (the first member's, or any but the least) fails here."""
    row = next(r for r in BENCH if r[0] == model)
    _, gpu, nodes, gpn, gbs, seq, stack = row
    req = PlanRequest.model_validate(
        {
            "model": model,
            "cluster": {"gpu": gpu, "num_nodes": nodes, "gpus_per_node": gpn},
            "training": {"global_batch_size": gbs, "seq_len": seq, "stack": stack},
        }
    )
    assert check_families(context(req), req.parallel, req.options) > 10


def test_a_family_key_is_its_least_member_floor_on_random_instances() -> None:
    spread = 0
    for seed in range(24):
        spread += check_families(random_instance(seed), ParallelPins(), SearchOptions())
    assert spread > 10


@pytest.mark.parametrize("model", ["mixtral-8x22b", "qwen3-30b-a3b"])
def test_family_items_leave_the_queue_in_the_order_of_the_classes(model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The frontier with a MoE model's classes queued per family (``Key.FAMILY``) hands the search the same classes
    with the same settled bounds in the same order as with every class queued at its own floor key: the family key is
    ≤ each member's and its order ≤ each member's ``simplicity``."""
    from planner.search import frontier

    row = next(r for r in BENCH if r[0] == model)
    _, gpu, nodes, gpn, gbs, seq, stack = row
    req = PlanRequest.model_validate(
        {
            "model": model,
            "cluster": {"gpu": gpu, "num_nodes": nodes, "gpus_per_node": gpn},
            "training": {"global_batch_size": gbs, "seq_len": seq, "stack": stack},
        }
    )

    def popped(families: bool, n: int = 400) -> list[tuple]:
        monkeypatch.setattr(frontier, "moe_families", lambda ctx: families)
        ctx = context(req)
        q = frontier.Frontier(ctx, req.parallel, enumerate_candidates(ctx, req.parallel, req.options))
        assert any(item.key == frontier.Key.FAMILY for item in q.heap) == families
        out = []
        while len(out) < n and (item := q.pop()) is not None:
            out.append((item.bound, item.cand))
        return out

    with_families = popped(True)
    assert len(with_families) == 400
    assert with_families == popped(False)
