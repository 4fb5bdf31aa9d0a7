"""Pipeline sends where the stack blocks on them (``Stack.p2p_blocking``, cost model 12): Megatron's non-interleaved
1F1B waits for every transfer (``batch_p2p_sync``), so the send is on the sending and the receiving action;
interleaved 1F1B and torch.distributed.pipelining overlap them (an asynchronous lag in the simulation)."""

from __future__ import annotations

import pytest

import planner
from planner.answer.request import complete_pins, context
from planner.compose.cost import boundary_lags, class_costs, evaluate
from planner.specs import PlanRequest


def request(stack: str, schedule: str, v: int = 1) -> PlanRequest:
    return PlanRequest.model_validate(
        {
            "model": "llama3-8b",
            "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 4, "gpus_per_node": 8},
            "training": {"global_batch_size": 64, "seq_len": 4096, "stack": stack},
            "parallel": {"tp": 8, "pp": 4, "dp": 1, "micro_batch_size": 1, "schedule": schedule, "virtual_stages": v},
        }
    )


@pytest.mark.parametrize(
    "stack, schedule, v, blocking",
    [
        ("megatron", "1f1b", 1, True),
        # DeepSpeed's PipelineEngine: p2p.send/recv block (async_op forced False at v0.5.0, asserted False since)
        ("deepspeed", "1f1b", 1, True),
        ("megatron", "interleaved-1f1b", 2, False),
        ("torchtitan", "1f1b", 1, False),
        ("meshplan", "1f1b", 1, False),
    ],
)
def test_blocking_sends_are_on_both_ends_of_every_boundary(stack, schedule, v, blocking):
    req = request(stack, schedule, v)
    ctx = context(req)
    cand, n = complete_pins(ctx, req)
    cc = class_costs(ctx, cand)
    shared = cc.shared
    sends = boundary_lags(ctx, cand, shared.p2p_bytes)
    assert all(t > 0 for t in sends)  # pp = 4 over 4 nodes: every boundary a network transfer
    if blocking:
        assert cc.lag == [0] * len(sends)
        assert cc.f_extra_pp == sends + [0] and cc.b_extra_pp == [0] + sends  # forward sends on, gradients back
    else:
        assert cc.lag == sends and not any(cc.f_extra_pp) and not any(cc.b_extra_pp)
    estimate = planner.estimate(req)
    assert estimate.breakdown.pp_p2p_s > 0


def test_a_blocking_send_costs_at_least_what_an_asynchronous_one_does():
    """The same configuration with the sends as lags (asynchronous) cannot be slower than blocking on them."""
    req = request("megatron", "1f1b")
    ctx = context(req)
    cand, n = complete_pins(ctx, req)
    cc = class_costs(ctx, cand)
    blocking = evaluate(cc, n).objective_ns
    lags = [f for f in cc.f_extra_pp if f]
    async_cc = type(cc)(
        **{
            **{k: getattr(cc, k) for k in cc.__dataclass_fields__},
            "f_extra": [a - b for a, b in zip(cc.f_extra, cc.f_extra_pp)],
            "b_extra": [a - b for a, b in zip(cc.b_extra, cc.b_extra_pp)],
            "lag": lags,
        }
    )
    assert blocking >= evaluate(async_cc, n).objective_ns


@pytest.mark.parametrize(
    "stack, precision, wire",
    [
        ("megatron", "bf16", 4),  # accumulate_allreduce_grads_in_fp32
        ("megatron", "fp16", 2),
        ("torchtitan", "bf16", 4),  # FSDP2 reduce_dtype=float32
        ("meshplan", "bf16", 4),
        ("deepspeed", "bf16", 2),  # communication_data_type = the training dtype
    ],
)
def test_gradients_travel_in_the_dtype_the_stack_reduces_in(stack, precision, wire):
    """The DP sync of a ZeRO-0 plan moves the rank's gradients at ``wire`` bytes each: at twice the bytes the
    exposed sync of a bandwidth-bound all-reduce is about twice as long (within the latency term)."""
    from planner.specs.stacks import STACKS
    from planner.workload.collectives import grad_bytes

    assert grad_bytes(STACKS[stack], precision, 2) == wire


def _zero3_175b(stack: str, gpus: int) -> dict:
    return {
        "model": "gpt3-175b",
        "cluster": {"gpu": "a100-sxm4-80gb", "num_nodes": gpus // 8, "gpus_per_node": 8},
        # the 2021 DeepSpeed runs trained in fp16; torchtitan trains in bf16 (Stack.precisions): the same 2-byte wire
        "training": {
            "global_batch_size": gpus,
            "seq_len": 2048,
            "stack": stack,
            "precision": "fp16" if stack == "deepspeed" else "bf16",
        },
        "parallel": {"tp": 1, "pp": 1, "dp": gpus, "zero_stage": 3, "micro_batch_size": 1, "recompute": "full"},
    }


def test_deepspeed_zero3_gathers_each_linear_module_on_its_own():
    """DeepSpeed fetches each submodule's parameters as one all-gather (forward and again backward); modules under
    the persistence threshold are never gathered; the gradients go in 5e8-element buckets."""
    from planner.specs.stacks import STACKS
    from planner.workload.collectives import PERSISTENCE_THRESHOLD, issuing, zero3_comms
    from planner.workload.ops import linears

    model = context(PlanRequest.model_validate(_zero3_175b("deepspeed", 384))).model
    how = issuing(STACKS["deepspeed"])
    blk, emb, head = zero3_comms(model, how, 1, "all_gather", (1, 2, 3), 2)
    sizes = [lin.n * lin.k + lin.bias for lin in linears(model, "transformer_block", 1)]
    assert [c.nbytes for c in blk] == [2 * p for p in sizes if p >= PERSISTENCE_THRESHOLD] and len(blk) >= 4
    assert [c.nbytes for c in emb + head] == [4, 6]
    rs = zero3_comms(model, how, 1, "reduce_scatter", (10, 20, 30), 2)
    assert all(c.bucket == 2 * 500_000_000 for kind in rs for c in kind)
    # a stack that gathers per layer issues one per layer kind
    per_layer = zero3_comms(model, issuing(STACKS["torchtitan"]), 1, "all_gather", (1, 2, 3), 2)
    assert [len(k) for k in per_layer] == [1, 1, 1]


def test_deepspeed_zero3_pays_more_latency_the_larger_the_data_parallel_group():
    """Each of a block's gathers is a ring over the whole data-parallel group (latency ∝ its nodes): at a fixed
    global batch the exposed ZeRO-3 time grows with dp, and faster than with one gather per layer."""
    exposed = {
        (stack, gpus): planner.estimate(_zero3_175b(stack, gpus)).breakdown.dp_sync_s
        for stack in ("deepspeed", "torchtitan")
        for gpus in (384, 2240)
    }
    assert exposed["deepspeed", 2240] > exposed["deepspeed", 384]
    assert (
        exposed["deepspeed", 2240] / exposed["deepspeed", 384]
        > exposed["torchtitan", 2240] / exposed["torchtitan", 384]
    )
