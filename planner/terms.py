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
    return int(round(seconds * NS))


@dataclass(frozen=True)
class SharedTerms:
    """The parts of a class's costs that do not depend on pp, the schedule or the cut."""

    #: ns per micro-batch of a chunk: compute + blocking TP comm (+ ZeRO-3 gathers beyond it)
    fwd: Affine
    bwd: Affine  # including recomputation
    #: the TP-communication part of ``fwd``/``bwd`` (for the breakdown)
    fwd_tp: Affine
    bwd_tp: Affine
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
    flops_layer: float  # model FLOPs (fwd+bwd incl. recompute) per micro-batch, per GPU
    flops_emb: float
    flops_head: float

    def own_head(self, c: Candidate) -> bool:
        """Whether the LM head has parameters of its own (tied to the embedding on a single chunk)."""
        return not (self.tie_embeddings and c.chunks == 1)

    def buffers(self, c: Candidate) -> Affine:
        """Buffers that do not scale with the cut: one rematerialised layer, two ZeRO-3-gathered
        layers, p2p send/recv, and the fp32 logits on the LM head's rank."""
        return Affine(self.recompute_tmp + self.z3_tmp + (2 * self.p2p_bytes if c.pp > 1 else 0), head=self.logits_fp32)


def shared_terms(ctx: Context, mbs: int, tp: int, sp: bool, recompute: str, zero_stage: int, dp: int) -> SharedTerms:
    return ctx.cached(("shared", mbs, tp, sp, recompute, zero_stage, dp),
                      lambda: _shared_terms(ctx, mbs, tp, sp, recompute, zero_stage, dp))


def class_terms(ctx: Context, c: Candidate) -> SharedTerms:
    return shared_terms(ctx, c.micro_batch_size, c.tp, c.sequence_parallel, c.recompute, c.zero_stage, c.dp)


def _shared_terms(ctx: Context, mbs: int, tp: int, sp: bool, recompute: str, zero_stage: int, dp: int) -> SharedTerms:
    model, tr, cm = ctx.model, ctx.training, ctx.comm
    seq, e = tr.seq_len, ctx.elt
    g = ctx.cluster.gpus_per_node

    # --- compute
    blk = layer_times(ctx, "transformer_block", mbs, tp, sp, recompute)
    emb = layer_times(ctx, "embedding", mbs, tp, sp, "none")
    head = layer_times(ctx, "lm_head", mbs, tp, sp, "none")
    lp_blk = ctx.layer("transformer_block", mbs, tp, sp)
    lp_emb = ctx.layer("embedding", mbs, tp, sp)
    lp_head = ctx.layer("lm_head", mbs, tp, sp)
    params = (lp_blk.param_count, lp_emb.param_count, lp_head.param_count)

    # --- tensor-parallel communication (blocking, on the compute stream, Megatron-style)
    act = mbs * seq * model.hidden_size * e  # one residual-stream tensor
    link = tp_link(g, tp)
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
        head_tp_f = head_tp_b = (half if sp else 0.0)

    # --- ZeRO-3: parameters gathered per micro-batch (fwd and bwd), gradients reduce-scattered;
    # prefetched on a side stream, so a layer costs max(compute + TP comm, its collectives)
    dp_link = "intra_node" if dp_group_in_node(g, ctx.num_gpus, dp, tp) else "inter_node"
    zero3 = zero_stage == 3 and dp > 1

    def exposed(compute: float, count: int, fwd: bool) -> float:
        if not zero3:
            return compute
        t = cm.time("all_gather", count * e, dp, dp_link)
        return max(compute, t if fwd else t + cm.time("reduce_scatter", count * e, dp, dp_link))

    f_blk, b_blk = exposed(blk.fwd + blk_tp_f, params[0], True), exposed(blk.bwd + blk_tp_b, params[0], False)
    fwd = Affine(0, ns(f_blk), ns(exposed(emb.fwd + emb_tp_f, params[1], True)), ns(exposed(head.fwd + head_tp_f, params[2], True)))
    bwd = Affine(0, ns(b_blk), ns(exposed(emb.bwd + emb_tp_b, params[1], False)), ns(exposed(head.bwd + head_tp_b, params[2], False)))

    # --- memory (bytes per GPU)
    per_param = state_bytes(tr.precision, tr.optimizer, zero_stage, dp)
    states = Affine(0, *(int(math.ceil(count * per_param.total)) for count in params))
    recompute_tmp = {"none": 0, "selective": max(0, lp_blk.saved_activation_bytes.none - lp_blk.saved_activation_bytes.selective),
                     "full": lp_blk.saved_activation_bytes.none}[recompute]
    vocab_local = model.vocab_size // tp if vocab_parallel else model.vocab_size

    # --- end of step: DP gradient sync (overlapped with the rank's last backward), optimizer step
    hbm = ctx.gpu.hbm_bandwidth_GBps * 1e9
    upd = OPTIMIZER_STEP_BYTES[tr.optimizer]

    def collective(name: str, nbytes_per_param: float) -> Affine:
        if dp == 1:
            return Affine()
        one = cm.time(name, 1.0, dp, dp_link)
        per_byte = cm.time(name, 2.0, dp, dp_link) - one
        return Affine(ns(one - per_byte), *(ns(per_byte * count * nbytes_per_param) for count in params))

    if zero_stage == 0:
        sync, post = collective("all_reduce", e), Affine()
    elif zero_stage in (1, 2):
        sync, post = collective("reduce_scatter", e), collective("all_gather", e)
    else:
        sync = post = Affine()
    shard = dp if zero_stage >= 1 else 1

    return SharedTerms(
        fwd=fwd, bwd=bwd,
        fwd_tp=Affine(0, ns(min(blk_tp_f, f_blk)), ns(emb_tp_f), ns(head_tp_f)),
        bwd_tp=Affine(0, ns(min(blk_tp_b, b_blk)), ns(emb_tp_b), ns(head_tp_b)),
        states=states,
        acts=Affine(0, int(lp_blk.saved_activation_bytes.for_mode(recompute)), lp_emb.saved_activation_bytes.none,
                    lp_head.saved_activation_bytes.none),
        sync=sync, post=post, opt=Affine(0, *(ns(count / shard * upd / hbm) for count in params)),
        state_bytes=per_param, act=act, p2p_bytes=act // tp if sp else act,
        logits_fp32=mbs * seq * vocab_local * 4,  # fp32 upcast for the loss
        recompute_tmp=recompute_tmp, z3_tmp=2 * params[0] * 2 * e if zero3 else 0,  # two gathered layers (weights, grads)
        tie_embeddings=model.tie_embeddings,
        flops_layer=blk.flops_fwd + blk.flops_bwd, flops_emb=emb.flops_fwd + emb.flops_bwd, flops_head=head.flops_fwd + head.flops_bwd,
    )


# ---------------------------------------------------------------------------------------------
# The end of the step on one pipeline rank


class EndTerms(NamedTuple, Generic[Count]):
    """Pipeline rank r's end of step, ns: its DP gradient sync overlaps its last backward (chunk r),
    then the optimizer step, then the ZeRO-1/2 parameter all-gather."""

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
    layers = total(n[r::c.pp])
    emb, head = r == 0, r == c.pp - 1 and s.own_head(c)
    return EndTerms(s.sync.at(layers, emb, head), s.bwd.at(n[r], r == 0, r == c.chunks - 1),
                    s.opt.at(layers, emb, head), s.post.at(layers, emb, head))


def rank_end(t: EndTerms[int]) -> int:
    return max(end_parts(t))


def exposed_sync(t: EndTerms[int]) -> int:
    """The DP sync on the critical path (the sync beyond its overlap, and the ZeRO all-gather)."""
    return max(0, t.sync - t.overlap) + t.post
