"""A layer kind's ``LayerGroup`` at one (micro-batch size, tp, sequence parallelism, recomputation, TP overlap, ep, etp):
the block's, embedding's and LM head's times, TP part, parameters, activations and FLOPs per micro-batch, what
``terms.shared_terms`` builds on for every ZeRO stage and dp; and the part of it the dense op list gives
(``DenseParts``: layer times, profiles, blocking TP communication), which a MoE block's MLP replaces
(``compose.experts``), so the (ep, etp) pairs of a mixture of experts share one (``dense_parts``, priced once per
point: the same calls in the same order as before it was shared, the same numbers). Seconds become integer ns
here (``ns``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from planner.compose.affine import Affine
from planner.compose.blocks import WINDOW, block_sequence, window_view
from planner.compose.context import Context, GroupKey
from planner.compose.experts import expert_floor, with_experts
from planner.compose.memory import loss_buffer_bytes
from planner.compose.recompute_modules import MODULES, module_recompute, op_list_mode
from planner.pricing.collectives import Groups, per_kind_seconds
from planner.pricing.expert_parallel import all_to_all_seconds
from planner.pricing.gpu import hbm_time
from planner.pricing.host import dtensor_linear_dispatch, host_dispatch
from planner.pricing.layer_times import LayerTimes, layer_times
from planner.pricing.tp_overlap import overlap_delta
from planner.specs.vocab import local_vocab
from planner.workload.collectives import issuing, rerun_sp_gathers, tp_comms
from planner.workload.fp8 import fp8_cast_after_gather, fp8_tp_gather
from planner.workload.ops import MOE_BLOCK, block_linears
from planner.workload.sp_copies import sp_copy_bytes

if TYPE_CHECKING:
    from planner.specs import LayerProfile


NS = 1e9

#: Compute that runs under a collective runs slower: the NCCL kernels hold SMs (one CTA per channel) for
#: the whole collective, whatever the link, and share HBM. The fraction of the overlapped time added to the
#: compute: measured, compute overlapped with communication ran on average 18.9 % slower on
#: A100/H100/MI250/MI210 (Lee et al., "Characterizing Compute-Communication Overlap in GPU-Accelerated
#: Distributed Deep Learning", arXiv 2507.03114).
OVERLAP_SLOWDOWN = 0.189


def overlapped(work: float, comm: float, slowdown: float) -> float:
    """Seconds of ``work`` run beside a collective of ``comm`` seconds on another stream: the longer of the
    two, the work slowed by ``slowdown`` × the time they overlap."""
    return max(work + slowdown * min(work, comm), comm)


def ns(seconds: float) -> int:
    return round(seconds * NS)


class DenseParts(NamedTuple):
    """What a block's ``LayerGroup`` takes from its dense op list at (mbs, tp, sp, recompute, tpo), before a MoE block
    replaces its MLP (``compose.experts``): shared by every (ep, etp) and block kind (``dense_parts``)."""

    blk: LayerTimes
    emb: LayerTimes
    head: LayerTimes
    lp_blk: LayerProfile
    lp_emb: LayerProfile
    lp_head: LayerProfile
    act: int
    tp_f: tuple[float, float, float]  # block, embedding, LM head: blocking TP seconds
    tp_b: tuple[float, float, float]
    f_more: float  # overlapped TP's GEMM slowdown beyond its TP part, + SP layout copies (``workload.sp_copies``)
    b_more: float
    logits_fp32: int  # ``LayerGroup.logits_fp32`` (it reads (mbs, tp) alone)


def dense_parts(ctx: Context, mbs: int, tp: int, sp: bool, recompute: str, tpo: bool) -> DenseParts:
    """``DenseParts`` at one point, cached on the context: the dense op list's layer times, profiles and TP
    communication, priced once for every (ep, etp) of a mixture of experts and block kind."""
    key = (mbs, tp, sp, recompute, tpo)
    d = ctx.dense_parts.get(key)
    if d is None:
        d = ctx.dense_parts[key] = _dense_parts(ctx, *key)
    return d


def _dense_parts(ctx: Context, mbs: int, tp: int, sp: bool, recompute: str, tpo: bool) -> DenseParts:
    model, seq = ctx.model, ctx.training.seq_len
    blk = layer_times(ctx, "transformer_block", mbs, tp, sp, recompute)
    emb = layer_times(ctx, "embedding", mbs, tp, sp, "none")
    head = layer_times(ctx, "lm_head", mbs, tp, sp, "none")
    lp_blk = ctx.layer("transformer_block", mbs, tp, sp)
    lp_emb = ctx.layer("embedding", mbs, tp, sp)
    lp_head = ctx.layer("lm_head", mbs, tp, sp)

    # --- tensor-parallel communication (blocking, on the compute stream): what the stack issues, priced here
    act = mbs * seq * model.hidden_size * ctx.elt  # one residual-stream tensor
    gather = mbs * seq * model.hidden_size if fp8_tp_gather(ctx, tp, sp) else act  # FP8 SP all-gathers: 1 byte
    rerun = rerun_sp_gathers(ctx.stack, recompute)
    comms = tp_comms(model, issuing(ctx.stack), act, tp, sp, recompute, mbs * seq, gather, rerun)
    g = Groups(tp, 1, "intra_node", 1)  # the TP group alone
    (blk_tp_f, emb_tp_f, head_tp_f), (blk_tp_b, emb_tp_b, head_tp_b) = (
        per_kind_seconds(ctx, comms.fwd, g),
        per_kind_seconds(ctx, comms.bwd, g),
    )
    if tp > 1 and host_dispatch(ctx) is not None:  # a host's DTensor dispatch of the block's sharded linears
        more_f, more_b = dtensor_linear_dispatch(ctx, block_linears(model), recompute)  # (none on a GPU)
        blk_tp_f, blk_tp_b = blk_tp_f + more_f, blk_tp_b + more_b
    f_more = b_more = 0.0  # overlapped TP (``pricing.tp_overlap``): the block's pairs pipelined, GEMMs slowed
    cast_after = fp8_cast_after_gather(ctx, tp, sp)  # async TP fuses no 16-bit all-gather that feeds an FP8 cast
    if tpo and ctx.stack.tp_overlap is not None:
        d = overlap_delta(ctx, ctx.stack.tp_overlap, mbs, tp, recompute, act, OVERLAP_SLOWDOWN, gather, cast_after)
        blk_tp_f, blk_tp_b = blk_tp_f + d.fwd_tp, blk_tp_b + d.bwd_tp
        f_more, b_more = d.fwd - d.fwd_tp, d.bwd - d.bwd_tp
    if model.moe is None and model.mla is None:  # torchtitan's SP layout copies (``workload.sp_copies``), HBM-bound
        copies = sp_copy_bytes(ctx.stack, mbs, tp, sp, recompute, act, gather, tpo, cast_after)
        ms = ctx.residuals.memory_scale
        f_more += ms * sum(hbm_time(ctx, b) for b in copies[0])
        b_more += ms * sum(hbm_time(ctx, b) for b in copies[1])
    vocab_local = local_vocab(model, tp)  # the stack's padded vocabulary (``planner.specs.vocab``)
    return DenseParts(
        blk,
        emb,
        head,
        lp_blk,
        lp_emb,
        lp_head,
        act,
        (blk_tp_f, emb_tp_f, head_tp_f),
        (blk_tp_b, emb_tp_b, head_tp_b),
        f_more,
        b_more,
        loss_buffer_bytes(ctx.stack, mbs * seq, vocab_local, ctx.elt, tp),  # the loss's tensors (stack's)
    )


def window_parts(ctx: Context, view: Context, point: tuple[int, int, bool, str, bool]) -> DenseParts:
    """``DenseParts`` of the window view ``view`` of an analytic ``ctx`` (``blocks.window_view``) at ``point``: the
    context's own with the block's layer times and profile the view's. The view changes the model's window fields
    alone, which only the attention reads (``Inputs.attention_window``, ``attention_share``: the block's FLOPs and
    time), not the embedding, the LM head, the TP communication, the overlap or the loss buffer
    (``tests/test_layer_group_fast.py`` checks them against the view's own at every point of gpt-oss's classes)."""
    mbs, tp, sp, recompute, _ = point
    return dense_parts(ctx, *point)._replace(
        blk=layer_times(view, "transformer_block", mbs, tp, sp, recompute),
        lp_blk=view.layer("transformer_block", mbs, tp, sp),
    )


@dataclass(frozen=True, slots=True)
class LayerGroup:
    """Per micro-batch, one GPU, for one (micro-batch size, tp, sequence parallelism, recomputation):
    the block, embedding and LM head (in that order) — their compute + blocking TP comm (s), the TP
    part, parameters and the layer profiles. What ``shared_terms`` builds on for every ZeRO stage and dp."""

    work_f: tuple[float, float, float]
    work_b: tuple[float, float, float]
    fwd: Affine  # ``work_f`` in ns (the chunk terms without ZeRO-3)
    bwd: Affine
    fwd_tp: Affine  # the TP part, ns
    bwd_tp: Affine
    params: tuple[int, int, int]
    act: int  # one residual-stream tensor, bytes
    recompute_tmp: int
    logits_fp32: int
    acts: Affine
    flops: tuple[float, float, float]
    fwd_ep: Affine = Affine()  # the EP all-to-all part of ``fwd``/``bwd``, ns
    bwd_ep: Affine = Affine()
    expert_params: int = 0  # a block's routed experts on this rank (in ``params``)


def layer_group(
    ctx: Context,
    mbs: int,
    tp: int,
    sp: bool,
    recompute: str,
    tpo: bool = False,
    ep: int = 1,
    etp: int = 1,
    kind: str = "",
) -> LayerGroup:
    """``kind``: the block kind priced (``blocks.block_sequence``); by default the model's first (its only one)."""
    kind = kind or block_sequence(ctx)[0][0]
    if kind.endswith(WINDOW):  # a windowed block of a model of windowed and full ones: priced in its view
        view = window_view(ctx)
        point = (mbs, tp, sp, op_list_mode(recompute), tpo)  # as ``_layer_group`` reads it
        if point not in view.dense_parts and ctx.profile is None and ctx.layer_fn is None:
            view.dense_parts[point] = window_parts(ctx, view, point)
        return layer_group(view, mbs, tp, sp, recompute, tpo, ep, etp, kind.removesuffix(WINDOW))
    if kind != MOE_BLOCK:  # a dense block does not depend on the experts' layout
        ep = etp = 1
    key = (mbs, tp, sp, recompute, tpo, ep, etp, kind)
    lg = ctx.groups.get(key)
    if lg is None:
        lg = ctx.groups[key] = _layer_group(ctx, key)
    return lg


def _layer_group(ctx: Context, key: GroupKey) -> LayerGroup:
    mbs, tp, sp, recompute, tpo, ep, etp, kind = key
    # the dense op list reads the recomputation only as full or selective: layernorm+moe_act's is none's (shared)
    d = dense_parts(ctx, mbs, tp, sp, op_list_mode(recompute), tpo)
    blk, emb, head, lp_blk, lp_emb, lp_head = d.blk, d.emb, d.head, d.lp_blk, d.lp_emb, d.lp_head
    (blk_tp_f, emb_tp_f, head_tp_f), (blk_tp_b, emb_tp_b, head_tp_b) = d.tp_f, d.tp_b
    saved = lp_blk.saved_activation_bytes
    s_none, s_sel, s_full = saved.none, saved.selective, saved.full
    p_blk, x = lp_blk.param_count, None
    bf, bb, flops_f, flops_b = blk.fwd, blk.bwd, blk.flops_fwd, blk.flops_bwd
    if kind == MOE_BLOCK:  # a MoE block: its MLP in place of the dense one (``compose.experts``)
        bf, bb, flops_f, flops_b, s_none, s_sel, p_blk, blk_tp_f, blk_tp_b, x = with_experts(
            ctx, blk, saved, p_blk, blk_tp_f, blk_tp_b, (mbs, tp, sp, recompute, ep, etp)
        )
    tmp = 0
    if recompute == MODULES:  # Megatron's --recompute-modules layernorm moe_act (``compose.recompute_modules``)
        mr = module_recompute(ctx, mbs, tp, sp, ep, etp, kind == MOE_BLOCK)
        at_mode, tmp = max(0, int(s_none - mr.saved_less)), int(mr.saved_less)
        bb += mr.bwd_more
    else:  # the saved bytes per recompute mode (``ActivationBytes.for_mode``) and the rematerialised buffer
        at_mode = {"none": int(s_none), "selective": int(s_sel), "full": int(s_full)}[recompute]
        tmp = {"none": 0, "selective": max(0, s_none - s_sel), "full": s_none}[recompute]
    work_f = (bf + d.f_more + blk_tp_f, emb.fwd + emb_tp_f, head.fwd + head_tp_f)
    work_b = (bb + d.b_more + blk_tp_b, emb.bwd + emb_tp_b, head.bwd + head_tp_b)
    return LayerGroup(
        work_f=work_f,
        work_b=work_b,
        fwd=Affine(0, round(work_f[0] * NS), round(work_f[1] * NS), round(work_f[2] * NS)),
        bwd=Affine(0, round(work_b[0] * NS), round(work_b[1] * NS), round(work_b[2] * NS)),
        fwd_tp=Affine(0, round(blk_tp_f * NS), round(emb_tp_f * NS), round(head_tp_f * NS)),
        bwd_tp=Affine(0, round(blk_tp_b * NS), round(emb_tp_b * NS), round(head_tp_b * NS)),
        params=(p_blk, lp_emb.param_count, lp_head.param_count),
        act=d.act,
        recompute_tmp=tmp,
        logits_fp32=d.logits_fp32,
        acts=Affine(0, at_mode, lp_emb.saved_activation_bytes.none, lp_head.saved_activation_bytes.none),
        flops=(flops_f + flops_b, emb.flops_fwd + emb.flops_bwd, head.flops_fwd + head.flops_bwd),
        fwd_ep=Affine(0, round(x.a2a_fwd * NS)) if x else Affine(),
        bwd_ep=Affine(0, round(x.a2a_bwd * NS)) if x else Affine(),
        expert_params=x.expert_params if x else 0,
    )


def moe_floor(
    ctx: Context, mbs: int, tp: int, sp: bool, recompute: str, tpo: bool, ep: int, etp: int
) -> tuple[int, int]:
    """Lower bounds (ns) of a MoE block's ``LayerGroup`` forward and backward per layer (``fwd.layer``, ``bwd.layer``)
    at (ep, etp), without pricing its experts' layout: the dense block's (``dense_parts``, shared) with the MLP
    swapped by ``experts.expert_floor`` (a layer's seconds are the dense block's + ``ExpertTerms.fwd``/``.bwd``; the
    floor priced once per etp, then the grouped GEMMs' floor and the all-to-all at each ep), rounded down with 2 ns to
    spare for the float sums. The search's first key of a MoE model's classes (``bounds.lean_bound(floor=True)``): a
    class's own layer group is priced only when it nears the front. Cached on the context."""
    key = (mbs, tp, sp, recompute, tpo, ep, etp)
    fl = ctx.moe_floors.get(key)
    if fl is None:
        rc = op_list_mode(recompute)  # the experts' floor reads only full
        part = ctx.expert_floors.get((mbs, tp, sp, rc, etp))
        if part is None:
            part = ctx.expert_floors[(mbs, tp, sp, rc, etp)] = expert_floor(ctx, mbs, tp, sp, rc, etp)
        d = dense_parts(ctx, mbs, tp, sp, rc, tpo)  # the dense block's ``work_f[0]``, ``work_b[0]``
        moe = ctx.model.moe
        assert moe is not None
        a2a_key = (mbs, tp, sp, ep)  # its bytes read (mbs, tp, sp)
        a2a = ctx.a2a_floors.get(a2a_key)
        if a2a is None:
            a2a = ctx.a2a_floors[a2a_key] = all_to_all_seconds(ctx, part.dispatched, ep, tp)
        g = part.scale * part.grouped(moe.num_experts, ep)
        f = d.blk.fwd + d.f_more + d.tp_f[0] + part.fwd + g + part.a2a_counts[0] * a2a
        rerun = module_recompute(ctx, mbs, tp, sp, 1, 1, False).bwd_more if recompute == MODULES else 0.0  # dense's
        b = (
            d.blk.bwd
            + rerun
            + d.b_more
            + d.tp_b[0]
            + part.bwd
            + (3 if part.rerun else 2) * g
            + part.a2a_counts[1] * a2a
        )
        low = -(2**62)  # no floor (a negative residual)
        fl = ctx.moe_floors[key] = (
            math.floor(f * NS) - 2 if math.isfinite(f) else low,
            math.floor(b * NS) - 2 if math.isfinite(b) else low,
        )
    return fl
