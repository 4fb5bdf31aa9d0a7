"""Compute time of one layer (one micro-batch, one GPU).

Compute per layer and micro-batch, per op (see ``docs/planner.md`` for every constant):
  time = Σ linear GEMMs (forward; data and weight gradients), each max(FLOPs ÷ (peak × ``GEMM_EFFICIENCY``
         × wave/tile efficiency over the SMs), bytes ÷ achieved HBM bandwidth)
       + attention core by the stack's kernel (``attention_time``: flash at published rates; unfused:
         batched GEMMs + the s×s scores through HBM)
       + memory-bound ops (norms, activation, RoPE, residual adds, dropout) at achieved HBM bandwidth;
measured ``fwd_time_s``/``bwd_time_s`` from a ``Profile`` replace the formula when present.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from planner.pricing.gpu import (
    attention_time,
    cast_times,
    elementwise_time,
    gemm_time,
    linear_times,
    ops_time,
    with_launches,
)
from planner.pricing.host import host_layer_dispatch
from planner.specs import LayerProfile
from planner.workload.analytic import FLASH_BWD_RATIO
from planner.workload.fp8 import sac_rerun_cast_ops
from planner.workload.ops import attention_core_flops, kernel_counts, rerun_linears

if TYPE_CHECKING:
    from planner.pricing.device import Device


@dataclass(frozen=True)
class LayerTimes:
    fwd: float
    bwd: float  # including recomputation
    flops_fwd: float
    flops_bwd: float


def layer_times(ctx: Device, kind: str, mbs: int, tp: int, sp: bool, recompute: str) -> LayerTimes:
    key = (kind, mbs, tp, sp, recompute)
    t = ctx.times_cache.get(key)
    if t is None:
        t = ctx.times_cache[key] = _layer_times(ctx, kind, mbs, tp, sp, recompute)
    return t


def analytic_parts(
    ctx: Device, lp: LayerProfile, kind: str, mbs: int, tp: int, sp: bool
) -> tuple[float, float, float, float]:
    """(forward, backward, attention-core forward, attention-core backward) seconds of ``lp``: its linear
    FLOPs at the per-shape GEMM times (``linear_times``, scaled to ``lp``'s FLOPs), its attention core by
    the stack's kernel (``attention_time``) and its memory-bound ops at achieved HBM bandwidth (backward
    moves twice the forward's bytes)."""
    seq = ctx.training.seq_len
    af = ab = 0.0
    if kind == "transformer_block":
        af, ab = attention_time(ctx, mbs, tp)
    att_flops = (
        attention_core_flops(ctx.model, mbs, seq, tp, ctx.attention_share, ctx.stack.mla_pad_v)
        if kind == "transformer_block"
        else 0.0
    )
    lf, lb, lin_flops = linear_times(ctx, kind, mbs * seq, tp)
    elem = elementwise_time(ctx, kind, mbs, tp, sp)
    scale_f = max(0.0, lp.fwd_flops - att_flops) / lin_flops if lin_flops > 0 else 0.0
    scale_b = max(0.0, lp.bwd_flops - FLASH_BWD_RATIO * att_flops) / (2 * lin_flops) if lin_flops > 0 else 0.0
    # The residuals (``Context.residuals``), each on its own term: × GEMMs and attention core, × memory-bound
    # ops, + launch overhead per kernel (``gpu.with_launches``). Identity residuals change nothing.
    r = ctx.residuals
    cs, ms = r.compute_scale, r.memory_scale
    kf, kb = kernel_counts(ctx, kind, tp)
    # FP8 training: the casts, transposes and amax reductions around the FP8 GEMMs (memory-bound, × memory residual)
    cf, cb, ckf, ckb = cast_times(ctx, kind, mbs, tp, sp)
    elem_f, elem_b, kf, kb = elem + cf, 2 * elem + cb, kf + ckf, kb + ckb
    # + a host device's measured dispatch per op (``host.host_layer_dispatch``; zero on a GPU), × the
    # compute residual: on a host the same processor dispatches and computes
    hf, hb = (cs * x for x in host_layer_dispatch(ctx, kind, tp))
    fwd = with_launches(ctx, cs * (lf * scale_f + af) + ms * elem_f, kf) + hf
    bwd = with_launches(ctx, cs * (lb * scale_b + ab) + ms * elem_b, kb) + hb
    return fwd, bwd, cs * af, cs * ab


def parts(
    ctx: Device, kind: str, mbs: int, tp: int, sp: bool
) -> tuple[LayerProfile, tuple[float, float, float, float]]:
    """The layer's profile (``Inputs.layer``) and its ``analytic_parts``, memoised on the context (``parts_cache``):
    they read no recomputation, so a block's three modes and selective recomputation's share price them once
    (``tests/test_layer_group_fast.py`` checks the layer times against pricing them each time)."""
    lp = ctx.layer(kind, mbs, tp, sp)
    key = (kind, mbs, tp, sp)
    hit = ctx.parts_cache.get(key)
    if hit is None:
        hit = ctx.parts_cache[key] = analytic_parts(ctx, lp, kind, mbs, tp, sp)
    return lp, hit


def analytic_time(ctx: Device, lp: LayerProfile, kind: str, mbs: int, tp: int, sp: bool) -> tuple[float, float]:
    """Forward and backward seconds of ``lp`` by the per-op model (``analytic_parts``)."""
    f, b, _, _ = analytic_parts(ctx, lp, kind, mbs, tp, sp)
    return f, b


def selective_share(ctx: Device, mbs: int, tp: int, sp: bool, att_share: float) -> float:
    """Fraction of a block's forward that ``recompute: selective`` reruns in backward, by the stack:

    * torchtitan activations (``Stack.activations == "titan"``), op-level policy (``selective_ac = "op"``):
      every op whose output the policy does not keep (``activations.titan_sac_op_terms``) — the even
      ``aten.mm`` calls (wk, wo, w3; a GELU MLP's fc2) and all memory-bound ops (norms, RoPE, K/V repeat,
      silu, products, residual adds) and, under FP8, the even mms' operand casts (``fp8.sac_rerun_cast_ops``);
      not the flash attention nor the odd mms;
    * torchtitan per-layer (``selective_ac = k``): every k-th block's whole forward, 1/k on average;
    * other stacks (Megatron's selective recompute): the attention core's forward (``att_share``)."""
    st = ctx.stack
    if st.activations != "titan":
        return att_share
    if st.selective_ac != "op":
        return 1.0 / int(st.selective_ac)
    key = (mbs, tp, sp)
    hit = ctx.sac_cache.get(key)
    if hit is None:
        f = parts(ctx, "transformer_block", mbs, tp, sp)[1][0]
        tokens = mbs * ctx.training.seq_len
        even = 0.0
        for lin in rerun_linears(ctx.model, tp):  # the even mm calls (``ops.rerun_linears``)
            even += gemm_time(ctx, tokens, lin.n, lin.k, fp8=ctx.fp8_recipe is not None)
        r = ctx.residuals  # the same residuals as the forward it is a share of
        rerun = r.compute_scale * even + r.memory_scale * (
            elementwise_time(ctx, "transformer_block", mbs, tp, sp)
            + ops_time(ctx, sac_rerun_cast_ops(ctx, mbs, tp, sp))
        )  # + the even mms' FP8 operand casts (``fp8.sac_rerun_cast_ops``)
        hit = ctx.sac_cache[key] = min(1.0, rerun / f) if f > 0 else 0.0
    return float(hit)


def _layer_times(ctx: Device, kind: str, mbs: int, tp: int, sp: bool, recompute: str) -> LayerTimes:
    lp = ctx.layer(kind, mbs, tp, sp)
    seq = ctx.training.seq_len
    if lp.fwd_time_s is not None and lp.bwd_time_s is not None:
        fwd, bwd = lp.fwd_time_s, lp.bwd_time_s
        att_share = (
            min(
                1.0,
                attention_core_flops(ctx.model, mbs, seq, tp, ctx.attention_share, ctx.stack.mla_pad_v) / lp.fwd_flops,
            )
            if lp.fwd_flops
            else 0.0
        )
    else:
        fwd, bwd, af, _ = parts(ctx, kind, mbs, tp, sp)[1]
        att_share = af / fwd if fwd > 0 else 0.0
        ratio = ctx.time_ratio(kind) if ctx.profile is not None and not ctx.covers(mbs, tp, sp) else None
        if ratio is not None:  # a point the profile lacks: scaled to the profile's hardware (``Context.gap_note``)
            fwd, bwd = fwd * ratio[0], bwd * ratio[1]
    extra = 0.0
    if kind == "transformer_block" and recompute == "full":
        extra = fwd
    elif kind == "transformer_block" and recompute == "selective":
        extra = fwd * selective_share(ctx, mbs, tp, sp, att_share)
    flops_f, flops_b = lp.fwd_flops, lp.bwd_flops
    if kind == "transformer_block" and ctx.cp > 1:  # the local layer's square, cp× (``gpu.attention_time``)
        more = (ctx.cp - 1) * attention_core_flops(ctx.model, mbs, seq, tp, ctx.attention_share, ctx.stack.mla_pad_v)
        flops_f, flops_b = flops_f + more, flops_b + FLASH_BWD_RATIO * more
    flops_extra = flops_f * (extra / fwd) if fwd > 0 else 0.0
    return LayerTimes(fwd, bwd + extra, flops_f, flops_b + flops_extra)
