"""The end of a step as each stack issues it, and the fabric above a scalable unit (cost model 18, issue 27 §2):
Megatron-core's ``finalize_model_grads`` reductions, gradient buckets as the stack sizes them, and
``ClusterSpec.oversubscription`` / ``scalable_unit_nodes``. Each priced figure is checked against the ring
formula worked out here from the comm model's own pieces (latency + bus bytes ÷ rate)."""

from __future__ import annotations

import pytest

import planner
from planner.answer.request import complete_pins, context
from planner.compose.cost import class_costs, evaluate
from planner.pricing import nccl
from planner.pricing.comm import DEFAULT_SU_NODES, CommModel
from planner.specs import ClusterSpec, PlanRequest
from planner.specs.catalog import get_gpu
from planner.specs.stacks import STACKS
from planner.workload.collectives import (
    Collective,
    grad_bucket,
    grad_bucket_params,
    megatron_finalize,
    tied_embedding_sync,
)


def gpt(tied: bool) -> dict:
    """A GPT-3-1.3B-shaped model (LayerNorm, vocabulary 51,200 = 8 · 6,400), its embeddings tied or not."""
    return {
        "name": f"gpt-{'tied' if tied else 'untied'}",
        "family": "gpt",
        "num_layers": 24,
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "num_kv_heads": 16,
        "ffn_hidden_size": 8192,
        "activation": "gelu",
        "norm": "layernorm",
        "vocab_size": 51200,
        "max_seq_len": 2048,
        "tie_embeddings": tied,
    }


@pytest.mark.parametrize(
    "tied, tp, sp, coalesced, head, once",
    [
        # SP: one coalesced all-reduce of the norms' fp32 main grads (LayerNorm: weight + bias), growing per block
        (False, 8, True, (2 * 2048 * 4, 2 * 2 * 2048 * 4), (), 1),
        # tied: the word embedding's main grad, its TP shard, between the first and the last stage
        (True, 8, False, None, (Collective("pp", "all_reduce", 51200 // 8 * 2048 * 4),), 1),
        (True, 1, False, None, (Collective("pp", "all_reduce", 51200 * 2048 * 4),), 0),
        (True, 8, True, (2 * 2048 * 4, 2 * 2 * 2048 * 4), (Collective("pp", "all_reduce", 51200 // 8 * 2048 * 4),), 1),
        # nothing but the grad norm's all-reduce over TP
        (False, 4, False, None, (), 1),
        (False, 1, False, None, (), 0),
    ],
)
def test_megatron_finalize_lists_what_finalize_model_grads_issues(tied, tp, sp, coalesced, head, once):
    model = planner.specs.ModelSpec.model_validate(gpt(tied))
    r = megatron_finalize(model, 4, tp, sp)
    assert r.coalesced == coalesced
    assert r.per_kind == ((), (), ())
    assert len(r.once) == once
    assert tied_embedding_sync(model, 4, tp) == head


def ring_time(cm: CommModel, size: float, n: int, per_node: int, nic: float) -> float:
    """An inter-node all-reduce by hand: the cheapest of NCCL's pairs (``nccl.pairs``, their latency at this size) with
    the bytes at the ring curve capped by the node's NICs and by the pair's bus bandwidth (``nccl.Pair``)."""
    rate = cm.ring_rate(size) * min(1.0, per_node * nic / cm.ring_asymptote())
    t = cm.topo(n, per_node)
    return min(
        nccl.price("all_reduce", p, size, t, "2.23").lat_us * 1e-6
        + size / (min(rate, p.bus_bw * 1e9) * p.alg_bw / p.bus_bw)
        for p in nccl.pairs("all_reduce", t, "2.23")
    )


def megatron_request(tied: bool, pp: int, nodes: int = 2, **cluster) -> PlanRequest:
    return PlanRequest.model_validate(
        {
            "model": gpt(tied),
            "cluster": {"gpu": "a100-sxm4-80gb", "num_nodes": nodes, "gpus_per_node": 8, **cluster},
            "training": {"global_batch_size": 64, "seq_len": 2048, "stack": "megatron"},
            "parallel": {"tp": 8, "pp": pp, "dp": nodes * 8 // (8 * pp), "micro_batch_size": 1, "zero_stage": 0},
        }
    )


def priced(req: PlanRequest, finalize: str) -> tuple[object, tuple[int, int, int, int], int]:
    """(context, the class's end-of-step optimizer term (once, per block, embedding, LM head), the step ns) of ``req``
    on Megatron with ``finalize_grads`` as given."""
    ctx = context(req)
    ctx.__dict__["stack"] = STACKS["megatron"].model_copy(update={"finalize_grads": finalize})
    cand, n = complete_pins(ctx, req)
    cc = class_costs(ctx, cand)
    return ctx, tuple(cc.shared.opt), evaluate(cc, n).objective_ns  # type: ignore[return-value]  # (const, layer, emb, head, moe)


def test_the_tied_embedding_all_reduce_is_on_the_lm_heads_rank_at_the_ring_time():
    """Tied embeddings, pp 2 over two nodes: the first and the last rank end with one all-reduce of V/t · h fp32
    over the two of them, on two nodes; every rank the grad norm's all-reduce over TP; nothing per block (no SP)."""
    req = megatron_request(tied=True, pp=2)
    ctx, with_, step_with = priced(req, "megatron")
    _, without, step_without = priced(req, "none")
    cm = ctx.comm
    size = 51200 // 8 * 2048 * 4
    expected = ring_time(cm, size, 2, 1, cm.nic_Bps())
    norm = cm.time("all_reduce", 4, 8, "intra_node", 8)
    d = [a - b for a, b in zip(with_, without)]
    assert d[0] == pytest.approx(norm * 1e9, abs=2)  # once per rank: the grad norm
    assert not any(d[1:])  # per block, embedding, head (, MoE layer): nothing (the tied all-reduce is its own term)
    assert step_with - step_without == pytest.approx((norm + expected) * 1e9, abs=4)


def test_without_an_embedding_group_only_the_grad_norm_reaches_the_step():
    """pp = 1: the LM head shares the embedding's chunk, no embedding group exists and nothing is all-reduced
    between stages; the step moves by the grad norm's all-reduce alone."""
    req = megatron_request(tied=True, pp=1, nodes=1)
    ctx, _, step_with = priced(req, "megatron")
    _, _, step_without = priced(req, "none")
    norm = ctx.comm.time("all_reduce", 4, 8, "intra_node", 8)
    assert step_with - step_without == pytest.approx(norm * 1e9, abs=2)


@pytest.mark.parametrize(
    "stack, overlap, dp, total, bucket",
    [
        ("megatron", False, 64, 10**10, 10**10),  # one bucket without overlap_grad_reduce
        ("megatron", True, 64, 10**10, grad_bucket_params(64)),  # max(40M, 1M·dp) with it
        ("megatron", True, 128, 10**10, 128_000_000),
        ("megatron", True, 64, 10**6, 10**6),  # never more than the model
        ("deepspeed", False, 64, 10**10, 500_000_000),  # reduce_bucket_size
    ],
)
def test_gradient_buckets_are_the_stacks(stack, overlap, dp, total, bucket):
    s = STACKS[stack].model_copy(update={"overlap_grad_reduce": overlap})
    assert grad_bucket(s, dp, total) == bucket


@pytest.mark.parametrize(
    "oversubscription, su, n, slowed",
    [
        (None, None, 64, False),  # unset: non-blocking
        (1.0, None, 64, False),
        (2.0, None, 32, False),  # 32 nodes: one scalable unit, one switch hop
        (2.0, None, 33 * 1, True),  # one node beyond the unit: through the spine
        (2.0, None, 512, True),
        (3.0, 16, 17, True),
        (3.0, 64, 512, True),
        (3.0, 64, 64, False),
    ],
)
def test_a_group_leaving_its_scalable_unit_gets_the_nic_rate_over_the_oversubscription(oversubscription, su, n, slowed):
    gpu = get_gpu("h100-sxm5-80gb")
    cluster = ClusterSpec(
        gpu=gpu, num_nodes=512, gpus_per_node=8, oversubscription=oversubscription, scalable_unit_nodes=su
    )
    cm = CommModel.for_cluster(cluster, gpu)
    plain = CommModel.for_cluster(ClusterSpec(gpu=gpu, num_nodes=512, gpus_per_node=8), gpu)
    nic = plain.nic_Bps() / (oversubscription if slowed else 1.0)
    assert cm.unscaled_time("all_reduce", 2e9, n, "inter_node", 1) == pytest.approx(ring_time(plain, 2e9, n, 1, nic))
    assert (
        cm.unscaled_time("all_reduce", 2e9, n, "inter_node", 1)
        > plain.unscaled_time("all_reduce", 2e9, n, "inter_node", 1)
    ) == slowed
    assert cm.su_nodes == (su or DEFAULT_SU_NODES)


def test_unset_fabric_fields_change_neither_the_request_nor_its_estimate():
    req = megatron_request(False, 1, nodes=64)
    assert "oversubscription" not in req.cluster.model_dump() and "scalable_unit_nodes" not in req.cluster.model_dump()
    same = megatron_request(False, 1, nodes=64, oversubscription=1.0)
    assert same.cluster.model_dump()["oversubscription"] == 1.0
    a, b = planner.estimate(req), planner.estimate(same)
    assert a.step_time_s == b.step_time_s
    # 2:1 above the unit: 64 nodes of DP leave it, the gradient all-reduce slows, the compute does not
    slow = planner.estimate(megatron_request(False, 1, nodes=64, oversubscription=2.0))
    assert slow.breakdown.dp_sync_s > a.breakdown.dp_sync_s
    assert slow.breakdown.compute_s == a.breakdown.compute_s


@pytest.mark.parametrize(
    "field, value, fragment",
    [
        ("oversubscription", 0.5, "oversubscription"),
        ("oversubscription", 100, "oversubscription"),
        ("scalable_unit_nodes", 0, "scalable_unit_nodes"),
    ],
)
def test_bad_fabric_fields_are_named(field, value, fragment):
    with pytest.raises(ValueError, match=fragment):
        ClusterSpec(gpu="h100-sxm5-80gb", num_nodes=4, gpus_per_node=8, **{field: value})
