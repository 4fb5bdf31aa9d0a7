"""The part of a block's ``terms.LayerGroup`` its dense op list gives at (micro-batch size, tp, sequence parallelism,
recomputation, TP overlap): the block's, embedding's and LM head's layer times and profiles and their blocking TP
communication (``DenseParts``). A MoE block replaces the MLP of this dense block (``compose.experts``), so the
(ep, etp) pairs of a mixture of experts share one; ``dense_parts`` prices it once per point, cached on the context
(the same calls in the same order as before it was shared: the same numbers)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from planner.compose.context import Context
from planner.pricing.collectives import Groups, per_kind_seconds
from planner.pricing.host import dtensor_linear_dispatch, host_dispatch
from planner.pricing.layer_times import LayerTimes, layer_times
from planner.pricing.tp_overlap import overlap_delta
from planner.workload.collectives import issuing, tp_comms
from planner.workload.ops import block_linears

if TYPE_CHECKING:
    from planner.specs import LayerProfile


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
    f_more: float  # overlapped TP's GEMM slowdown beyond its TP part
    b_more: float


def dense_parts(ctx: Context, mbs: int, tp: int, sp: bool, recompute: str, tpo: bool, slowdown: float) -> DenseParts:
    """``DenseParts`` at one point, cached on the context: the dense op list's layer times, profiles and TP
    communication, priced once for every (ep, etp) of a mixture of experts (values unchanged: the same calls).
    ``slowdown``: ``terms.OVERLAP_SLOWDOWN`` (a constant: not in the key)."""
    key = (mbs, tp, sp, recompute, tpo)
    d = ctx.dense_parts.get(key)
    if d is None:
        d = ctx.dense_parts[key] = _dense_parts(ctx, *key, slowdown)
    return d


def _dense_parts(ctx: Context, mbs: int, tp: int, sp: bool, recompute: str, tpo: bool, slowdown: float) -> DenseParts:
    model, seq = ctx.model, ctx.training.seq_len
    blk = layer_times(ctx, "transformer_block", mbs, tp, sp, recompute)
    emb = layer_times(ctx, "embedding", mbs, tp, sp, "none")
    head = layer_times(ctx, "lm_head", mbs, tp, sp, "none")
    lp_blk = ctx.layer("transformer_block", mbs, tp, sp)
    lp_emb = ctx.layer("embedding", mbs, tp, sp)
    lp_head = ctx.layer("lm_head", mbs, tp, sp)

    # --- tensor-parallel communication (blocking, on the compute stream): what the stack issues, priced here
    act = mbs * seq * model.hidden_size * ctx.elt  # one residual-stream tensor
    comms = tp_comms(model, issuing(ctx.stack), act, tp, sp, recompute, mbs * seq)
    g = Groups(tp, 1, "intra_node", 1)  # the TP group alone
    (blk_tp_f, emb_tp_f, head_tp_f), (blk_tp_b, emb_tp_b, head_tp_b) = (
        per_kind_seconds(ctx, comms.fwd, g),
        per_kind_seconds(ctx, comms.bwd, g),
    )
    if tp > 1 and host_dispatch(ctx) is not None:  # a host's DTensor dispatch of the block's sharded linears
        more_f, more_b = dtensor_linear_dispatch(ctx, block_linears(model), recompute)  # (none on a GPU)
        blk_tp_f, blk_tp_b = blk_tp_f + more_f, blk_tp_b + more_b
    f_more = b_more = 0.0  # overlapped TP (``pricing.tp_overlap``): the block's pairs pipelined, GEMMs slowed
    if tpo and ctx.stack.tp_overlap is not None:
        d = overlap_delta(ctx, ctx.stack.tp_overlap, mbs, tp, recompute, act, slowdown)
        blk_tp_f, blk_tp_b = blk_tp_f + d.fwd_tp, blk_tp_b + d.bwd_tp
        f_more, b_more = d.fwd - d.fwd_tp, d.bwd - d.bwd_tp
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
    )
