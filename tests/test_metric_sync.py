"""Cost model 65: a Composer trainer's per-batch sync of its train metrics over all ranks (``pricing.metric_sync``;
docs/planner.md, "Composer's train metrics"). Per metric two 0-dim states (float32 ``sum_loss``, int64 ``total_items``),
each synced by torchmetrics' ``gather_all_tensors``: a barrier (a 1-byte all-reduce the host waits for), world-size
``zeros_like`` launches, then the list all-gather beside the world-size copy-out launches. Counted here by hand from
those steps, at the eager launch floor of 4 µs, with the two collectives' prices read from the comm model (priced
and tested on their own in tests of ``pricing.comm``/``pricing.nccl``)."""

from __future__ import annotations

import pytest

from planner.answer.request import complete_pins, context
from planner.compose.terms import class_terms
from planner.pricing.metric_sync import metric_sync_seconds
from planner.specs import PlanRequest

LAUNCH_S = 4e-6  # gpu.GPU_LAUNCH_US with the identity residuals (kernel_overhead_us 0)


def _request(nodes: int, metrics: int) -> PlanRequest:
    return PlanRequest.model_validate(
        {
            "model": "llama3-8b",
            "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": nodes, "gpus_per_node": 8},
            "training": {
                "global_batch_size": 8 * nodes,
                "seq_len": 2048,
                "precision": "bf16",
                "stack": {"base": "meshplan", "train_metrics": metrics},
            },
            "parallel": {"tp": 1, "pp": 1, "micro_batch_size": 1, "zero_stage": 3, "recompute": "full"},
        }
    )


@pytest.mark.parametrize(("nodes", "metrics"), [(1, 2), (16, 2), (64, 2), (64, 1)])
def test_by_hand(nodes: int, metrics: int) -> None:
    ctx = context(_request(nodes, metrics))
    n = 8 * nodes
    link = "intra_node" if nodes == 1 else "inter_node"
    barrier = ctx.comm.time("all_reduce", 1, n, link, 8)
    fills = copies = n * LAUNCH_S
    by_hand = 0.0
    for elt in (4, 8):  # sum_loss float32, total_items int64
        by_hand += barrier + fills + max(ctx.comm.time("all_gather", elt * n, n, link, 8), copies)
    assert metric_sync_seconds(ctx) == pytest.approx(metrics * by_hand)


def test_512_gpus_is_launch_bound() -> None:
    """At 512 GPUs each state's 2 × 512 launches (4.1 ms) outweigh its gather: ≈ 4 × (barrier + 4.1 ms)."""
    ctx = context(_request(64, 2))
    barrier = ctx.comm.time("all_reduce", 1, 512, "inter_node", 8)
    assert ctx.comm.time("all_gather", 8 * 512, 512, "inter_node", 8) < 512 * LAUNCH_S
    assert metric_sync_seconds(ctx) == pytest.approx(4 * (barrier + 2 * 512 * LAUNCH_S))
    assert 16e-3 < metric_sync_seconds(ctx) < 18e-3


def test_none_without_metrics_or_on_one_gpu() -> None:
    assert metric_sync_seconds(context(_request(64, 0))) == 0.0
    one = _request(1, 2).model_copy(deep=True)
    one.cluster.gpus_per_node = 1
    one.training.global_batch_size = 1
    assert metric_sync_seconds(context(one)) == 0.0


def test_once_per_step_in_the_end_term() -> None:
    """The sync is in the step's constant end term (the optimizer's ``opt``), once, whatever the micro-batches."""
    with_m, without = (_request(16, m) for m in (2, 0))
    with_m.training.global_batch_size = without.training.global_batch_size = 4 * 128  # 4 micro-batches per rank
    got = []
    for req in (with_m, without):
        ctx = context(req)
        cand, _ = complete_pins(ctx, req)
        got.append(class_terms(ctx, cand).opt)
    assert got[0].const - got[1].const == pytest.approx(metric_sync_seconds(context(with_m)) * 1e9, abs=2)
    assert (got[0].layer, got[0].emb, got[0].head) == (got[1].layer, got[1].emb, got[1].head)
