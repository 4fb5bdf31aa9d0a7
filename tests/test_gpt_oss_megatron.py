"""gpt-oss as Megatron-core runs it (cost model 49), against hand computations written here from the cited code:

* the experts' clamped SwiGLU is clamped outside the fused activation (Megatron-LM ``megatron/core/fusions/
  fused_bias_geglu.py:424-431`` ``weighted_bias_quick_geglu_impl``, at every commit Megatron-Bridge v0.2.0–v0.4.2
  pins): ``input.chunk(2, -1)``, ``x_glu.clamp(max=limit)``, ``x_linear.clamp(min=-limit, max=limit)``,
  ``torch.cat``; its backward PyTorch's ``clamp_backward`` (``where(self <= max, grad, 0)`` and
  ``where((self >= min).logical_and_(self <= max), grad, 0)``), ``cat_tensors_backward`` (views) and the chunk's
  ``split_backward`` (a cat), pytorch/pytorch 002ca6715b ``torch/csrc/autograd/FunctionsManual.cpp``;
* FlashAttention-2's causal fwd+bwd rates on H100 at head dim 64: panel (c) of Dao-AILab/flash-attention
  ``assets/flash2_h100_fwd_bwd_benchmark.png`` (141, 192, 232, 257, 273, 284 TFLOP/s at 512 … 16k)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.answer.request import context
from planner.pricing.expert_parallel import expert_seconds
from planner.pricing.gpu import HBM_EFFICIENCY, flash_rate
from planner.specs import PlanRequest
from planner.specs.catalog import get_model
from planner.workload.expert_parallel import clamp_ops, expert_work


def _hand_clamp_bytes(rows: int, f: int, beta: int) -> tuple[float, float]:
    """Bytes each way, op by op as the cited code runs them over fc1's output [rows, 2f] (β bytes an element, a bool
    mask 1 byte an element)."""
    half = rows * f  # elements of one half
    fwd = [
        half * beta + half * beta,  # x_glu.clamp(max): read the half, write a new one
        half * beta + half * beta,  # x_linear.clamp(min, max)
        2 * half * beta + 2 * half * beta,  # torch.cat of the two clamped halves
    ]
    bwd = [
        half * beta + half,  # gate: self <= max (read self, write a mask)
        half + half * beta + half * beta,  # where(mask, grad, 0): read mask and grad, write
        half * beta + half,  # up: self >= min
        half * beta + half,  # self <= max
        half + half + half,  # logical_and_ in place: read two masks, write one
        half + half * beta + half * beta,  # where
        2 * half * beta + 2 * half * beta,  # split_backward: cat of the halves' gradients
    ]
    return float(sum(fwd)), float(sum(bwd))


@pytest.mark.parametrize(
    ("rows", "f", "beta"),
    [
        (16384, 2880, 2),  # gpt-oss-120b at 4096 tokens, top-4, EP 8: a rank's routed rows, whole experts
        (8192, 2880, 2),  # gpt-oss-20b-like rows
        (16384, 1440, 2),  # expert TP 2 halves f
        (1000, 64, 4),  # fp32
        (0, 2880, 2),  # no rows
    ],
)
def test_clamp_ops_against_the_cited_code(rows: int, f: int, beta: int) -> None:
    fwd, bwd = clamp_ops(rows, f, beta)
    hf, hb = _hand_clamp_bytes(rows, f, beta)
    assert sum(op.nbytes for op in fwd) == pytest.approx(hf, rel=1e-12, abs=0)
    assert sum(op.nbytes for op in bwd) == pytest.approx(hb, rel=1e-12, abs=0)
    # the closed forms of the docstring: 8·f·β forward, 11·f·β + 8·f backward, a row
    assert hf == 8 * f * beta * rows and hb == (11 * f * beta + 8 * f) * rows
    assert sum(op.kernels for op in fwd) == 3 and sum(op.kernels for op in bwd) == 7


def _model(name: str, **update):
    m = get_model(name)
    assert m.moe is not None
    return m.model_copy(update={"moe": m.moe.model_copy(update=update)}) if update else m


# (swiglu_limit, dispatch, clamped): only Megatron's dispatch with a clamped SwiGLU runs the eager clamp
WORK_CASES = [(7.0, "megatron", True), (None, "megatron", False), (7.0, "generic", False)]


@pytest.mark.parametrize(("limit", "dispatch", "clamped"), WORK_CASES)
def test_expert_work_carries_the_clamp(limit: float | None, dispatch: str, clamped: bool) -> None:
    m = _model("gpt-oss-120b", swiglu_limit=limit)
    moe = m.moe
    assert moe is not None
    w = expert_work(m, 1, 4096, 1, False, 8, 1, 2, "none", 6.0, dispatch, "te")
    rows = 4096 * moe.top_k  # uniform routing, etp 1: every routed row of the rank's tokens lands on some rank
    assert w.gemms[1][0] * (moe.num_experts // 8) == rows
    hf, hb = _hand_clamp_bytes(rows, moe.expert_ffn_hidden_size, 2)
    got = tuple(sum(op.nbytes for op in side) for side in w.clamp_ops)
    assert got == ((hf, hb) if clamped else (0, 0))
    unclamped = expert_work(
        _model("gpt-oss-120b", swiglu_limit=None), 1, 4096, 1, False, 8, 1, 2, "none", 6.0, dispatch
    )
    extra = 2 * moe.expert_ffn_hidden_size * 2 * rows if clamped else 0  # fc1's output kept by the clamps
    assert w.saved - unclamped.saved == extra


def _hbm_seconds(bw_Bps: float, nbytes: float) -> float:
    eff = next(e for lo, e in HBM_EFFICIENCY if nbytes >= lo)
    return nbytes / (bw_Bps * eff)


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_expert_seconds_add_the_clamp_at_hbm(recompute: str) -> None:
    """Each clamp kernel's bytes at the achieved HBM bandwidth of its size (Calculon's curve), × the memory residual,
    forward and backward each its own ops; full recomputation reruns the forward's."""
    req = {
        "model": "gpt-oss-120b",
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 8, "gpus_per_node": 8},
        "training": {"global_batch_size": 512, "seq_len": 4096, "stack": "megatron"},
        "parallel": {"tp": 1, "pp": 4, "ep": 8, "micro_batch_size": 1, "zero_stage": 1, "recompute": recompute},
    }
    ctx = context(PlanRequest.model_validate(req))
    st = ctx.stack
    w = expert_work(ctx.model, 1, 4096, 1, False, 8, 1, ctx.elt, recompute, 3.0 * ctx.elt, st.moe_dispatch, "te")
    assert w.clamp_ops != ((), ())
    bw = ctx.gpu.hbm_bandwidth_GBps * 1e9
    rows, f = 4096 * 4, 2880
    half = rows * f
    # each kernel by hand: two clamps of 4·half bytes and a cat of 8·half forward; backward the seven of the docstring
    fwd_kernels = [4 * half, 4 * half, 8 * half]
    bwd_kernels = [3 * half, 5 * half, 3 * half, 3 * half, 3 * half, 5 * half, 8 * half]
    tf = sum(_hbm_seconds(bw, b) for b in fwd_kernels)
    tb = sum(_hbm_seconds(bw, b) for b in bwd_kernels)
    ms = ctx.residuals.memory_scale
    with_clamp = expert_seconds(ctx, w, 1, 8, recompute)
    without = expert_seconds(ctx, replace(w, clamp_ops=((), ())), 1, 8, recompute)
    assert with_clamp.fwd - without.fwd == pytest.approx(ms * tf, rel=1e-9)
    assert with_clamp.bwd - without.bwd == pytest.approx(ms * (tb + (tf if recompute == "full" else 0.0)), rel=1e-9)
    assert with_clamp.a2a_fwd == without.a2a_fwd  # the exchanges do not move


# (gpu, head dim, seq, TFLOP/s): the published bars at the table's lengths, H200 at H100's (same peak)
FLASH_CASES = [
    ("h100-sxm5-80gb", 64, 512, 141.0),
    ("h100-sxm5-80gb", 64, 4096, 257.0),
    ("h100-sxm5-80gb", 64, 16384, 284.0),
    ("h100-sxm5-80gb", 64, 256, 141.0 / 2),  # below the table: proportionally slower
    ("h100-sxm5-80gb", 128, 4096, 294.0),  # head dim 128 unchanged (panel (d))
    ("h200-sxm-141gb", 64, 2048, 232.0),
]


@pytest.mark.parametrize(("gpu", "head_dim", "seq", "tflops"), FLASH_CASES)
def test_fa2_h100_head_dim_64_rates(gpu: str, head_dim: int, seq: int, tflops: float) -> None:
    req = {
        "model": "gpt-oss-120b",
        "cluster": {"gpu": gpu, "num_nodes": 1, "gpus_per_node": 8},
        "training": {"global_batch_size": 8, "seq_len": 4096, "stack": "megatron"},
    }
    ctx = context(PlanRequest.model_validate(req))
    clock = ctx.gpu.peak_flops("bf16") / 1e12 / 989.4  # the H100 SXM5 the figure was measured on
    assert flash_rate(ctx, head_dim, seq) == pytest.approx(clock * tflops, rel=1e-9)
    # between two bars: interpolated in log s (2048 → 4096 at 2896 is half way)
    if head_dim == 64 and seq == 4096:
        assert flash_rate(ctx, 64, 2896) == pytest.approx(clock * (232 + 0.5 * (257 - 232)), rel=2e-4)
