"""α-β costs of the collectives a parallel plan issues (ring algorithms, as NCCL uses for large
messages).

For a group of ``n`` ranks, a message of ``S`` bytes per rank, per-rank one-direction bandwidth ``B``
and per-step latency ``α`` (nccl-tests ``doc/PERFORMANCE.md``; see also docs/planner.md):

* all-reduce      2(n−1)·α + 2(n−1)/n · S/B
* all-gather / reduce-scatter   (n−1)·α + (n−1)/n · S/B   (S = the full, unsharded size)
* send/recv       α + S/B

Link classes: ``intra_node`` (NVLink: ``ClusterSpec.intra_node_bandwidth_GBps`` or the GPU's
``nvlink_bandwidth_GBps``) and ``inter_node`` (``inter_node_bandwidth_GBps`` or the GPU's NIC rate,
one NIC per GPU as in DGX/HGX systems, so a ring across nodes runs at the NIC rate).
A group is intra-node when all its ranks share a node.

Latency defaults (overridable by ``ClusterSpec.*_latency_us``): 2 µs per ring step on NVLink and
5 µs across InfiniBand — the order of the small-message times nccl-tests reports (a 8-byte
all-reduce over 8 NVLink GPUs ≈ 14 steps ≈ 20–30 µs). A measured ``NetworkProfile`` (from
``meshplan profile cluster``) replaces both α and β per collective and link class: its fit at group
size g gives the link bandwidth through the same ring factor, re-applied at the group size needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from planner.specs import ClusterSpec, GpuSpec, NetworkProfile

DEFAULT_INTRA_LATENCY_S = 2e-6
DEFAULT_INTER_LATENCY_S = 5e-6

_STEPS = {
    "all_reduce": lambda n: 2 * (n - 1),
    "all_gather": lambda n: n - 1,
    "reduce_scatter": lambda n: n - 1,
    "send_recv": lambda n: 1,
}
_VOLUME = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
}


@dataclass(frozen=True)
class Link:
    latency_s: float
    bandwidth_Bps: float


@dataclass(frozen=True)
class CommModel:
    intra: Link
    inter: Link
    gpus_per_node: int
    network: NetworkProfile | None = None
    #: × every collective's and send/recv's seconds: the ``comm_scale`` residual (``Residuals``).
    scale: float = 1.0

    @classmethod
    def for_cluster(
        cls, cluster: ClusterSpec, gpu: GpuSpec, network: NetworkProfile | None = None, scale: float = 1.0
    ) -> CommModel:
        intra_bw = cluster.intra_node_bandwidth_GBps or gpu.nvlink_bandwidth_GBps
        inter_bw = cluster.inter_node_bandwidth_GBps or gpu.nic_bandwidth_GBps
        intra_lat = (
            DEFAULT_INTRA_LATENCY_S if cluster.intra_node_latency_us is None else cluster.intra_node_latency_us * 1e-6
        )
        inter_lat = (
            DEFAULT_INTER_LATENCY_S if cluster.inter_node_latency_us is None else cluster.inter_node_latency_us * 1e-6
        )
        return cls(
            Link(intra_lat, intra_bw * 1e9), Link(inter_lat, inter_bw * 1e9), cluster.gpus_per_node, network, scale
        )

    def link_class(self, ranks: list[int]) -> str:
        nodes = {r // self.gpus_per_node for r in ranks}
        return "intra_node" if len(nodes) == 1 else "inter_node"

    def time(self, collective: str, size_bytes: float, n: int, link: str) -> float:
        """Seconds for one collective of ``size_bytes`` (per rank, unsharded) over ``n`` ranks: the
        model's (``unscaled_time``) × ``scale`` (the ``comm_scale`` residual; 1.0 leaves it as is)."""
        return self.scale * self.unscaled_time(collective, size_bytes, n, link)

    def unscaled_time(self, collective: str, size_bytes: float, n: int, link: str) -> float:
        """Seconds for one collective by the α-β model (or the measured network fit), before residuals."""
        if n <= 1 or size_bytes <= 0:
            return 0.0
        steps, volume = _STEPS[collective](n), _VOLUME[collective](n)
        fit = self.network.fit(link, collective) if self.network is not None else None
        if fit is not None:
            g = fit.group_size
            # Per-step latency and link bandwidth implied by the fit at its own group size.
            alpha = fit.alpha_s / _STEPS[collective](g)
            seconds_per_byte = fit.beta_s_per_byte / _VOLUME[collective](g)
            return steps * alpha + volume * size_bytes * seconds_per_byte
        ln = self.intra if link == "intra_node" else self.inter
        return steps * ln.latency_s + volume * size_bytes / ln.bandwidth_Bps


# ---------------------------------------------------------------------------------------------
# Where a plan's groups sit (the mesh layout of ``planner.layout``: dims (pp, dp, tp), TP innermost;
# pipeline rank i holds the ``block = dp·tp`` consecutive GPUs from i·block)


@lru_cache(maxsize=65536)
def boundary_crosses_nodes(gpus_per_node: int, block: int, i: int, j: int) -> bool:
    """Whether some pair (r, r + (j−i)·block) of pipeline ranks i → j sits on different nodes."""
    g = gpus_per_node
    if g % block == 0:
        return (i * block) // g != (j * block) // g
    if block % g == 0:
        return True
    return any((i * block + x) // g != (j * block + x) // g for x in range(block))


@lru_cache(maxsize=65536)
def dp_group_in_node(gpus_per_node: int, num_gpus: int, dp: int, tp: int) -> bool:
    """Whether every DP group (stride tp inside a pipeline rank's block of dp·tp GPUs) is inside a node."""
    g, span = gpus_per_node, dp * tp
    if dp == 1 or g % span == 0:
        return True
    if span > g:
        return False
    return all((b * span) // g == (b * span + span - 1) // g for b in range(num_gpus // span))


def tp_link(gpus_per_node: int, tp: int) -> str:
    """The link class of a TP group (TP innermost: inside a node iff tp divides the node)."""
    return "intra_node" if (tp <= gpus_per_node and gpus_per_node % tp == 0) else "inter_node"
