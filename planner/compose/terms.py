"""The integer terms a configuration class shares with every class of the same (micro-batch size, tp,
sequence parallelism, recomputation, ZeRO stage, dp, TP overlap, ep, etp) — ``shared_terms``, computed once
each; the one formula of a pipeline rank's end-of-step term built from them is ``step_end.end_terms``.

Every term is ``affine.Affine`` (a constant, a coefficient per layer, the embedding's and LM head's extras): affine in
a chunk's or rank's layer count. The same functions take a cut (ints: ``cost.evaluate``, the bounds) or CP-SAT
variables (the cut solver's model): one formula, whatever consumes it. Times are integer ns, memory integer bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, NamedTuple

from planner.compose.affine import NOTHING, Affine, scaled
from planner.compose.blocks import block_counts, block_sequence, mixed_terms
from planner.compose.context import Context, SharedKey
from planner.compose.experts import dp_seconds, expert_state_bytes, expert_step_seconds
from planner.compose.fsdp2_copies import fsdp2_copies
from planner.compose.layer_group import (  # noqa: F401 (re-exported: their home before issue 26)
    NS,
    OVERLAP_SLOWDOWN,
    LayerGroup,
    layer_group,
    ns,
    overlapped,
)
from planner.compose.memory import StateBytes, main_grad_bytes, optimizer_step_bytes, stack_states, zero3_buffer_bytes
from planner.compose.zero3_sequence import block_seconds
from planner.pricing.collectives import (
    Groups,
    comm_seconds,
    owner_reduce_seconds,
    pipeline_action,
    step_reduction_seconds,
)
from planner.pricing.gpu import hbm_time, optimizer_step_times
from planner.pricing.grad_add import grad_add_seconds
from planner.pricing.host import fsdp_hook_times, hooks_measured, host_slowdown, host_step_dispatch, prefetch_overlaps
from planner.workload.accumulation import NO_ADD, DpSchedule, add_bytes, dp_schedule
from planner.workload.collectives import (
    NO_REDUCTIONS,
    Op,
    dp_sync,
    grad_bucket,
    grad_bytes,
    issuing,
    megatron_finalize,
    step_reductions,
    tied_embedding_sync,
)
from planner.workload.fp8 import fp8_state_bytes, gathered_params
from planner.workload.ops import metric_bytes
from planner.workload.zero2_reduce import module_params

if TYPE_CHECKING:
    from planner.compose.cost import Candidate


@dataclass(frozen=True, slots=True)
class SharedTerms:
    """The parts of a class's costs that do not depend on pp, the schedule or the cut."""

    #: ns per micro-batch of a chunk: compute + blocking TP comm (+ ZeRO-3 gathers beyond it)
    fwd: Affine
    bwd: Affine  # including recomputation
    fwd_tp: Affine  # the TP-communication part of ``fwd``/``bwd`` (for the breakdown)
    bwd_tp: Affine
    #: the ZeRO-3 part of ``fwd``/``bwd``: its per-layer parameter gathers (and gradient reduce-scatters)
    #: beyond the layer's compute + TP comm, i.e. the exposed data-parallel communication (for the breakdown)
    fwd_z3: Affine
    bwd_z3: Affine
    fwd_ep: Affine  # the EP all-to-all part of ``fwd``/``bwd`` (for the breakdown; MoE blocks)
    bwd_ep: Affine
    states: Affine  # bytes: model states of the rank's parameters; saved activations per live micro-batch copy
    acts: Affine
    sync: Affine  # ns at the end of the step: DP gradient sync, optimizer step, ZeRO-1/2 parameter all-gather
    opt: Affine
    post: Affine
    state_bytes: StateBytes  # per parameter, by kind
    act: int  # one residual-stream tensor, bytes
    p2p_bytes: int  # one pipeline send (the activation, sequence-sharded with SP)
    logits_fp32: int
    recompute_tmp: int
    z3_tmp: int
    tie_embeddings: bool
    #: whether the stack overlaps the DP gradient sync with the rank's last backward (``planner.specs.stacks``)
    overlap_grad_reduce: bool
    #: with ``overlap_grad_reduce``: the part of the last backward that hides the sync, (1 − σ)·bwd, and the
    #: least an overlapped sync costs, σ·sync (σ = ``OVERLAP_SLOWDOWN``: the compute under the sync is
    #: slowed by σ of the overlapped time); both NOTHING when the stack does not overlap it
    hidden_bwd: Affine
    sync_slowdown: Affine
    flops_layer: float  # model FLOPs (fwd+bwd incl. recompute) per micro-batch, per GPU
    flops_emb: float
    flops_head: float
    fwd_cp: Affine = Affine()  # the CP exchange's exposed part of fwd/bwd (``compose.context_parallel``; breakdown)
    bwd_cp: Affine = Affine()
    cp_tmp: int = 0  # bytes torch's ring attention holds in one attention call (``memory.rank_buffers``)
    #: ``states``' gradients that exist only from their chunk's first backward on (``memory.pending_grads``), or NOTHING
    grads: Affine = Affine()
    #: ns the first and last pipeline ranks spend on their tied embeddings' all-reduce (``tied_embedding_sync``; pp > 1)
    tied_sync: int = 0
    #: two block kinds (``block_sequence``): MoE layers in the first i layers, the FLOPs a MoE layer adds; else None
    moe_prefix: tuple[int, ...] | None = None
    flops_moe: float = 0.0
    chunk_grad_sync: bool = False  # DP sync chunk by chunk under interleaved 1F1B (``step_end.chunk_sync_terms``)
    #: ``Stack.overlap_param_gather``: (1 − σ)·fwd and σ·post (``step_end.param_gather_parts``); else NOTHING
    hidden_fwd: Affine = Affine()
    post_slowdown: Affine = Affine()
    all_warmup: bool = False  # ``Stack.interleaved_all_warmup``: the memory peaks' interleaved order (``pp_order``)

    def own_head(self, c: Candidate) -> bool:
        """Whether the LM head has parameters of its own (tied to the embedding on a single chunk)."""
        return not self.tie_embeddings or c.pp * c.virtual_stages > 1


def shared_terms(
    ctx: Context,
    mbs: int,
    tp: int,
    sp: bool,
    recompute: str,
    zero_stage: int,
    dp: int,
    tpo: bool = False,
    ep: int = 1,
    etp: int = 1,
    pipelined: bool = False,
) -> SharedTerms:
    """``tpo``: the TP collectives overlapped with the GEMMs (``parallel.tp_comm_overlap``); ``ep``/``etp``: the
    expert-parallel and expert-tensor-parallel degrees of a MoE model's routed experts; ``pipelined``: under a
    pipeline schedule (pp × virtual stages > 1: ``workload.accumulation``)."""
    key = (mbs, tp, sp, recompute, zero_stage, dp, tpo, ep, etp, pipelined)
    s = ctx.shared.get(key)
    if s is None:
        kinds, prefix = block_sequence(ctx)
        if prefix is None:
            s = ctx.shared[key] = kind_terms(ctx, key, kinds[0])
        else:  # dense and MoE blocks: each term's per-layer coefficient of each kind
            s = ctx.shared[key] = mixed_terms(ctx, key, prefix)
    return s


def memory_terms(ctx: Context, key: SharedKey) -> SharedTerms:
    """``shared_terms``' memory terms (states, activations, buffers: the same values) without pricing any time
    (every time term NOTHING): what the memory screens read (``search.screens``), a few times cheaper. The shared
    terms themselves when already priced."""
    s = ctx.shared.get(key) or ctx.shared_memory.get(key)
    if s is None:
        kinds, prefix = block_sequence(ctx)
        if prefix is None:
            s = ctx.shared_memory[key] = kind_terms(ctx, key, kinds[0], memory_only=True)
        else:
            s = ctx.shared_memory[key] = mixed_terms(ctx, key, prefix, memory_only=True)
    return s


def shared_key(c: Candidate, dp: int | None = None) -> SharedKey:
    """The key of the terms a class shares with others (``shared_terms``' arguments, in order): one place, so that
    every cache of them (priced, memory-only, pipelined) reads the same fields. ``dp``: another data-parallel size
    (a CP class's local view spans dp·cp)."""
    return (
        c.micro_batch_size,
        c.tp,
        c.sequence_parallel,
        c.recompute,
        c.zero_stage,
        c.dp if dp is None else dp,
        c.tp_comm_overlap,
        c.ep,
        c.etp,
        c.pp * c.virtual_stages > 1,
    )


def class_terms(ctx: Context, c: Candidate) -> SharedTerms:
    """``shared_terms`` of the class; pipelined on a host, every chunk's forward and backward per micro-batch
    + the schedule's measured host work per action (``collectives.pipeline_action``)."""
    key = shared_key(c)
    s = shared_terms(ctx, *key)
    action = ns(pipeline_action(ctx)) if c.pp * c.virtual_stages > 1 else 0
    if not action:
        return s
    piped = ctx.piped.get(key)
    if piped is None:
        more = Affine(const=action)
        piped = ctx.piped[key] = replace(s, fwd=s.fwd.plus(more), bwd=s.bwd.plus(more))
    return piped


class KindMemory(NamedTuple):
    """``kind_memory``: layer group, DP schedule, wire gradient bytes, state bytes, states, ZeRO-3 buffers, gradients."""

    lg: LayerGroup
    sched: DpSchedule
    ge: int
    per_param: StateBytes
    states: Affine
    z3_tmp: int
    grads: Affine


def kind_memory(ctx: Context, key: SharedKey, kind: str) -> KindMemory:
    """``kind_terms``' memory part (bytes per GPU), which ``blocks.mixed_terms`` joins without the rest."""
    mbs, tp, sp, recompute, zero_stage, dp, tpo, ep, etp, pipelined = key
    lg = layer_group(ctx, mbs, tp, sp, recompute, tpo, ep, etp, kind)
    tr, e = ctx.training, ctx.elt
    p_blk, p_emb, p_head = lg.params
    # the DP collectives per micro-batch or per step (``workload.accumulation``)
    sched = dp_schedule(ctx.stack.grad_accumulation, zero_stage, pipelined)
    ge = grad_bytes(ctx.stack, tr.precision, e)  # gradients on the wire (fp32 where the stack reduces in fp32)
    whole = sched.whole_grad_bytes(ctx.stack.grad_accumulation, e, ge)  # gradients accumulated unsharded
    main = main_grad_bytes(ctx.stack, ge)  # Megatron's main_grad buffer (``memory.state_bytes``)
    per_param = stack_states(ctx.stack, tr, zero_stage, dp, whole, main)
    per = per_param.total
    pe = lg.expert_params  # a MoE block's routed experts: states sharded, gradients synced over expert-DP
    per_e = expert_state_bytes(ctx, zero_stage, tp, dp, ep, etp, whole, main) if pe else per
    # + FP8 training's cached FP8 weights and scaling state per block (``workload.fp8.fp8_state_bytes``)
    states = Affine(
        0,
        math.ceil((p_blk - pe) * per + pe * per_e) + fp8_state_bytes(ctx, tp),
        math.ceil(p_emb * per),
        math.ceil(p_head * per),
    )
    z3_tmp = zero3_buffer_bytes(ctx.stack, p_blk, e) if zero_stage == 3 and dp > 1 else 0  # gathered layers, grads
    gb = per_param.gradients if whole else 0  # the accumulated gradients, from each chunk's first backward on
    grads = Affine(0, *(math.floor(p * gb) for p in (p_blk, p_emb, p_head))) if gb else NOTHING
    return KindMemory(lg, sched, ge, per_param, states, z3_tmp, grads)


def kind_terms(ctx: Context, key: SharedKey, kind: str, memory_only: bool = False) -> SharedTerms:
    """The terms of a model whose every block is of ``kind``, with the real model's parameter count (the DP
    buckets): ``blocks.merged`` joins the two kinds of a mixed model. ``memory_only``: the memory terms alone
    (``memory_class_terms``), every time term NOTHING."""
    mbs, tp, sp, recompute, zero_stage, dp, tpo, ep, etp, pipelined = key
    at = (mbs, tp, sp, recompute, tpo, ep, etp)
    lg, sched, ge, per_param, states, z3_tmp, grads = kind_memory(ctx, key, kind)
    tr, e = ctx.training, ctx.elt
    p_blk, p_emb, p_head = lg.params
    pe = lg.expert_params
    if memory_only:
        return replace(memory_terms_of(ctx, lg, states, per_param, z3_tmp, tp, sp), grads=grads)

    # --- DP collectives per micro-batch (``workload.accumulation``: ZeRO-3's gathers, FSDP's per-micro-batch ones): on a
    # side stream, a layer costs the longer of its compute + TP comm (slowed under them: ``overlapped``) and its
    # collectives — or their sum where the device runs them synchronously (``host.prefetch_overlaps``)
    how, g, slow = issuing(ctx.stack), Groups.of(ctx, tp, dp), OVERLAP_SLOWDOWN
    reduce_op: Op = "all_reduce" if zero_stage == 0 else "reduce_scatter"

    fwd, bwd, fwd_z3, bwd_z3 = lg.fwd, lg.bwd, NOTHING, NOTHING
    if dp > 1 and (sched.gather_fwd or sched.reduce_each):
        split, none = (lg.expert_params, (tp, dp, ep, etp)), (0.0, 0.0, 0.0)  # MoE experts over expert-DP
        gathered = gathered_params(ctx, lg.params, tp)  # FP8 weights gathered in FP8 where the stack does
        gather = dp_seconds(ctx, how, "all_gather", gathered, e, None, g, *split) if sched.gather_fwd else none
        gather_b = gather if sched.gather_bwd else none
        scatter = dp_seconds(ctx, how, reduce_op, lg.params, ge, None, g, *split) if sched.reduce_each else none
        owner = zero_stage == 2 and ctx.stack.zero2_reduce == "owner"  # DeepSpeed v0.5.0: on the compute stream
        if owner:
            scatter = owner_reduce_seconds(ctx, module_params(ctx.model, tp), ge, g, lg.params)
        join = (lambda w, t: overlapped(w, t, slow)) if prefetch_overlaps(ctx) and not owner else (lambda w, t: w + t)
        # + FSDP2's copies on the compute stream around them (``accumulation.fsdp2_copy_bytes``; a GPU: a host's are
        # in its measured hooks)
        out_f, out_b, into = fsdp2_copies(ctx, sched, zero_stage, gathered, lg.params, ge, dp)
        fwd = Affine(0, *(ns(join(w + c, t)) for w, c, t in zip(lg.work_f, out_f, gather)))
        bwd = Affine(
            0, *(ns(join(w + c + r, t + u)) for w, c, r, t, u in zip(lg.work_b, out_b, into, gather_b, scatter))
        )
        z = block_seconds(ctx, lg, tp, recompute, g, e, ge) if zero_stage == 3 and how.zero3_fetch == "param" else None
        if z is not None:  # DeepSpeed v0.5.0's fetch by fetch (``compose.zero3_sequence``)
            fwd, bwd = fwd._replace(layer=ns(z[0])), bwd._replace(layer=ns(z[1]))
        fwd_z3, bwd_z3 = Affine(*(a - b for a, b in zip(fwd, lg.fwd))), Affine(*(a - b for a, b in zip(bwd, lg.bwd)))

    # --- the gradient-accumulation pass on the compute stream: each micro-batch's backward, the first's less and the
    # buffer's zeroing once per step (``accumulation.add_bytes``, ``pricing.grad_add``; a GPU: a host's is measured)
    add = add_bytes(ctx.stack.grad_add, ctx.stack.grad_accumulation, zero_stage, sched, tr.precision, e, ge, dp)
    acc_each, acc_once = grad_add_seconds(ctx, kind, mbs, tp, lg.params, NO_ADD if hooks_measured(ctx) else add, pe)
    bwd = bwd.plus(Affine(0, *map(ns, acc_each)))
    # + the trainer's metrics over the logits after each micro-batch's backward (``ops.metric_bytes``: Composer's)
    bwd = bwd.plus(Affine(0, 0, 0, ns(sum(hbm_time(ctx, b) for b in metric_bytes(ctx, mbs, tp)))))

    # --- a host device's FSDP2 hooks per micro-batch (``collectives.fsdp_hook_times``; none on a GPU)
    hooks = fsdp_hook_times(ctx, dp)
    if hooks is not None:
        fwd = fwd.plus(Affine(0, *map(ns, hooks[0])))
        bwd = bwd.plus(Affine(0, *map(ns, hooks[1])))

    # --- end of step: DP gradient sync (overlapped with the rank's last backward), optimizer step, ZeRO-1/2's
    # parameter all-gather. In gradient buckets (``workload.collectives.grad_bucket``: as the stack buckets them): the rank's
    # bytes at the rate of one bucket's collective — or as the stack issues them (``workload.collectives``).
    total = p_emb + p_head + sum(layer_group(ctx, *at, k).params[0] * n for k, n in block_counts(ctx).items())

    def collective(name: Op | None) -> Affine:
        if dp == 1 or name is None:
            return NOTHING
        bucket = grad_bucket(ctx.stack, dp, total)
        degrees = (tp, dp, ep, etp)
        if name == "all_gather":  # the updated parameters
            gathered = gathered_params(ctx, lg.params, tp)
            return Affine(0, *map(ns, dp_seconds(ctx, how, name, gathered, e, bucket, g, pe, degrees)))
        return Affine(0, *map(ns, dp_seconds(ctx, how, name, lg.params, ge, bucket, g, pe, degrees)))

    sync_op, post_op = dp_sync(zero_stage)  # once per step unless run per micro-batch (``sched``)
    sync_op = None if sched.reduce_each else (sync_op or "reduce_scatter")
    if zero_stage == 1 and ctx.stack.zero1_sync == "all_reduce":  # DeepSpeed v0.5.0 (planner.specs.stack_eras)
        sync_op = "all_reduce"
    sync, post = collective(sync_op), collective(None if sched.gather_fwd else post_op)
    # optimizer step: memory-bound multi-tensor kernels over the (sharded) states at achieved HBM bandwidth
    shard = dp if zero_stage >= 1 else 1
    upd = optimizer_step_bytes(tr.optimizer, tr.precision, ctx.stack.optimizer_dtype, ge)
    step = optimizer_step_times(ctx, (p_blk - pe, p_emb, p_head), shard, upd)
    step[0] += expert_step_seconds(ctx, pe, zero_stage, (tp, dp, ep, etp), upd)

    # + a host device's optimizer and gradient-clip dispatch (none on a GPU), and the reductions at the step's end
    # as the stack issues them
    host_opt = host_step_dispatch(ctx, tp, sp, dp)
    reductions = step_reductions(ctx.model, e, tp, sp, dp, zero_stage) if how.step_reductions else NO_REDUCTIONS
    tied = tied_embedding_sync(ctx.model, ge, tp) if how.finalize_grads == "megatron" else ()
    if how.finalize_grads == "megatron":
        reductions = megatron_finalize(ctx.model, ge, tp, sp)
    red, host_once = step_reduction_seconds(ctx, reductions, g)
    host_opt = [a + b for a, b in zip(host_opt, red)]

    return SharedTerms(
        fwd=fwd,
        bwd=bwd,
        fwd_tp=lg.fwd_tp,
        bwd_tp=lg.bwd_tp,
        fwd_z3=fwd_z3,
        bwd_z3=bwd_z3,  # TP comm is within the layer time: never exposed beyond it
        fwd_ep=lg.fwd_ep,
        bwd_ep=lg.bwd_ep,
        states=states,
        acts=lg.acts,
        sync=sync,
        post=post,
        # + the ``step_overhead_s`` residual once per step (every rank's end term holds it; the step takes the max),
        # host work: slowed on a host whose ranks share its cores (``host_slowdown``)
        opt=Affine(
            ns(ctx.residuals.step_overhead_s * host_slowdown(ctx)) + ns(host_once),
            ns(step[0] + acc_once[0]) + ns(host_opt[0]),
            ns(step[1] + acc_once[1]) + ns(host_opt[1]),
            ns(step[2] + acc_once[2]) + ns(host_opt[2]),
        ),
        state_bytes=per_param,
        act=lg.act,
        p2p_bytes=lg.act // tp if sp else lg.act,
        logits_fp32=lg.logits_fp32,
        recompute_tmp=lg.recompute_tmp,
        z3_tmp=z3_tmp,
        tie_embeddings=ctx.model.tie_embeddings,
        overlap_grad_reduce=ctx.stack.overlap_grad_reduce,
        hidden_bwd=scaled(bwd, 1 - slow) if ctx.stack.overlap_grad_reduce else NOTHING,
        sync_slowdown=scaled(sync, slow) if ctx.stack.overlap_grad_reduce else NOTHING,
        flops_layer=lg.flops[0],
        flops_emb=lg.flops[1],
        flops_head=lg.flops[2],
        tied_sync=ns(comm_seconds(ctx, tied, g)),
        grads=grads,
        chunk_grad_sync=ctx.stack.overlap_grad_reduce and how.finalize_grads == "megatron",
        hidden_fwd=scaled(fwd, 1 - slow) if ctx.stack.overlap_param_gather else NOTHING,
        post_slowdown=scaled(post, slow) if ctx.stack.overlap_param_gather else NOTHING,
        all_warmup=ctx.stack.interleaved_all_warmup,
    )


def memory_terms_of(
    ctx: Context, lg: LayerGroup, states: Affine, per_param: StateBytes, z3_tmp: int, tp: int, sp: bool
) -> SharedTerms:
    """``kind_terms``' memory terms (its very values) with every time term NOTHING: what the memory screens read."""
    return SharedTerms(
        fwd=NOTHING,
        bwd=NOTHING,
        fwd_tp=NOTHING,
        bwd_tp=NOTHING,
        fwd_z3=NOTHING,
        bwd_z3=NOTHING,
        fwd_ep=NOTHING,
        bwd_ep=NOTHING,
        states=states,
        acts=lg.acts,
        sync=NOTHING,
        post=NOTHING,
        opt=NOTHING,
        state_bytes=per_param,
        act=lg.act,
        p2p_bytes=lg.act // tp if sp else lg.act,
        logits_fp32=lg.logits_fp32,
        recompute_tmp=lg.recompute_tmp,
        z3_tmp=z3_tmp,
        tie_embeddings=ctx.model.tie_embeddings,
        overlap_grad_reduce=ctx.stack.overlap_grad_reduce,
        hidden_bwd=NOTHING,
        sync_slowdown=NOTHING,
        flops_layer=0.0,
        flops_emb=0.0,
        flops_head=0.0,
        all_warmup=ctx.stack.interleaved_all_warmup,
    )
