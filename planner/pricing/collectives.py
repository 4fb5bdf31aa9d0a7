"""What the collectives a configuration issues (``planner.workload.collectives``) cost on this device: ``comm_seconds``
over a layer's list, each collective by its axis. One collective's time as a step sees it — a tensor-parallel one (``tp_collective``), a data-parallel one of
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

from collections import Counter
from dataclasses import dataclass

from planner.pricing.comm import dp_group_in_node, dp_ranks_per_node, tp_link
from planner.pricing.context_parallel import CpGroup, cp_collective
from planner.pricing.device import Device
from planner.pricing.host import host_dispatch
from planner.pricing.metric_sync import metric_sync_seconds
from planner.workload.collectives import Collective, Comms, StepReductions
from planner.workload.zero2_reduce import owner_reduces


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


@dataclass(frozen=True, slots=True)
class Groups:
    """The groups a class's collectives run on: ``tp`` ranks (inside a node as far as it goes) and ``dp`` ranks,
    ``per_node`` of them on a node, over NVLink (``intra_node``) or the network."""

    tp: int
    dp: int
    dp_link: str
    per_node: int
    cp: CpGroup | None = None  # the CP group (``pricing.context_parallel``) when cp > 1

    @classmethod
    def of(cls, ctx: Device, tp: int, dp: int) -> Groups:
        g = ctx.cluster.gpus_per_node
        link = "intra_node" if dp_group_in_node(g, ctx.num_gpus, dp, tp) else "inter_node"
        return cls(tp, dp, link, dp_ranks_per_node(g, dp, tp))


def collective_seconds(ctx: Device, c: Collective, g: Groups) -> float:
    """Seconds of one collective ``c`` (its ``count`` not applied): TP ones at ``tp_collective`` (all-gathers
    at a reduce-scatter's time, the model's one figure for either), DP ones at ``dp_collective`` (issued in
    buckets: its bytes at the rate of one bucket's collective), CP ones at ``context_parallel.cp_collective``, the
    embedding group's (axis ``"pp"``) over two ranks."""
    if c.axis == "tp":
        op = "all_reduce" if c.op == "all_reduce" else "reduce_scatter"
        return tp_collective(ctx, op, c.nbytes, g.tp, in_step_extra=c.in_step_extra)
    if c.axis == "dp":
        if c.bucket is None:
            return dp_collective(ctx, c.op, c.nbytes, g.dp, g.dp_link, g.per_node)
        return ctx.comm.time(c.op, c.bucket, g.dp, g.dp_link, g.per_node) / c.bucket * c.nbytes
    if c.axis == "cp" and g.cp is not None:
        return cp_collective(ctx, c, g.cp)
    if c.axis == "pp":  # the embedding group: the first and the last stage, on other nodes unless the job fits one
        link = "intra_node" if ctx.num_gpus <= ctx.cluster.gpus_per_node else "inter_node"
        return ctx.comm.time(c.op, c.nbytes, 2, link, 1)
    raise ValueError(f"no pricing for {c.axis} collectives")


def comm_seconds(ctx: Device, comms: Comms, g: Groups) -> float:
    """Seconds of a list of collectives, issued one after another."""
    t = 0.0
    for c in comms:
        t += c.count * collective_seconds(ctx, c, g)
    return t


def per_kind_seconds(ctx: Device, comms: tuple[Comms, Comms, Comms], g: Groups) -> tuple[float, float, float]:
    """``comm_seconds`` of each layer kind's list (block, embedding, LM head)."""
    blk, emb, head = (comm_seconds(ctx, c, g) for c in comms)
    return blk, emb, head


def step_reduction_seconds(ctx: Device, r: StepReductions, g: Groups) -> tuple[list[float], float]:
    """(per layer kind, once per rank) seconds of the reductions at the end of a step; a coalesced all-reduce whose
    bytes grow with the rank's blocks is priced affinely: its base once, each block its bytes' increment. Once per
    step also: a Composer trainer's sync of its train metrics over all ranks (``metric_sync.metric_sync_seconds``)."""
    per_kind = list(per_kind_seconds(ctx, r.per_kind, g))
    once = 0.0
    if r.coalesced is not None:
        base, per_block = r.coalesced
        first = tp_collective(ctx, "all_reduce", base, g.tp)
        once += first
        per_kind[0] += tp_collective(ctx, "all_reduce", base + per_block, g.tp) - first
    once += comm_seconds(ctx, r.once, g) + metric_sync_seconds(ctx)
    return per_kind, once


def owner_reduce_seconds(
    ctx: Device, params: tuple[tuple[int, int], ...], grad_elt: float, g: Groups, kinds: tuple[int, int, int]
) -> tuple[float, float, float]:
    """Seconds per micro-batch of ZeRO-2's owner reduces as DeepSpeed v0.5.0 issues them (``workload.zero2_reduce``:
    ``params`` in module order, buckets of the stack's ``zero3_reduce_bucket`` elements), one after another, each an
    NCCL ring reduce over the dp group; spread over the layer kinds (block, embedding, LM head) by their parameters
    (``kinds``), as a bucketed sync is."""
    bucket = ctx.stack.zero3_reduce_bucket or 500_000_000
    pieces = Counter(owner_reduces(params, g.dp, bucket))
    total = sum(n * k for n, k in pieces.items())
    secs = sum(k * ctx.comm.time("reduce", n * grad_elt, g.dp, g.dp_link, g.per_node) for n, k in pieces.items())
    return (secs * kinds[0] / total, secs * kinds[1] / total, secs * kinds[2] / total) if total else (0.0, 0.0, 0.0)
