"""Cost model 41: DeepSpeed's PipelineEngine partitions its pipeline sends over the TP group (``Stack.p2p_scatter_gather``
on the ``deepspeed`` preset). With tp > 1 each rank sends its 1/tp of the activation (forward) and of its gradient
(backward) as a ``PartitionedTensor`` and the receiver all-gathers it over TP (``PartitionedTensor.full()``):
``pipe_partitioned`` / ``grad_partitioned`` default True (microsoft/DeepSpeed 38327e07f6 runtime/config.py:467-468),
``is_pipe_partitioned = is_model_parallel and ...`` (runtime/pipe/engine.py:144-145), the partition before the send
(engine.py:743-757, 1062-1075) and the gathers on arrival (engine.py:719-727, 824-845); both directions since v0.5.4
(e2fdd254e, "Big science related changes", 2021-09-29). ``deepspeed-2021`` (v0.5.0: ``is_grad_partitioned = False``)
keeps the whole sends. Each boundary's lag is checked against the hand formula: send(act / tp) over the boundary's
link + all_gather(act, tp) over NVLink."""

from __future__ import annotations

import pytest

from planner.answer.request import complete_pins, context
from planner.compose.cost import boundary_lags, class_costs
from planner.specs import PlanRequest
from planner.specs.stacks import STACKS

H, S = 4096, 2048  # gpt3-6.7b's hidden size; the sequence


def _lags(stack: str, nodes: int, precision: str, **pins) -> tuple:
    req = PlanRequest.model_validate(
        {
            "model": "gpt3-6.7b",
            "cluster": {"gpu": "a100-sxm4-80gb", "num_nodes": nodes, "gpus_per_node": 8},
            "training": {"global_batch_size": 512, "seq_len": S, "stack": stack, "precision": precision},
            "parallel": {"micro_batch_size": 1, "zero_stage": 1, "recompute": "full", **pins},
        }
    )
    ctx = context(req)
    cand, _ = complete_pins(ctx, req)
    return ctx, cand, class_costs(ctx, cand)


#: (preset, partitions its sends over TP, the code fact)
PRESETS = [
    ("deepspeed", True, "engine.py:144-145 is_pipe_partitioned / is_grad_partitioned = is_model_parallel and config"),
    ("deepspeed-2021", False, "v0.5.0 engine.py:113-114: activations partitioned, is_grad_partitioned = False"),
]


@pytest.mark.parametrize("stack,flag,fact", PRESETS, ids=[p[0] for p in PRESETS])
def test_which_deepspeed_presets_partition(stack: str, flag: bool, fact: str) -> None:
    assert STACKS[stack].p2p_scatter_gather is flag, fact


#: (pins, nodes, the link of every boundary, precision)
LAG_CASES = [
    ({"tp": 8, "pp": 4, "dp": 1}, 4, "inter_node", "bf16"),  # a stage per node: every boundary on the network
    ({"tp": 2, "pp": 4, "dp": 1}, 1, "intra_node", "bf16"),  # the pipeline inside a node
    ({"tp": 4, "pp": 2, "dp": 4}, 4, "inter_node", "fp16"),  # 16 GPUs a stage
    ({"tp": 4, "pp": 4, "dp": 2, "micro_batch_size": 2}, 4, "inter_node", "bf16"),
]


@pytest.mark.parametrize("pins,nodes,link,precision", LAG_CASES)
def test_a_partitioned_send_is_act_over_tp_plus_the_all_gather(pins: dict, nodes: int, link: str, precision: str):
    """Each boundary on ``deepspeed``: send(act / tp) + all_gather(act, tp) with act = s·b·h 16-bit bytes, blocking
    both ends (cost model 28); ``deepspeed-2021`` sends act whole over the same link."""
    ctx, cand, cc = _lags("deepspeed", nodes, precision, **pins)
    tp, b = pins["tp"], pins.get("micro_batch_size", 1)
    act = S * b * H * 2
    hand = ctx.comm.time("send_recv", act / tp, 2, link) + ctx.comm.time("all_gather", act, tp, "intra_node", tp)
    sends = boundary_lags(ctx, cand, cc.shared.p2p_bytes)
    assert len(sends) == cand.chunks - 1 and all(abs(t - hand * 1e9) <= 1 for t in sends), (sends, hand)
    assert cc.lag == [0] * len(sends) and cc.f_extra_pp == sends + [0] and cc.b_extra_pp == [0] + sends
    if precision == "fp16":  # v0.5.0 has no bf16
        ctx0, cand0, cc0 = _lags("deepspeed-2021", nodes, precision, **pins)
        whole = ctx0.comm.time("send_recv", act, 2, link)
        assert all(abs(t - whole * 1e9) <= 1 for t in boundary_lags(ctx0, cand0, cc0.shared.p2p_bytes))


def test_one_tp_rank_sends_whole() -> None:
    """tp = 1: no TP group to partition over (``is_model_parallel`` False): the send of act alone."""
    ctx, cand, cc = _lags("deepspeed", 4, "bf16", tp=1, pp=4, dp=8)
    one = ctx.comm.time("send_recv", S * H * 2, 2, "inter_node")
    assert all(abs(t - one * 1e9) <= 1 for t in boundary_lags(ctx, cand, cc.shared.p2p_bytes))
