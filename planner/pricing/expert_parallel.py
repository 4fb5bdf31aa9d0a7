"""What a MoE block's expert-parallel work (``planner.workload.expert_parallel.ExpertWork``) costs on this device,
beside the dense MLP it replaces: the grouped expert GEMMs by their per-expert shape (``gpu.gemm_time``: wave and
tile quantization at the small M of each expert), the memory-bound permutes at achieved HBM bandwidth, and the
token all-to-all over the EP group (``all_to_all_seconds``).

All-to-all (nccl-tests ``alltoall_perf``: bus bandwidth = algorithm bandwidth × (n−1)/n, doc/PERFORMANCE.md):
each of n ranks sends (n−1)/n of its S-byte buffer to the others. Inside a node (NVSwitch) the bytes move at the
achieved NVLink bus rate for the message size (``CommModel.ring_rate``, the nccl-tests curve); across nodes
each GPU's own NIC carries the (n − m)/n of S bound for other nodes (m ranks of the group per node) while
NVLink carries the (m − 1)/n inside, at the NIC's achieved ceiling with the same size curve; latency is NCCL's
for n − 1 steps (one send/recv per peer). EP groups are ``ep`` consecutive data-parallel ranks (stride tp),
Megatron-core's tp-cp-ep-dp-pp order."""

from __future__ import annotations

from dataclasses import dataclass

from planner.pricing.collectives import Groups, comm_seconds
from planner.pricing.comm import dp_group_in_node, dp_ranks_per_node
from planner.pricing.device import Device
from planner.pricing.gpu import gemm_time, hbm_time, ops_time
from planner.workload.collectives import Comms
from planner.workload.expert_parallel import ExpertWork, Gemm
from planner.workload.fp8 import fp8_linears, grouped_cast_ops, linear_cast_ops
from planner.workload.ops import MOE_BLOCK, MemOp

#: The dense MLP's linears in a block's op list (``ops.dense_block_linears``), which a MoE MLP replaces.
DENSE_MLP = ("w1", "w3", "w2")


def all_to_all_seconds(ctx: Device, nbytes: float, ep: int, tp: int) -> float:
    """Seconds of one all-to-all of ``nbytes`` per rank over the ``ep`` ranks of an EP group (module docstring)."""
    if ep <= 1 or nbytes <= 0:
        return 0.0
    cm, g = ctx.comm, ctx.cluster.gpus_per_node
    ring = cm.ring_rate(nbytes)
    if dp_group_in_node(g, ctx.num_gpus, ep, tp):
        t = cm.latency("all_gather", ep) + (ep - 1) / ep * nbytes / ring
    else:
        m = max(1, dp_ranks_per_node(g, ep, tp))
        size_eff = ring / cm.ring_asymptote()
        net = (ep - m) / ep * nbytes / (cm.nic_Bps(-(-ep // m)) * size_eff)
        local = (m - 1) / ep * nbytes / ring
        t = cm.latency("all_gather", ep, m, inter=True) + max(net, local)
    return cm.scale * t


def a2a_seconds(ctx: Device, comms: Comms, ep: int, tp: int) -> float:
    return sum(c.count * all_to_all_seconds(ctx, c.nbytes, ep, tp) for c in comms)


@dataclass(frozen=True, slots=True)
class ExpertSeconds:
    """Seconds per MoE block and micro-batch: the change of forward and backward compute (MoE MLP − dense MLP),
    the all-to-alls, and the change of the blocking TP communication."""

    fwd: float
    bwd: float
    a2a_fwd: float
    a2a_bwd: float
    tp_fwd: float
    tp_bwd: float


def _gemms(ctx: Device, gemms: tuple[Gemm, ...], fp8: tuple[bool, ...] = ()) -> tuple[float, float]:
    """(forward, backward) seconds of ``gemms``; ``fp8``: which of them run in FP8 (all three directions)."""
    f = b = 0.0
    for i, (m, n, k, c) in enumerate(gemms):
        q = i < len(fp8) and fp8[i]
        f += gemm_time(ctx, m, n, k, c, fp8=q)
        b += gemm_time(ctx, m, k, n, c, fp8=q, backward=True) + gemm_time(ctx, k, n, m, c, fp8=q, backward=True)
    return f, b


def fp8_flags(ctx: Device, w: ExpertWork) -> tuple[tuple[bool, ...], tuple[bool, ...]]:
    """Which of ``w.gemms`` and of ``w.dense_gemms`` run in FP8 under the request's recipe: the dense MLP the block's
    op list priced as FP8 linears (``workload.fp8.fp8_linears``) and the shared experts (dense linears too); the
    router never; the grouped experts on the megatron stack (Transformer Engine's ``GroupedLinear`` under
    ``fp8_autocast``: ``workload.fp8.grouped_cast_ops``), 16-bit elsewhere (their own converters, not priced)."""
    if ctx.fp8_recipe is None:
        return (), ()
    grouped = ctx.stack.moe_dispatch == "megatron"
    return (False, grouped, grouped) + (True,) * (len(w.gemms) - 3), (True,) * len(w.dense_gemms)


def fp8_cast_seconds(ctx: Device, w: ExpertWork, tp: int) -> tuple[float, float]:
    """(forward, backward) seconds of the FP8 casts a MoE MLP adds beside the dense MLP's the block priced
    (``gpu.cast_times``): the grouped experts' per-expert quantization and padding on the megatron stack
    (``workload.fp8.grouped_cast_ops``) and the shared experts' casts, less the dense MLP's (``linear_cast_ops``)."""
    if ctx.fp8_recipe is None:
        return 0.0, 0.0
    (rows, f, h, _), (_, _, _, local) = w.gemms[1], w.gemms[2]
    full = w.dense_gemms[0][0]
    shared = [lin for lin in fp8_linears(ctx, MOE_BLOCK, tp) if lin.fp8 and lin.name.startswith("shared_")]
    sf, sb = linear_cast_ops(ctx, shared, full)
    gf: tuple[MemOp, ...] = ()
    gb: tuple[MemOp, ...] = ()
    if ctx.stack.moe_dispatch == "megatron":
        align = 32 if ctx.fp8_recipe == "mxfp8" else 16  # TE fp8_padding.py:113-114
        padded = not (ctx.model.moe is not None and ctx.model.moe.pad_to_capacity and rows % align == 0)
        gf, gb = grouped_cast_ops(ctx, rows, local, h, f, ctx.elt, padded)
    df, db = dense_cast_seconds(ctx, full, tp)
    return ops_time(ctx, gf + sf) - df, ops_time(ctx, gb + sb) - db


def dense_cast_seconds(ctx: Device, full: int, tp: int) -> tuple[float, float]:
    """(forward, backward) seconds of the FP8 casts of the dense MLP (``DENSE_MLP``) over ``full`` tokens that the
    block's op list priced (``gpu.cast_times``) and a MoE MLP replaces."""
    if ctx.fp8_recipe is None:
        return 0.0, 0.0
    dense = [lin for lin in fp8_linears(ctx, "transformer_block", tp) if lin.fp8 and lin.name in DENSE_MLP]
    df, db = linear_cast_ops(ctx, dense, full)
    return ops_time(ctx, df), ops_time(ctx, db)


def expert_seconds(ctx: Device, w: ExpertWork, tp: int, ep: int, recompute: str) -> ExpertSeconds:
    """``ExpertSeconds`` of ``w`` with the compute and memory residuals the block's own ops get; under FP8 the GEMMs
    at their precision (``fp8_flags``) and the casts the MoE MLP adds (``fp8_cast_seconds``)."""
    r = ctx.residuals
    moe_fp8, dense_fp8 = fp8_flags(ctx, w)
    mf, mb = _gemms(ctx, w.gemms, moe_fp8)
    df, db = _gemms(ctx, w.dense_gemms, dense_fp8)
    mem = hbm_time(ctx, w.mem_bytes) - hbm_time(ctx, w.dense_mem_bytes)
    bias_f, bias_b = (hbm_time(ctx, x) if x else 0.0 for x in w.bias_bytes)  # Megatron's per-expert fc2 bias
    bias_f += ops_time(ctx, w.clamp_ops[0])  # ... and its eager clamp of a clamped SwiGLU (gpt-oss)
    bias_b += ops_time(ctx, w.clamp_ops[1])
    cast_f, cast_b = fp8_cast_seconds(ctx, w, tp)
    fwd = r.compute_scale * (mf - df) + r.memory_scale * (mem + bias_f + cast_f)
    bwd = r.compute_scale * (mb - db) + r.memory_scale * (2 * mem + bias_b + cast_b)
    if recompute == "full":  # the backward reruns the forward
        bwd += fwd
    g = Groups(tp, 1, "intra_node", 1)
    tp_f = comm_seconds(ctx, w.tp_fwd, g) - comm_seconds(ctx, w.dense_tp_fwd, g)
    tp_b = comm_seconds(ctx, w.tp_bwd, g) - comm_seconds(ctx, w.dense_tp_bwd, g)
    return ExpertSeconds(fwd, bwd, a2a_seconds(ctx, w.a2a_fwd, ep, tp), a2a_seconds(ctx, w.a2a_bwd, ep, tp), tp_f, tp_b)
