"""Issue 27 §2: the data-parallel collectives a stack issues per step of m micro-batches (``planner.workload.accumulation``)
— per micro-batch or once — counted by hand from each engine's code (docs/planner.md, "Gradient accumulation"), and
their price and memory in an estimate."""

from __future__ import annotations

import pytest

from planner.api import estimate_plan
from planner.specs.stacks import STACKS
from planner.workload.accumulation import dp_counts, dp_schedule
from runtime.job import defer_gradient_sync

#: (engine, ZeRO stage, under a pipeline schedule, micro-batches) -> (all-gathers, gradient reductions) per unit and
#: step, and whether the gradients accumulate unsharded. Written out from the engines' code, not from the table.
COUNTS = [
    # Megatron DDP / distributed optimizer: no_sync_func until the last micro-batch; dist-opt gathers after the step
    ("megatron", 0, False, 8, 0, 1, False),
    ("megatron", 1, False, 8, 1, 1, False),
    ("megatron", 1, True, 8, 1, 1, False),
    # DeepSpeed: ZeRO-0/1 reduce at the accumulation boundary, ZeRO-2/3 in every backward; ZeRO-3 fetches twice per mb
    ("deepspeed", 1, True, 8, 1, 1, False),
    ("deepspeed", 2, False, 8, 1, 8, False),
    ("deepspeed", 3, False, 8, 16, 8, False),
    # FSDP1 without no_sync (Composer): NO_SHARD all-reduces per mb; SHARD_GRAD_OP frees after each synced backward
    ("fsdp1", 0, False, 8, 0, 8, False),
    ("fsdp1", 2, False, 8, 8, 8, False),
    ("fsdp1", 3, False, 8, 16, 8, False),
    ("fsdp1", 3, False, 1, 2, 1, False),
    # FSDP1 with the non-final micro-batches in no_sync(): one reduction; SHARD_GRAD_OP kept gathered, FULL_SHARD not
    ("fsdp1_no_sync", 0, False, 8, 0, 1, False),
    ("fsdp1_no_sync", 2, False, 8, 1, 1, False),
    ("fsdp1_no_sync", 3, False, 8, 16, 1, True),
    # FSDP2 with gradient sync on (torchtitan's loop); under torch.distributed.pipelining: sync and reshard deferred
    ("fsdp2", 0, False, 4, 0, 4, False),
    ("fsdp2", 2, False, 4, 4, 4, False),
    ("fsdp2", 3, False, 4, 8, 4, False),
    ("fsdp2", 2, True, 4, 1, 1, True),  # ZeRO-2's gradients whole too (cost model 47)
    ("fsdp2", 3, True, 4, 8, 1, True),
    # the bundled runtime: set_requires_gradient_sync(False) until the last mb below ZeRO-3, resharded after backward
    ("fsdp2_deferred", 0, False, 4, 0, 1, False),
    ("fsdp2_deferred", 2, False, 4, 4, 1, False),
    ("fsdp2_deferred", 3, False, 4, 8, 4, False),
    ("fsdp2_deferred", 3, True, 4, 8, 1, True),
]


@pytest.mark.parametrize(("mode", "stage", "piped", "m", "gathers", "reductions", "whole"), COUNTS)
def test_collectives_per_step_as_counted_by_hand(mode, stage, piped, m, gathers, reductions, whole) -> None:
    counts = dp_counts(mode, stage, piped, m)
    assert (counts.all_gather, counts.reduce) == (gathers, reductions)
    assert dp_schedule(mode, stage, piped).whole_grads is whole


def test_presets_name_their_engines_and_the_runtime_defers_as_priced() -> None:
    """The presets' engines; and the meshplan stack's schedule is what ``runtime.job`` does (without a pipeline
    schedule it defers the reduction exactly where the planner prices one reduction per step)."""
    assert {k: STACKS[k].grad_accumulation for k in ("meshplan", "megatron", "torchtitan", "deepspeed")} == {
        "meshplan": "fsdp2_deferred",
        "megatron": "megatron",
        "torchtitan": "fsdp2",
        "deepspeed": "deepspeed",
    }
    for stage in range(4):
        assert defer_gradient_sync(stage) is not dp_schedule("fsdp2_deferred", stage, False).reduce_each, stage


def _request(stack, *, pp: int = 1, zero: int = 3, gbs: int = 64, nodes: int = 2) -> dict:
    return {
        "model": "llama3-8b",
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": nodes, "gpus_per_node": 8},
        "training": {"global_batch_size": gbs, "seq_len": 4096, "stack": stack},
        "parallel": {"tp": 1, "pp": pp, "micro_batch_size": 1, "zero_stage": zero, "schedule": "1f1b"},
        "options": {"memory_headroom": 0.0},
    }


def test_a_deferred_zero3_reduction_keeps_whole_fp32_gradients() -> None:
    """FSDP2 under a pipeline schedule (torchtitan, pp > 1) accumulates ZeRO-3 gradients unsharded in fp32 until the
    last backward: per GPU the gradients are the stage's parameters × 4 bytes — 2·dp times torchtitan's sharded
    16-bit weights (``master`` layout: 2/dp bytes each) — where without a pipeline they are sharded like the weights
    (cost model 47: the fp32 reduce dtype, ``accumulation.accumulated_grad_bytes``; was 2 bytes)."""
    plain = estimate_plan(_request("torchtitan", pp=1)).estimate.memory_per_stage[0]
    assert plain.gradients_gib == pytest.approx(plain.weights_gib, rel=1e-6)
    piped = estimate_plan(_request("torchtitan", pp=2)).estimate.memory_per_stage[0]
    dp = 8  # 16 GPUs / pp 2
    assert piped.gradients_gib == pytest.approx(2 * dp * piped.weights_gib, rel=1e-6)


def test_fsdp1_pays_a_reduce_scatter_per_micro_batch() -> None:
    """ZeRO-2 on 64 GPUs at one sequence per micro-batch (communication-bound): FSDP1 without no_sync
    (``grad_accumulation: fsdp1``) reduce-scatters every micro-batch, the bundled runtime once per step. The extra time
    grows with the micro-batches: (m − 1) reduce-scatters, so 8 micro-batches cost more than 3× the extra of 2."""

    def extra(m: int) -> float:
        gbs = 64 * m
        fsdp1 = estimate_plan(_request({"base": "meshplan", "grad_accumulation": "fsdp1"}, zero=2, gbs=gbs, nodes=8))
        once = estimate_plan(_request("meshplan", zero=2, gbs=gbs, nodes=8))
        # the DP part of the breakdown: the step also holds the deferred runtime's unsharded fp32 gradient accumulation
        # in every backward (cost model 37, ``accumulation.add_bytes``), which FSDP1's sharded accumulation does not pay
        return fsdp1.estimate.breakdown.dp_sync_s - once.estimate.breakdown.dp_sync_s

    two, eight = extra(2), extra(8)
    assert two > 0
    assert eight > 3 * two


def test_fsdp1_no_sync_holds_whole_gradients_in_the_parameter_dtype() -> None:
    """FSDP1 with the non-final micro-batches in ``no_sync()`` keeps FULL_SHARD's gradients unsharded until the last
    backward: with 16-bit weights and gradients (``master`` layout: 2 bytes each, sharded weights 2/dp) the gradients
    per GPU are dp × the weights; reduced in every micro-batch (DeepSpeed ZeRO-3) they are sharded like the weights."""
    sharded = estimate_plan(_request("deepspeed", gbs=128)).estimate.memory_per_stage[0]
    assert sharded.gradients_gib == pytest.approx(sharded.weights_gib, rel=1e-6)
    whole = estimate_plan(_request({"base": "deepspeed", "grad_accumulation": "fsdp1_no_sync"}, gbs=128))
    mem = whole.estimate.memory_per_stage[0]
    assert mem.gradients_gib == pytest.approx(16 * mem.weights_gib, rel=1e-6)  # dp = 16 GPUs
