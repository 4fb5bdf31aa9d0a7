"""A MoE block's terms beside the dense block's (issue 23): ``expert_terms`` turns the expert-parallel work of one
block (``planner.workload.expert_parallel``) priced on the device (``planner.pricing.expert_parallel``) into what
``terms`` adds to the block's per-layer coefficients — its forward and backward seconds (compute, the EP
all-to-all on the compute stream, the change of TP communication), parameters (the routed experts' apart: they
shard over the expert-data-parallel group), saved activations and FLOPs — and prices the experts' gradient sync
and optimizer step over that group (``expert_step``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from planner.compose.context import Context
from planner.compose.memory import stack_states
from planner.pricing.collectives import Groups, comm_seconds, per_kind_seconds
from planner.pricing.expert_parallel import _gemms, dense_cast_seconds, expert_seconds, fp8_flags
from planner.pricing.gpu import HBM_EFFICIENCY, fp8_gemm_efficiency, hbm_efficiency, hbm_time
from planner.pricing.host import runs_on_host
from planner.pricing.layer_times import LayerTimes
from planner.pricing.memo import memo_on
from planner.specs import ActivationBytes
from planner.workload.collectives import Collective, Issuing, Op, dp_layer_comms, zero3_comms
from planner.workload.expert_parallel import expert_dp, expert_work, routed_rows
from planner.workload.ops import op_bytes


@dataclass(frozen=True, slots=True)
class ExpertTerms:
    """Per MoE block and micro-batch on one rank, to add to the dense block's (seconds, parameters, bytes)."""

    fwd: float  # compute + TP change + all-to-all
    bwd: float
    tp_fwd: float
    tp_bwd: float
    a2a_fwd: float
    a2a_bwd: float
    params: int  # parameters added (MoE MLP − dense MLP), routed experts included
    expert_params: int  # the routed experts' on this rank
    saved: float  # saved activation bytes added with recompute none / selective (full keeps the block input)
    saved_none: float  # ... with recompute none (what a fully recomputed block holds while it reruns)
    flops_fwd: float
    flops_bwd: float


@memo_on("expert_terms")
def expert_terms(ctx: Context, mbs: int, tp: int, sp: bool, recompute: str, ep: int, etp: int) -> ExpertTerms:
    """A MoE block's routed experts at (mbs, tp, sp, recompute, ep, etp), memoised on the context
    (``Context.expert_terms``, shared with its window view where that prices alike: ``blocks.window_view``): the
    block's layer groups of either TP overlap and either kind, windowed or full, read the same terms."""
    glu = op_bytes(ctx)[1]  # the SwiGLU product's bytes per element under the stack's kernels, as the dense MLP's
    st = ctx.stack
    fp8 = ctx.fp8_recipe is not None
    w = expert_work(
        ctx.model,
        mbs,
        ctx.training.seq_len,
        tp,
        sp,
        ep,
        etp,
        ctx.elt,
        recompute,
        glu,
        st.moe_dispatch,
        st.activations,
        fp8,
    )
    s = expert_seconds(ctx, w, tp, ep, recompute)
    flops = w.flops - w.dense_flops
    return ExpertTerms(
        fwd=s.fwd + s.tp_fwd + s.a2a_fwd,
        bwd=s.bwd + s.tp_bwd + s.a2a_bwd,
        tp_fwd=s.tp_fwd,
        tp_bwd=s.tp_bwd,
        a2a_fwd=s.a2a_fwd,
        a2a_bwd=s.a2a_bwd,
        params=w.expert_params + w.other_params - w.dense_params,
        expert_params=w.expert_params,
        saved=0.0 if recompute == "full" else w.saved - w.dense_saved,
        saved_none=w.saved - w.dense_saved,
        flops_fwd=flops,
        flops_bwd=2 * flops + (flops if recompute == "full" else 0.0),
    )


class ExpertFloor(NamedTuple):
    """``expert_floor``: a MoE block's ``ExpertTerms.fwd`` and ``.bwd`` (seconds) at least ``fwd + cs·G + a2a_f``
    and ``bwd + cs·(2 + full)·G + a2a_b`` at every ep, G the grouped GEMMs' floor (``grouped``) and the all-to-alls
    exact (``a2a``)."""

    fwd: float
    bwd: float
    scale: float  # the compute residual
    rerun: bool  # full recomputation: the backward reruns the forward's grouped GEMMs
    flops_s: float  # the grouped GEMMs' FLOPs at the large-GEMM ceiling
    weights_s: float  # one local expert's weights (w1, w3, w2) at the best HBM efficiency
    dispatched: float  # bytes of one all-to-all per rank
    a2a_counts: tuple[int, int]  # all-to-alls forward, backward

    def grouped(self, num_experts: int, ep: int) -> float:
        """The forward grouped GEMMs at ep: ≥ their FLOPs at the ceiling and ≥ the E/ep local experts' weights read
        (``gpu.gemm_time`` is the larger of its FLOPs at the ceiling × an efficiency ≤ 1 and its bytes at HBM)."""
        return max(self.flops_s, num_experts // ep * self.weights_s)


def expert_floor(ctx: Context, mbs: int, tp: int, sp: bool, recompute: str, etp: int) -> ExpertFloor:
    """What ``expert_terms`` at every ep dividing the experts is at least (``ExpertFloor``), priced once per etp
    (``layer_group.moe_floor``, the search's first key of a MoE model's classes, issue 26): the router's, the shared
    experts', the dense MLP's and the ETP exchange's terms exactly (ep reads none of them); the grouped expert GEMMs
    over at least T_in·k·imb rows in all (each of the E/ep local experts gets ⌈T_in·k·ep/E·imb⌉) at the larger of
    their FLOPs at the large-GEMM ceiling and the local experts' weights at the best HBM efficiency; their
    memory-bound bytes at the best HBM efficiency; the all-to-all's bytes (its time at ep: ``expert_parallel.
    all_to_all_seconds``). The residuals scale up what they scale (both ≥ 0, else no bound: −inf).
    ``tests/test_expert_floor.py``: ≤ the exact terms."""
    r = ctx.residuals
    model, seq, moe, elt = ctx.model, ctx.training.seq_len, ctx.model.moe, ctx.elt
    assert moe is not None
    h, E = model.hidden_size, moe.num_experts
    if r.compute_scale < 0 or r.memory_scale < 0:
        return ExpertFloor(-math.inf, -math.inf, 0.0, False, 0.0, 0.0, 0.0, (0, 0))
    glu = op_bytes(ctx)[1]
    w = expert_work(model, mbs, seq, tp, sp, 1, etp, elt, recompute, glu)  # its ep-free parts
    full = mbs * seq
    T = full // tp if (sp and tp > 1) else full
    sent, routed = routed_rows(model, T, full if etp > 1 else T)  # ep-free (padded: exact)
    rows = routed * (1.0 - 1e-9)  # every local expert's rows summed, at least
    f = moe.expert_ffn_hidden_size // etp
    fs = moe.shared_experts * moe.shared_ffn // tp if moe.shared_experts else 0
    host = runs_on_host(ctx)
    moe_fp8, dense_fp8 = fp8_flags(ctx, w)  # the grouped experts' precision: moe_fp8[1]
    grouped_fp8 = len(moe_fp8) > 1 and moe_fp8[1] and not host
    rate = ctx.fp8_peak * fp8_gemm_efficiency(ctx) if grouped_fp8 else ctx.peak * (1.0 if host else ctx.gemm_efficiency)
    bw = ctx.gpu.hbm_bandwidth_GBps * 1e9 * (1.0 if host else max(eff for _, eff in HBM_EFFICIENCY))
    rf, rb = _gemms(ctx, w.gemms[:1] + w.gemms[3:], moe_fp8[:1] + moe_fp8[3:])  # the router and the shared experts
    df, db = _gemms(ctx, w.dense_gemms, dense_fp8)
    mem = glu * (rows * f + full * fs) + 4.0 * rows * h * elt + 3.0 * T * E * 4
    cast_f, cast_b = dense_cast_seconds(ctx, full, tp)  # taken away exactly; the MoE MLP's own casts are ≥ 0
    mem_s = mem / bw - hbm_time(ctx, w.dense_mem_bytes)
    fwd = r.compute_scale * (rf - df) + r.memory_scale * (mem_s - cast_f)
    bwd = r.compute_scale * (rb - db) + r.memory_scale * (2 * mem_s - cast_b) + (fwd if recompute == "full" else 0.0)
    g = Groups(tp, 1, "intra_node", 1)
    tp_f = comm_seconds(ctx, w.tp_fwd, g) - comm_seconds(ctx, w.dense_tp_fwd, g)
    tp_b = comm_seconds(ctx, w.tp_bwd, g) - comm_seconds(ctx, w.dense_tp_bwd, g)
    return ExpertFloor(
        fwd + tp_f,
        bwd + tp_b,
        r.compute_scale,
        recompute == "full",
        6.0 * rows * f * h / rate,  # w1, w3, w2 forward; the backward's two GEMMs each as many FLOPs
        3.0 * h * f * (1 if grouped_fp8 else elt) / bw,  # FP8 weights: 1 byte (``gpu.gemm_time``)
        sent * h * elt,
        (2, 4 if recompute == "full" else 2),
    )


def expert_state_bytes(
    ctx: Context, zero_stage: int, tp: int, dp: int, ep: int, etp: int, whole: int = 0, main: int = 0
) -> float:
    """Bytes per routed-expert parameter: ZeRO shards them over the expert-data-parallel ranks; ``whole``: the
    gradients' bytes where they accumulate unsharded, ``main``: in Megatron's main_grad buffer (``memory.state_bytes``)."""
    tr, edp = ctx.training, expert_dp(tp, dp, ep, etp)
    return stack_states(ctx.stack, tr, zero_stage, edp, whole, main).total


@memo_on("dp_seconds")
def dp_seconds(
    ctx: Context,
    how: Issuing,
    op: Op,
    params: tuple[int, int, int],
    nbytes: float,
    bucket: int | None,
    g: Groups,
    experts: int,
    degrees: tuple[int, int, int, int],
) -> tuple[float, float, float]:
    """Seconds of a data-parallel collective ``op`` over each layer kind's parameters (ZeRO-3's per-layer gathers
    and reduce-scatters with ``bucket`` None, else the step's sync in buckets of ``bucket`` parameters): over the
    dp group ``g``, but a MoE block's ``experts`` routed-expert parameters over the expert-data-parallel group
    (``degrees``: tp, dp, ep, etp; its ranks etp · ep apart). Memoised on the context by its arguments
    (``Context.dp_seconds``: a MoE model's shared keys of one (tp, dp, ep, etp) repeat them; ``memo.memo_on``)."""
    blk, emb, head = params
    dense = (blk - experts, emb, head)
    # ZeRO-3's fetches as the stack issues them (per layer, or per module: ``zero3_comms``); the step's sync bucketed
    comms = zero3_comms(ctx.model, how, degrees[0], op, dense, nbytes) if bucket is None else None
    out = list(per_kind_seconds(ctx, comms or dp_layer_comms(how, op, dense, nbytes, bucket), g))
    edp = expert_dp(*degrees)
    if experts and edp > 1:
        _, _, ep, etp = degrees
        c = Collective("dp", op, experts * nbytes, bucket=None if bucket is None else bucket * nbytes)
        out[0] += comm_seconds(ctx, (c,), Groups.of(ctx, etp * ep, edp))
    return out[0], out[1], out[2]


def expert_step_seconds(
    ctx: Context, params: int, zero_stage: int, degrees: tuple[int, int, int, int], step_bytes: float
) -> float:
    """Seconds of the optimizer step over one block's routed experts, sharded over expert-DP from ZeRO-1 on
    (``degrees``: tp, dp, ep, etp)."""
    shard = expert_dp(*degrees) if zero_stage >= 1 else 1
    nbytes = params / shard * step_bytes
    return nbytes / (ctx.gpu.hbm_bandwidth_GBps * 1e9 * hbm_efficiency(nbytes)) if nbytes else 0.0


def with_experts(
    ctx: Context,
    blk: LayerTimes,
    saved: ActivationBytes,
    params: int,
    tp_f: float,
    tp_b: float,
    point: tuple[int, int, bool, str, int, int],
) -> tuple[float, float, float, float, int, int, int, float, float, ExpertTerms]:
    """A dense block's times, saved bytes, parameters and TP seconds made a MoE block's at ``point`` (mbs, tp,
    sp, recompute, ep, etp): its forward and backward seconds and FLOPs, saved bytes with recompute none and
    selective (full keeps the dense block's), parameters, TP and all-to-all seconds. The experts' terms read the
    recomputation only as whether it is full (``expert_work``, ``expert_seconds``): the other two share one
    (``tests/test_window_memory.py`` checks them alike)."""
    mbs, tp, sp, recompute, ep, etp = point
    x = expert_terms(ctx, mbs, tp, sp, recompute if recompute == "full" else "none", ep, etp)
    return (
        blk.fwd + x.fwd - x.tp_fwd,
        blk.bwd + x.bwd - x.tp_bwd,
        blk.flops_fwd + x.flops_fwd,
        blk.flops_bwd + x.flops_bwd,
        int(saved.none + x.saved_none),
        int(saved.selective + x.saved),
        params + x.params,
        tp_f + x.tp_fwd,
        tp_b + x.tp_bwd,
        x,
    )
