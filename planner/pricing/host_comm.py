"""One collective's time as a step sees it — a tensor-parallel one (``tp_collective``), a data-parallel one of
FSDP2's (``dp_collective``), a pipeline send/recv (``p2p``): on a GPU the α-β model or network fit × ``comm_scale``;
on a host device (a CPU "GPU") with the run's own measurement of the class (``HostDispatch.tp_all_reduce_us``,
``tp_all_gather_us``, ``dp_*_us``, ``p2p_us``) that measured in-step cost, unscaled.

On a host every collective costs several times the network fit in the step (its dispatch, the wait for the
other ranks and their wake-up on shared cores, the spread of their work between), and how much moves with the
load of the run's moment; the network fit times collectives back to back. One ``comm_scale`` fitted on some runs
priced the others' collectives at another moment's load; measured by each run's ranks, no class needs the
residual (older runs without a class: the network fit × ``comm_scale``, as before).
"""

from __future__ import annotations

from collections.abc import Callable

from planner.pricing.comm import layer_collectives, tp_link
from planner.pricing.device import Device
from planner.pricing.host import host_dispatch, host_fsdp_hooks
from planner.workload.ops import block_linears, param_tensors


def tp_collective(ctx: Device, name: str, size_bytes: float, tp: int, *, in_step_extra: bool = True) -> float:
    """Seconds of one blocking TP collective ``name`` (``all_reduce``; ``reduce_scatter`` = all-gather) of
    ``size_bytes`` (unsharded) over the ``tp`` ranks of a TP group. On a host with the measured class: the
    measured figure at ``tp_collective_bytes``, moved to ``size_bytes`` by the network fit's per-byte slope
    (unscaled). On a host without it (older runs): the network fit × ``comm_scale`` + ``tp_collective_us``
    (with ``in_step_extra``). Elsewhere the model's ``CommModel.time``."""
    g = ctx.cluster.gpus_per_node
    link, per_node = tp_link(g, tp), min(tp, g)
    cm = ctx.comm
    hd = host_dispatch(ctx) if tp > 1 else None
    if hd is not None and hd.tp_all_reduce_us is not None:
        us = hd.tp_all_reduce_us
        if name != "all_reduce" and hd.tp_all_gather_us is not None:
            us = hd.tp_all_gather_us
        ref = hd.tp_collective_bytes or size_bytes
        slope = cm.unscaled_time(name, size_bytes, tp, link, per_node) - cm.unscaled_time(name, ref, tp, link, per_node)
        return max(0.0, us * 1e-6 + slope)
    t = cm.time(name, size_bytes, tp, link, per_node)
    if hd is not None and in_step_extra:  # measured in the run itself, under its load: not scaled by a residual
        t += (hd.tp_collective_us or 0.0) * 1e-6
    return t


#: The measured DP class of each collective FSDP2 issues (``HostDispatch``).
DP_FIELDS = {
    "all_reduce": "dp_all_reduce_us",
    "all_gather": "dp_all_gather_us",
    "reduce_scatter": "dp_reduce_scatter_us",
}


def _measured(ctx: Device, us: float, ref: float | None, name: str, size: float, n: int, link: str, per: int) -> float:
    """A measured in-step figure at ``ref`` bytes, moved to ``size`` by the network fit's per-byte slope (unscaled)."""
    cm = ctx.comm
    slope = cm.unscaled_time(name, size, n, link, per) - cm.unscaled_time(name, ref or size, n, link, per)
    return max(0.0, us * 1e-6 + slope)


def dp_collective(ctx: Device, name: str, size_bytes: float, dp: int, link: str, per_node: int) -> float:
    """Seconds of one data-parallel collective ``name`` of ``size_bytes`` over ``dp`` ranks. On a host with the
    run's measurement of that class (``HostDispatch.dp_*_us``, FSDP2's per wrapped module, as issued in the step):
    the measured figure, unscaled. Elsewhere (a GPU, older runs) the network fit × ``comm_scale``."""
    hd = host_dispatch(ctx) if dp > 1 else None
    us = getattr(hd, DP_FIELDS.get(name, ""), None) if hd is not None else None
    if hd is None or us is None:
        return ctx.comm.time(name, size_bytes, dp, link, per_node)
    return _measured(ctx, us, hd.dp_collective_bytes, name, size_bytes, dp, link, per_node)


def p2p(ctx: Device, size_bytes: float, link: str) -> float:
    """Seconds of one pipeline send/recv of ``size_bytes``. On a host with the run's measurement
    (``HostDispatch.p2p_us``): the measured figure, unscaled. Elsewhere the network fit × ``comm_scale``."""
    hd = host_dispatch(ctx)
    if hd is None or hd.p2p_us is None:
        return ctx.comm.time("send_recv", size_bytes, 2, link)
    return _measured(ctx, hd.p2p_us, hd.p2p_bytes, "send_recv", size_bytes, 2, link, 1)


def pipeline_action(ctx: Device) -> float:
    """Seconds a host adds to each pipeline-schedule action (a micro-batch's forward or backward on a chunk) of a
    pipelined plan: the run's measurement (``HostDispatch.pp_action_us``), unscaled; 0 on a GPU and unmeasured."""
    hd = host_dispatch(ctx)
    return (hd.pp_action_us or 0.0) * 1e-6 if hd is not None else 0.0


def host_step_end(
    ctx: Device, tp: int, sp: bool, dp: int, zero_stage: int, dp_all_reduce: Callable[[float], float]
) -> tuple[list[float], float]:
    """A host's work at the end of a step (none on a GPU: ``([0, 0, 0], 0)``), seconds: per (block, embedding, LM
    head), AdamW's and the gradient clip's dispatch per parameter tensor (DTensors under the FSDP2 wrappers,
    dp > 1, and in TP-sharded modules, plain tensors otherwise) and the SP norms' gradient reductions; and once
    per rank and step, the collectives issued once (``dp_all_reduce(bytes)``: one on the run's DP group)."""
    hd = host_dispatch(ctx)
    per_kind, once = [0.0, 0.0, 0.0], 0.0
    if hd is None:
        return per_kind, once
    e = ctx.elt
    for i, kind in enumerate(("transformer_block", "embedding", "lm_head")):
        n, sharded = param_tensors(ctx.model, kind)
        # with SP the block's norms are DTensors too (``SequenceParallel``): all its tensors
        dt = n if dp > 1 or (tp > 1 and sp and kind == "transformer_block") else (sharded if tp > 1 else 0)
        us = dt * hd.adam_dtensor_us + (n - dt) * hd.adam_plain_us
        us += dt * (hd.clip_dtensor_us or 0.0) + (n - dt) * (hd.clip_plain_us or 0.0)  # the gradient clip
        per_kind[i] = ctx.residuals.compute_scale * us * 1e-6
    if tp > 1 and sp:  # SP norms' gradients come out Partial(sum) over TP
        tensors = 2 if ctx.model.norm == "layernorm" else 1  # per norm
        if dp > 1:  # the FSDP2 wrappers reduce each tensor's after its module's backward
            t = tp_collective(ctx, "all_reduce", ctx.model.hidden_size * e, tp)
            per_kind[0] += 2 * tensors * t  # a block's two norms
            per_kind[2] += tensors * t  # the final norm
        else:  # one all-reduce of them all (``runtime.job.reduce_partial_grads``): a block's two norms' bytes each
            norm = tensors * ctx.model.hidden_size * e
            first = tp_collective(ctx, "all_reduce", norm, tp)
            once += first
            per_kind[0] += tp_collective(ctx, "all_reduce", 3 * norm, tp) - first
    # the gradient clip's norm of DTensor gradients sharded by TP or by ZeRO >= 1: one all-reduce of the partial
    # norm (DTensor issues it inside ``linalg_vector_norm``; counted on the runtime's step)
    if tp > 1:
        once += tp_collective(ctx, "all_reduce", 4, tp)
    elif dp > 1 and zero_stage >= 1:
        once += dp_all_reduce(4)
    return per_kind, once


# ------------------------------------------------------------------------------------------------
# What a class's layers spend in collectives, by device: a GPU's model (bucketed, overlapped on side streams)
# or a host's, as the bundled runtime issues them there and the run measured them


def block_tp_comm(ctx: Device, tp: int, sp: bool, recompute: str, ar: float, half: float) -> tuple[float, float]:
    """(forward, backward) seconds of one block's blocking TP collectives, ``ar`` one all-reduce of the residual
    stream and ``half`` one reduce-scatter (= all-gather): two per direction, Megatron-style (with SP an
    all-gather and a reduce-scatter each, a GPU ring all-reduce's time; on a host two collectives with their own
    latency), again in backward under full recomputation. On a host with measured DTensor dispatch
    (``GpuSpec.host_dispatch``), the bundled runtime's backward as it runs (counted per step on this host): one
    all-reduce of the input gradient per column-parallel linear (each its own DTensor input: wq, wk, wv, w1
    (+ w3)), with SP the all-gathers of the row-parallel outputs' gradients; and each DTensor linear's dispatch
    beyond a plain one, × the compute residual (the processor that computes also dispatches)."""
    hd = host_dispatch(ctx) if tp > 1 else None
    cs = ctx.residuals.compute_scale
    blk_ar = 2 * half if hd is not None and sp else ar
    fwd = 2 * blk_ar
    bwd = 2 * blk_ar + (2 * blk_ar if recompute == "full" else 0.0)
    if hd is not None:
        lin = block_linears(ctx.model)
        bwd = (lin - 2) * ar + (2 * half if sp else 0.0) + (fwd if recompute == "full" else 0.0)
        fwd += cs * lin * hd.tp_linear_fwd_us * 1e-6
        bwd += cs * lin * (hd.tp_linear_bwd_us + (hd.tp_linear_fwd_us if recompute == "full" else 0.0)) * 1e-6
    return fwd, bwd


def dp_layer_collectives(
    ctx: Device, name: str, nbytes: float, dp: int, link: str, per_node: int, params: tuple[int, int, int]
) -> list[float]:
    """Seconds of one DP collective ``name`` of each layer's (block, embedding, LM head) parameters at ``nbytes``
    each (``comm.layer_collectives``; on a host one per FSDP2-wrapped module, as the runtime issues them)."""
    host = host_dispatch(ctx) is not None
    return layer_collectives(lambda b: dp_collective(ctx, name, b, dp, link, per_node), params, nbytes, host)


def prefetch_overlaps(ctx: Device) -> bool:
    """Whether ZeRO-3's per-layer gathers and reduce-scatters run beside the layer's compute (a GPU: prefetched
    on a side stream) or add to it (a host: FSDP2 calls gloo's collectives synchronously, the processor waits)."""
    return host_dispatch(ctx) is None


def fsdp_hook_times(ctx: Device, dp: int) -> tuple[list[float], list[float]] | None:
    """(forward, backward) seconds per layer (block, embedding, LM head) and micro-batch of a host's FSDP2 hooks:
    the bundled runtime wraps every block and the chunk (``replicate``/``fully_shard``, any ZeRO stage) when
    dp > 1 (``host.host_fsdp_hooks``), × the compute residual. None on a GPU (or dp = 1)."""
    if host_dispatch(ctx) is None or dp <= 1:
        return None
    cs = ctx.residuals.compute_scale  # on a host the processor that computes also dispatches
    hooks = [host_fsdp_hooks(ctx, kind) for kind in ("transformer_block", "embedding", "lm_head")]
    return [cs * f for f, _ in hooks], [cs * b for _, b in hooks]


def dp_sync_times(
    ctx: Device,
    name: str,
    nbytes_per_param: float,
    dp: int,
    link: str,
    per_node: int,
    params: tuple[int, int, int],
    bucket_params: int,
) -> list[float]:
    """Seconds per layer (block, embedding, LM head) of the end-of-step DP collective ``name`` over its
    parameters: in gradient buckets of ``bucket_params`` parameters (a layer's bytes at the rate of one
    bucket's collective); on a host the runtime's FSDP2 wrappers, a blocking collective per wrapped module."""
    if host_dispatch(ctx) is not None:
        return dp_layer_collectives(ctx, name, nbytes_per_param, dp, link, per_node, params)
    bucket = bucket_params * nbytes_per_param
    per_byte = ctx.comm.time(name, bucket, dp, link, per_node) / bucket
    return [per_byte * p * nbytes_per_param for p in params]
