"""The integer terms a configuration class shares with every class of the same (micro-batch size, tp,
sequence parallelism, recomputation, ZeRO stage, dp) — ``shared_terms``, computed once each — and the
one formula of a pipeline rank's end-of-step term built from them (``end_terms``).

Every term is ``affine.Affine``: a constant, a coefficient per transformer layer, and the extras of the
embedding and the LM head, so a chunk's or a rank's value is affine in its layer count. The same
functions take a cut (ints: ``cost.evaluate``, the bounds) or CP-SAT variables (the cut solver's
model): one formula, whatever consumes it. Times are integer nanoseconds, memory integer bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, NamedTuple

from planner.affine import Affine, Count, total
from planner.comm import dp_group_in_node, tp_link
from planner.compute import Context, layer_times
from planner.memory import OPTIMIZER_STEP_BYTES, StateBytes, state_bytes

if TYPE_CHECKING:
    from planner.cost import Candidate

NS = 1e9


def ns(seconds: float) -> int:
    return round(seconds * NS)


@dataclass(frozen=True, slots=True)
class SharedTerms:
    """The parts of a class's costs that do not depend on pp, the schedule or the cut."""

    #: ns per micro-batch of a chunk: compute + blocking TP comm (+ ZeRO-3 gathers beyond it)
    fwd: Affine
    bwd: Affine  # including recomputation
    #: the TP-communication part of ``fwd``/``bwd`` (for the breakdown)
    fwd_tp: Affine
    bwd_tp: Affine
    #: the ZeRO-3 part of ``fwd``/``bwd``: its per-layer parameter gathers (and gradient reduce-scatters)
    #: beyond the layer's compute + TP comm, i.e. the exposed data-parallel communication (for the breakdown)
    fwd_z3: Affine
    bwd_z3: Affine
    #: bytes: model states of the rank's parameters; saved activations per live micro-batch copy
    states: Affine
    acts: Affine
    #: ns at the end of the step: DP gradient sync, optimizer step, ZeRO-1/2 parameter all-gather
    sync: Affine
    opt: Affine
    post: Affine
    state_bytes: StateBytes  # per parameter, by kind
    act: int  # one residual-stream tensor, bytes
    p2p_bytes: int  # one pipeline send (the activation, sequence-sharded with SP)
    logits_fp32: int
    recompute_tmp: int
    z3_tmp: int
    tie_embeddings: bool
    #: whether the stack overlaps the DP gradient sync with the rank's last backward (``planner.stacks``)
    overlap_grad_reduce: bool
    flops_layer: float  # model FLOPs (fwd+bwd incl. recompute) per micro-batch, per GPU
    flops_emb: float
    flops_head: float

    def own_head(self, c: Candidate) -> bool:
        """Whether the LM head has parameters of its own (tied to the embedding on a single chunk)."""
        return not self.tie_embeddings or c.pp * c.virtual_stages > 1


def shared_terms(ctx: Context, mbs: int, tp: int, sp: bool, recompute: str, zero_stage: int, dp: int) -> SharedTerms:
    key = ("shared", mbs, tp, sp, recompute, zero_stage, dp)
    s = ctx.memo.get(key)
    if s is None:
        s = ctx.memo[key] = _shared_terms(ctx, mbs, tp, sp, recompute, zero_stage, dp)
    return s


def class_terms(ctx: Context, c: Candidate) -> SharedTerms:
    return shared_terms(ctx, c.micro_batch_size, c.tp, c.sequence_parallel, c.recompute, c.zero_stage, c.dp)


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


def layer_group(ctx: Context, mbs: int, tp: int, sp: bool, recompute: str) -> LayerGroup:
    key = ("group", mbs, tp, sp, recompute)
    lg = ctx.memo.get(key)
    if lg is None:
        lg = ctx.memo[key] = _layer_group(ctx, mbs, tp, sp, recompute)
    return lg


def _layer_group(ctx: Context, mbs: int, tp: int, sp: bool, recompute: str) -> LayerGroup:
    model, seq, cm = ctx.model, ctx.training.seq_len, ctx.comm
    blk = layer_times(ctx, "transformer_block", mbs, tp, sp, recompute)
    emb = layer_times(ctx, "embedding", mbs, tp, sp, "none")
    head = layer_times(ctx, "lm_head", mbs, tp, sp, "none")
    lp_blk = ctx.layer("transformer_block", mbs, tp, sp)
    lp_emb = ctx.layer("embedding", mbs, tp, sp)
    lp_head = ctx.layer("lm_head", mbs, tp, sp)

    # --- tensor-parallel communication (blocking, on the compute stream, Megatron-style)
    act = mbs * seq * model.hidden_size * ctx.elt  # one residual-stream tensor
    link = tp_link(ctx.cluster.gpus_per_node, tp)
    ar = cm.time("all_reduce", act, tp, link)
    half = cm.time("reduce_scatter", act, tp, link)  # = all-gather
    blk_tp_f = 2 * ar
    blk_tp_b = 2 * ar + (2 * ar if recompute == "full" else 0.0)
    vocab_parallel = model.vocab_size % tp == 0
    if tp > 1 and vocab_parallel:
        emb_tp_f, emb_tp_b = (half, half) if sp else (ar, 0.0)
        head_tp_f, head_tp_b = (half, half) if sp else (0.0, ar)
        head_tp_f += cm.time("all_reduce", mbs * seq * 3 * 4, tp, link)  # max/sum/target
    else:
        emb_tp_f = emb_tp_b = 0.0
        head_tp_f = head_tp_b = half if sp else 0.0
    vocab_local = model.vocab_size // tp if vocab_parallel else model.vocab_size
    saved = lp_blk.saved_activation_bytes
    work_f = (blk.fwd + blk_tp_f, emb.fwd + emb_tp_f, head.fwd + head_tp_f)
    work_b = (blk.bwd + blk_tp_b, emb.bwd + emb_tp_b, head.bwd + head_tp_b)
    return LayerGroup(
        work_f=work_f,
        work_b=work_b,
        fwd=Affine(0, *map(ns, work_f)),
        bwd=Affine(0, *map(ns, work_b)),
        fwd_tp=Affine(0, ns(blk_tp_f), ns(emb_tp_f), ns(head_tp_f)),
        bwd_tp=Affine(0, ns(blk_tp_b), ns(emb_tp_b), ns(head_tp_b)),
        params=(lp_blk.param_count, lp_emb.param_count, lp_head.param_count),
        act=act,
        recompute_tmp={"none": 0, "selective": max(0, saved.none - saved.selective), "full": saved.none}[recompute],
        logits_fp32=mbs * seq * vocab_local * 4,  # fp32 upcast for the loss
        acts=Affine(
            0, int(saved.for_mode(recompute)), lp_emb.saved_activation_bytes.none, lp_head.saved_activation_bytes.none
        ),
        flops=(blk.flops_fwd + blk.flops_bwd, emb.flops_fwd + emb.flops_bwd, head.flops_fwd + head.flops_bwd),
    )


NOTHING = Affine()


def _shared_terms(ctx: Context, mbs: int, tp: int, sp: bool, recompute: str, zero_stage: int, dp: int) -> SharedTerms:
    lg = layer_group(ctx, mbs, tp, sp, recompute)
    tr, cm, e = ctx.training, ctx.comm, ctx.elt
    p_blk, p_emb, p_head = lg.params

    # --- ZeRO-3: parameters gathered per micro-batch (fwd and bwd), gradients reduce-scattered;
    # prefetched on a side stream, so a layer costs max(compute + TP comm, its collectives)
    dp_link = "intra_node" if dp_group_in_node(ctx.cluster.gpus_per_node, ctx.num_gpus, dp, tp) else "inter_node"
    fwd, bwd, z3_tmp, fwd_z3, bwd_z3 = lg.fwd, lg.bwd, 0, NOTHING, NOTHING
    if zero_stage == 3 and dp > 1:
        gather = [cm.time("all_gather", count * e, dp, dp_link) for count in lg.params]
        scatter = [cm.time("reduce_scatter", count * e, dp, dp_link) for count in lg.params]
        fwd = Affine(0, *(ns(max(w, t)) for w, t in zip(lg.work_f, gather)))
        bwd = Affine(0, *(ns(max(w, t + u)) for w, t, u in zip(lg.work_b, gather, scatter)))
        z3_tmp = 2 * p_blk * 2 * e  # two gathered layers (weights, gradients)
        fwd_z3, bwd_z3 = Affine(*(a - b for a, b in zip(fwd, lg.fwd))), Affine(*(a - b for a, b in zip(bwd, lg.bwd)))

    # --- memory (bytes per GPU)
    per_param = state_bytes(tr.precision, tr.optimizer, zero_stage, dp)
    per = per_param.total

    # --- end of step: DP gradient sync (overlapped with the rank's last backward), optimizer step
    def collective(name: str, nbytes_per_param: float) -> Affine:
        if dp == 1:
            return NOTHING
        one = cm.time(name, 1.0, dp, dp_link)
        per_byte = cm.time(name, 2.0, dp, dp_link) - one
        return Affine(
            ns(one - per_byte),
            ns(per_byte * p_blk * nbytes_per_param),
            ns(per_byte * p_emb * nbytes_per_param),
            ns(per_byte * p_head * nbytes_per_param),
        )

    if zero_stage == 0:
        sync, post = collective("all_reduce", e), NOTHING
    elif zero_stage in (1, 2):
        sync, post = collective("reduce_scatter", e), collective("all_gather", e)
    else:
        sync = post = NOTHING
    shard, upd, hbm = dp if zero_stage >= 1 else 1, OPTIMIZER_STEP_BYTES[tr.optimizer], ctx.gpu.hbm_bandwidth_GBps * 1e9

    return SharedTerms(
        fwd=fwd,
        bwd=bwd,
        fwd_tp=lg.fwd_tp,
        bwd_tp=lg.bwd_tp,
        fwd_z3=fwd_z3,
        bwd_z3=bwd_z3,  # TP comm is within the layer time: never exposed beyond it
        states=Affine(0, math.ceil(p_blk * per), math.ceil(p_emb * per), math.ceil(p_head * per)),
        acts=lg.acts,
        sync=sync,
        post=post,
        # + the ``step_overhead_s`` residual once per step (every rank's end term holds it; the step takes the max)
        opt=Affine(
            ns(ctx.residuals.step_overhead_s),
            ns(p_blk / shard * upd / hbm),
            ns(p_emb / shard * upd / hbm),
            ns(p_head / shard * upd / hbm),
        ),
        state_bytes=per_param,
        act=lg.act,
        p2p_bytes=lg.act // tp if sp else lg.act,
        logits_fp32=lg.logits_fp32,
        recompute_tmp=lg.recompute_tmp,
        z3_tmp=z3_tmp,
        tie_embeddings=ctx.model.tie_embeddings,
        overlap_grad_reduce=ctx.stack.overlap_grad_reduce,
        flops_layer=lg.flops[0],
        flops_emb=lg.flops[1],
        flops_head=lg.flops[2],
    )


# ---------------------------------------------------------------------------------------------
# The end of the step on one pipeline rank


class EndTerms(NamedTuple, Generic[Count]):
    """Pipeline rank r's end of step, ns: its DP gradient sync overlaps its last backward (chunk r) when
    the stack overlaps it (``Stack.overlap_grad_reduce``; else ``overlap`` is 0), then the optimizer step, then the ZeRO-1/2 parameter all-gather."""

    sync: Count
    overlap: Count
    optimizer: Count
    post: Count


def end_parts(t: EndTerms[Count]) -> list[Count]:
    """The rank's end term is the max of these: ``max(0, sync − overlap) + optimizer + post``."""
    done = t.optimizer + t.post
    if isinstance(t.sync, int) and t.sync == 0:  # nothing to sync
        return [done]
    return [done, t.sync - t.overlap + done]


def end_terms(s: SharedTerms, c: Candidate, n: Sequence[Count], r: int) -> EndTerms[Count]:
    """The end terms of rank r of class ``c`` at the cut ``n`` (rank r holds chunks r, r + pp, …;
    the embedding is on rank 0, the LM head on rank pp − 1)."""
    layers = total(n[r :: c.pp])
    emb, head = r == 0, r == c.pp - 1 and s.own_head(c)
    return EndTerms(
        s.sync.at(layers, emb, head),
        (s.bwd if s.overlap_grad_reduce else NOTHING).at(n[r], r == 0, r == c.chunks - 1),
        s.opt.at(layers, emb, head),
        s.post.at(layers, emb, head),
    )


def rank_end(t: EndTerms[int]) -> int:
    return max(end_parts(t))


def exposed_sync(t: EndTerms[int]) -> int:
    """The DP sync on the critical path (the sync beyond its overlap, and the ZeRO all-gather)."""
    return max(0, t.sync - t.overlap) + t.post
