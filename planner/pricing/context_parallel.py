"""What a context-parallel group's collectives (``planner.workload.context_parallel``) cost on this device.

Where the group sits: the mesh is (pp, dp, cp, tp), row-major (``planner.specs.layout``), so a CP group is
``cp`` ranks at stride tp inside a block of cp·tp consecutive GPUs — placed as a DP group of the same size
is (``comm.dp_group_in_node``, ``comm.dp_ranks_per_node``): inside one node when tp·cp fits it, else across
nodes with gcd(cp, g/tp) of its ranks per node. A ring's step runs all its hops at once and waits for the
slowest, so a ring that leaves the node moves at the network's send/recv rate; ``a2a+p2p``'s all-to-alls run
over the ``inner`` ranks of one node (NVLink) and its ring over the nodes.

Rates: all-gather / reduce-scatter at the ring collective model, all-to-all at bus factor (n − 1)/n (nccl-tests
``doc/PERFORMANCE.md``: each rank keeps 1/n of its buffer) with each rank's cross-node share through its own
NIC (``comm.CommModel.model_time``), send/recv as one pair's transfer (``comm`` ``send_recv``).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.pricing.comm import dp_group_in_node, dp_ranks_per_node
from planner.pricing.device import Device
from planner.workload.collectives import Collective


@dataclass(frozen=True, slots=True)
class CpGroup:
    """A CP group: ``cp`` ranks, ``per_node`` of them on a node, over ``link``; ``inner``: the ranks of
    ``a2a+p2p``'s all-to-all (those on one node, NVLink), the ring then over cp / inner."""

    cp: int
    link: str
    per_node: int
    inner: int
    cp_comm: str

    @classmethod
    def of(cls, ctx: Device, tp: int, cp: int, cp_comm: str) -> CpGroup:
        g = ctx.cluster.gpus_per_node
        inside = dp_group_in_node(g, ctx.num_gpus, cp, tp)
        per = cp if inside else dp_ranks_per_node(g, cp, tp)
        return cls(cp, "intra_node" if inside else "inter_node", per, max(1, per), cp_comm)


def cp_collective(ctx: Device, c: Collective, grp: CpGroup) -> float:
    """Seconds of one CP collective ``c`` (its ``count`` not applied) on ``grp``: the network fit ×
    ``comm_scale`` (a host's measured classes do not cover CP: the model's figure there too)."""
    cm = ctx.comm
    if grp.cp_comm == "a2a+p2p" and grp.inner < grp.cp:  # all-to-alls on the node (NVLink), the ring across nodes
        if c.op == "all_to_all":
            return cm.time("all_to_all", c.nbytes, grp.inner, "intra_node", grp.inner)
        return cm.time("send_recv", c.nbytes, 2, "inter_node")
    if c.op == "send_recv":  # one ring step: every rank sends its block to the next at once, the slowest hop bounds it
        return cm.time("send_recv", c.nbytes, 2, grp.link)
    return cm.time(c.op, c.nbytes, grp.cp, grp.link, grp.per_node)
