"""A floor under a context-parallel layer group's times from its FLOPs alone (``layer_floor``): what the search keys
a CP class by before it prices the class's layers (``bounds.cp_floor_bound``), so that the layers of the many CP
classes that never reach the front of the queue are never priced (issue 24: CP searched over the whole space).

Why it is a floor of ``layer_group``'s ``fwd.layer + bwd.layer`` (and of the LM head's), term by term of
``pricing.layer_times.analytic_parts``, in the local view of a CP rank (``context_parallel.cp_view``; the request
itself at cp = 1), analytic (no profile: its measured times, or the analytic ones scaled by its ratio, are not these
terms):

* every GEMM takes at least its FLOPs at ``gemm_ceiling``: a 16-bit one at ``peak × gemm_efficiency``
  (``gpu._gemm_time``: the wave efficiency is ≤ 1, the measured table only lowers the rate and the roofline takes the
  max with the bytes), under FP8 an FP8 one at ``fp8_peak × FP8_GEMM_EFFICIENCY`` (its wave efficiency ≤ 1, the
  sm_90 table's bound a max, the split accumulator's slowdown ≥ 1), so the linears' forward takes at least
  (layer FLOPs − attention-core FLOPs) at that rate and their backward (data and weight gradients) at least the
  backward FLOPs less the core's; the attention core is ``gpu.attention_time`` itself (cheap: one table look-up);
  both × the compute residual, as priced;
* the memory-bound ops (FP8's casts among them), the launches (``with_launches`` is a max), the TP collectives and
  a host's dispatch only add; full recomputation adds the forward again, selective a share ≥ 0 of it;
* the embedding is taken as 0.

It applies to one block kind of dense layers on a GPU without TP overlap and without a profile, in 16-bit or FP8
(a host's rate is measured, an overlapped TP's slowdown is priced apart, a MoE block's MLP is replaced): elsewhere
``layer_floor`` is None and the class is keyed by its lean bound at once, as before. FP8 (issues 24, 26): Llama 3
405B FP8 on 2,048 H100 (torchtitan) priced 448 layer weights as its queue was built, 77 of them ever asked past the
lean bound; with the floor its CP families defer theirs. ``tests/test_planner_cp.py`` (16-bit) and
``tests/test_fp8_floor.py`` (FP8) check it against the priced layer group on seeded instances."""

from __future__ import annotations

from planner.compose.blocks import block_sequence
from planner.compose.context import Context
from planner.compose.context_parallel import cp_view
from planner.pricing.gpu import attention_time, fp8_gemm_efficiency
from planner.pricing.host import runs_on_host
from planner.workload.analytic import FLASH_BWD_RATIO
from planner.workload.ops import attention_core_flops

DENSE_BLOCK = "transformer_block"


def gemm_ceiling(ctx: Context) -> float:
    """FLOP/s no GEMM of the layers is priced above (``gpu.gemm_time``): a 16-bit one runs at ≤ ``peak ×
    gemm_efficiency`` (the wave efficiency and the measured table's rate only lower it); under FP8 a GEMM may run in
    FP8, at ≤ ``fp8_peak × FP8_GEMM_EFFICIENCY`` (the wave efficiency ≤ 1, the table's bound and the split
    accumulator's slowdown ≥ 1 only slow it): the larger of the two."""
    rate = ctx.peak * ctx.gemm_efficiency
    if ctx.fp8_recipe is not None or ctx.training.precision == "fp8":
        rate = max(rate, ctx.fp8_peak * fp8_gemm_efficiency(ctx))
    return rate


def layer_floor(ctx: Context, mbs: int, tp: int, sp: bool, recompute: str, cp: int) -> tuple[int, int] | None:
    """(block F + B, LM head F + B) ns per micro-batch, each ≤ ``layer_group``'s in the cp view (module docstring);
    None where the floor does not apply (a profile, a host device, MoE blocks; ``lean.floor_bound`` asks none under TP
    overlap)."""
    if ctx.profile is not None or ctx.layer_fn is not None or runs_on_host(ctx):
        return None  # measured times (or analytic ones scaled by a profile's ratio), a host's rate
    view = cp_view(ctx, cp)
    kinds, prefix = block_sequence(view)
    if prefix is not None or kinds[0] != DENSE_BLOCK:
        return None
    lp, head = view.layer(DENSE_BLOCK, mbs, tp, sp), view.layer("lm_head", mbs, tp, sp)
    if lp.fwd_time_s is not None or head.fwd_time_s is not None:  # measured times: not the analytic terms
        return None
    rate = gemm_ceiling(view)
    cs = view.residuals.compute_scale
    att = attention_core_flops(view.model, mbs, view.training.seq_len, tp, pad_v=view.stack.mla_pad_v)
    af, ab = attention_time(view, mbs, tp)
    fwd = cs * (max(0.0, lp.fwd_flops - att) / rate + af)
    bwd = cs * (max(0.0, lp.bwd_flops - FLASH_BWD_RATIO * att) / rate + ab)
    extra = fwd if recompute == "full" else 0.0
    head_fb = cs * (max(0.0, head.fwd_flops) + max(0.0, head.bwd_flops)) / rate
    # each of the layer group's times is rounded to the ns on its own (``layer_group.ns``): a ns below each
    return max(0, int((fwd + bwd + extra) * 1e9) - 3), max(0, int(head_fb * 1e9) - 2)
