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
from planner.pricing.gpu import gemm_time, hbm_time
from planner.workload.collectives import Comms
from planner.workload.expert_parallel import ExpertWork, Gemm


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


def _gemms(ctx: Device, gemms: tuple[Gemm, ...]) -> tuple[float, float]:
    f = b = 0.0
    for m, n, k, c in gemms:
        f += gemm_time(ctx, m, n, k, c)
        b += gemm_time(ctx, m, k, n, c) + gemm_time(ctx, k, n, m, c)
    return f, b


def expert_seconds(ctx: Device, w: ExpertWork, tp: int, ep: int, recompute: str) -> ExpertSeconds:
    """``ExpertSeconds`` of ``w`` with the compute and memory residuals the block's own ops get."""
    r = ctx.residuals
    mf, mb = _gemms(ctx, w.gemms)
    df, db = _gemms(ctx, w.dense_gemms)
    mem = hbm_time(ctx, w.mem_bytes) - hbm_time(ctx, w.dense_mem_bytes)
    bias_f, bias_b = (hbm_time(ctx, x) if x else 0.0 for x in w.bias_bytes)  # Megatron's per-expert fc2 bias
    fwd = r.compute_scale * (mf - df) + r.memory_scale * (mem + bias_f)
    bwd = r.compute_scale * (mb - db) + r.memory_scale * (2 * mem + bias_b)
    if recompute == "full":  # the backward reruns the forward
        bwd += fwd
    g = Groups(tp, 1, "intra_node", 1)
    tp_f = comm_seconds(ctx, w.tp_fwd, g) - comm_seconds(ctx, w.dense_tp_fwd, g)
    tp_b = comm_seconds(ctx, w.tp_bwd, g) - comm_seconds(ctx, w.dense_tp_bwd, g)
    return ExpertSeconds(fwd, bwd, a2a_seconds(ctx, w.a2a_fwd, ep, tp), a2a_seconds(ctx, w.a2a_bwd, ep, tp), tp_f, tp_b)
