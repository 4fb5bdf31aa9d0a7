"""The pipeline boundaries of a GPT-3 6.7B request on A100 nodes, priced and checked against the hand formulas of a
scattered send (Megatron-LM v2.5's scatter-gather, DeepSpeed's partitioned tensors) and of a whole one."""

from __future__ import annotations

from planner.answer.request import complete_pins, context
from planner.compose.cost import boundary_lags, class_costs
from planner.specs import PlanRequest

H, S = 4096, 2048  # gpt3-6.7b's hidden size; the sequence


def body(stack: str, precision: str = "fp16", nodes: int = 4, zero_stage: int = 0, **pins) -> dict:
    return {
        "model": "gpt3-6.7b",
        "cluster": {"gpu": "a100-sxm4-80gb", "num_nodes": nodes, "gpus_per_node": 8},
        "training": {"global_batch_size": 512, "seq_len": S, "stack": stack, "precision": precision},
        "parallel": {"micro_batch_size": 1, "zero_stage": zero_stage, **pins} if pins else {},
    }


def lags(stack: str, nodes: int, precision: str = "fp16", zero_stage: int = 0, **pins) -> tuple:
    req = PlanRequest.model_validate(body(stack, precision, nodes, zero_stage, **pins))
    ctx = context(req)
    cand, _ = complete_pins(ctx, req)
    return ctx, cand, class_costs(ctx, cand)


def assert_scattered_sends(stack: str, nodes: int, link: str, precision: str, **pins) -> None:
    """Each boundary of ``stack``: the send of act / tp (act = s·b·h 16-bit bytes) over the boundary's link + the
    all-gather of act over the tp ranks of a node (NVLink), on the sending action, blocking both ends."""
    ctx, cand, cc = lags(stack, nodes, precision, **pins)
    tp, b = pins["tp"], pins.get("micro_batch_size", 1)
    act = S * b * H * 2
    hand = ctx.comm.time("send_recv", act / tp, 2, link) + ctx.comm.time("all_gather", act, tp, "intra_node", tp)
    sends = boundary_lags(ctx, cand, cc.shared.p2p_bytes)
    assert len(sends) == cand.chunks - 1 and all(abs(t - hand * 1e9) <= 1 for t in sends), (sends, hand)
    assert cc.lag == [0] * len(sends) and cc.f_extra_pp == sends + [0] and cc.b_extra_pp == [0] + sends


def assert_whole_sends(stack: str, nodes: int, link: str, precision: str, **pins) -> None:
    """Each boundary of ``stack``: the send of the whole act over the boundary's link."""
    ctx, cand, cc = lags(stack, nodes, precision, **pins)
    act = S * pins.get("micro_batch_size", 1) * H * 2
    whole = ctx.comm.time("send_recv", act, 2, link)
    assert all(abs(t - whole * 1e9) <= 1 for t in boundary_lags(ctx, cand, cc.shared.p2p_bytes))
