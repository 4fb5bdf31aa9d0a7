"""Cost model 34: the gradient-accumulation pass (``accumulation.add_bytes``, ``pricing.grad_add``): the bytes each
stack moves per parameter to add one micro-batch's weight gradients into the step's, written out by hand from each
stack's code at its version (docs/planner.md, "Gradient accumulation pass"), and their seconds in a block's backward
from the datasheet bandwidth and the HBM curve's ≥ 100 MB efficiency (0.90), written out here, not read from the code."""

from __future__ import annotations

import pytest

from planner.answer.request import context
from planner.compose.terms import kind_terms
from planner.specs import PlanRequest
from planner.specs.stacks import STACKS
from planner.workload.accumulation import AddBytes, add_bytes, dp_schedule

#: (stack, precision, ZeRO stage, pipelined, dp) -> (each, first, step, fused C) bytes per local parameter, by hand
CASES = [
    # Megatron-LM v2.0: no main grads, autograd adds fp16 .grad in place from the 2nd micro-batch (read 2+2, write 2)
    ("megatron-2020", "fp16", 0, True, 8, 6.0, 0.0, 0.0, 0),
    # v2.5: --bf16 forces fp32 main grads: the hook reads the bf16 .grad (2) and main_grad (4), writes main_grad (4);
    # the buffer zeroed each step (4); fp16 without --accumulate-allreduce-grads-in-fp32: no buffer, autograd
    ("megatron-2021", "bf16", 0, True, 8, 10.0, 10.0, 4.0, 0),
    ("megatron-2021", "fp16", 0, True, 8, 6.0, 0.0, 0.0, 0),
    # 52e636888c and core 0.16.1: the same hook for non-linear parameters, the linears fused into the wgrad GEMM's C
    ("megatron-2022", "bf16", 1, True, 8, 10.0, 10.0, 4.0, 4),
    ("megatron", "bf16", 0, False, 8, 10.0, 10.0, 4.0, 4),
    ("megatron", "fp16", 1, True, 8, 6.0, 6.0, 2.0, 2),  # fp16 main grads (reduce_dtype fp32_bf16)
    # DeepSpeed ZeRO-0/1 in 16 bits: autograd; bf16 at ZeRO-0: BF16_Optimizer's fp32 add after every backward
    ("deepspeed-2021", "fp16", 1, True, 8, 6.0, 0.0, 0.0, 0),
    ("deepspeed", "bf16", 1, True, 8, 6.0, 0.0, 0.0, 0),
    ("deepspeed", "bf16", 0, True, 8, 10.0, 10.0, 4.0, 0),
    # DeepSpeed ZeRO-2/3 reduce every micro-batch: the 16-bit partition (1/dp) accumulated from the 2nd
    ("deepspeed", "bf16", 2, False, 8, 6.0 / 8, 0.0, 0.0, 0),
    # FSDP2 with sync on (torchtitan): the fp32 shard (1/dp) += the reduced one from the 2nd micro-batch
    ("torchtitan", "bf16", 3, False, 4, 12.0 / 4, 0.0, 0.0, 0),
    # FSDP2 with sync deferred (the runtime below ZeRO-3; torchtitan under a pipeline schedule): the unsharded bf16
    # gradient copied into fp32 (read 2, write 4), then added (read 2 + 4, write 4)
    ("meshplan", "bf16", 1, False, 8, 10.0, 6.0, 0.0, 0),
    ("torchtitan", "bf16", 2, True, 8, 10.0, 6.0, 0.0, 0),
    ("meshplan", "fp32", 1, False, 8, 12.0, 0.0, 0.0, 0),  # one dtype: autograd in fp32
]


@pytest.mark.parametrize(("stack", "precision", "zero", "pipelined", "dp", "each", "first", "step", "c"), CASES)
def test_add_bytes_by_hand(stack, precision, zero, pipelined, dp, each, first, step, c) -> None:
    s = STACKS[stack]
    elt = 4 if precision == "fp32" else 2
    main = 4 if s.reduce_dtype == "fp32" or (s.reduce_dtype == "fp32_bf16" and precision == "bf16") else elt
    sched = dp_schedule(s.grad_accumulation, zero, pipelined)
    assert add_bytes(s.grad_add, s.grad_accumulation, zero, sched, precision, elt, main, dp) == AddBytes(
        each, first, step, c
    )


def _ctx(stack: str, precision: str):
    """GPT-3 13B (h 5120) on 8 A100 80 GB, tp 1, pp 1."""
    return context(
        PlanRequest.model_validate(
            {
                "model": "gpt3-13b",
                "cluster": {"gpu": "a100-sxm4-80gb", "num_nodes": 1, "gpus_per_node": 8},
                "training": {"global_batch_size": 64, "seq_len": 2048, "stack": stack, "precision": precision},
                "parallel": {"tp": 1, "pp": 1, "micro_batch_size": 1, "zero_stage": 0, "recompute": "full"},
            }
        )
    )


#: (mbs, tp, sp, recompute, zero stage, dp, TP overlap, ep, etp, pipelined)
KEY = (1, 1, False, "full", 0, 8, False, 1, 1, False)
H = 5120
#: a GPT block by hand: QKV 3h² + 3h, proj h² + h, fc1 4h² + 4h, fc2 4h² + h, two LayerNorms 2h each; 12 tensors
BLOCK = 12 * H * H + 13 * H
TENSORS = 12
BW = 2039e9 * 0.90  # A100 SXM4 80 GB datasheet HBM × the achieved fraction above 100 MB


def test_v25_bf16_hook_against_fp16_autograd() -> None:
    """Megatron-LM v2.5: a block's backward under bf16 holds the fp32 main-grad add (10 B per parameter) in every
    micro-batch, under fp16 autograd's (6 B); once per step bf16 zeroes its buffer (4 B). Every tensor averages
    ≥ 100 MB at 6 B (h = 5120)."""
    assert BLOCK / TENSORS * 6 >= 100e6
    bf16 = kind_terms(_ctx("megatron-2021", "bf16"), KEY, "transformer_block")
    fp16 = kind_terms(_ctx("megatron-2021", "fp16"), KEY, "transformer_block")
    assert bf16.bwd.layer - fp16.bwd.layer == pytest.approx(BLOCK * (10 - 6) / BW * 1e9, abs=3)
    # once per step: bf16's zeroing (4 B), beside the optimizer step's own difference (fp16's loss-scale unscale and
    # inf check: LOSS_SCALE_BYTES, 8 B, over the same parameters)
    assert bf16.opt.layer - fp16.opt.layer == pytest.approx(BLOCK * (4 - 8) / BW * 1e9, abs=3)


def test_fused_wgrad_is_free_when_the_gemm_is_compute_bound() -> None:
    """Megatron-LM 52e636888c under bf16: the linears' weights accumulate in their wgrad GEMM (C read and written in
    fp32: 5120 × 15360 × 8 B = 0.63 GB, 0.34 ms, under its 0.32 TFLOP's ≈ 1.3 ms), so the backward carries only the
    hooks of the biases and LayerNorms (10 B each, small kernels) — against v2.5's hook over every parameter."""
    fused = kind_terms(_ctx("megatron-2022", "bf16"), KEY, "transformer_block")
    hooks = kind_terms(_ctx("megatron-2021", "bf16"), KEY, "transformer_block")
    whole = BLOCK * 10 / BW * 1e9
    assert hooks.bwd.layer - fused.bwd.layer > 0.9 * whole
    assert hooks.bwd.layer - fused.bwd.layer < whole


def test_fused_experts_count_the_ranks_share() -> None:
    """gpt-oss-120b under Megatron-core with EP 8: the block's dense linears (wq 4096×2880, wk and wv 512×2880, wo
    2880×4096, the router 128×2880) and 128/8 = 16 of its 128 experts (w1, w3, w2 of 2880×2880 each) accumulate in
    their wgrad GEMMs. Each local expert's GEMM runs over 4096·4/128·8 = 1,024 tokens: its fp32 C (2880² × 8 B =
    66 MB, ≈ 22 µs) is at most what it adds, and it adds something (the bf16 GEMM's 17 GFLOP take ≈ 21 µs)."""
    from planner.pricing.grad_add import fused_wgrad_seconds
    from planner.workload.ops import MOE_BLOCK

    ctx = context(
        PlanRequest.model_validate(
            {
                "model": "gpt-oss-120b",
                "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 8, "gpus_per_node": 8},
                "training": {"global_batch_size": 1280, "seq_len": 4096, "stack": "megatron"},
                "parallel": {"tp": 1, "pp": 4, "ep": 8, "micro_batch_size": 1, "zero_stage": 0},
            }
        )
    )
    dense = 4096 * 2880 + 2 * 512 * 2880 + 2880 * 4096 + 128 * 2880
    experts = 3 * 2880 * 2880 * 128
    extra8, w8 = fused_wgrad_seconds(ctx, MOE_BLOCK, 4096, 1, 4, experts // 8)
    assert w8 == dense + experts // 8
    c_bytes_s = 3 * 16 * 2880 * 2880 * 8 / (3352e9 * 0.90)  # 48 expert GEMMs' fp32 C, ≥ 100 MB curve point
    assert 0 < extra8 <= 1.2 * c_bytes_s
    _, w_all = fused_wgrad_seconds(ctx, MOE_BLOCK, 4096, 1, 4, experts)
    assert w_all == dense + experts
