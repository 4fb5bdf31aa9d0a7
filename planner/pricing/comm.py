"""Costs of the collectives a parallel plan issues: achieved bus bandwidth by message size (measured
nccl-tests tables) and NCCL's own latency model (``src/graph/tuning.cc``), hierarchical across nodes.

For ``n`` ranks and a buffer of ``S`` bytes (the full, unsharded size; nccl-tests ``doc/PERFORMANCE.md``),
a collective moves ``bus·S`` bytes through each rank's link, with ``bus`` = 2(n−1)/n (all-reduce),
(n−1)/n (all-gather, reduce-scatter) or 1 (send/recv), and takes

    time = latency(collective, n, nodes) + bus·S ÷ B(S)

* **B(S), inside a node** (NVLink/NVSwitch): the bus bandwidth an 8-GPU all-reduce reaches at that
  buffer size in nccl-tests (``ALLREDUCE_8``: A100 NVLink3; H200 NVLink4 with NVLink SHARP; B200 NVLink5),
  with the table's own latency removed (``BusTable``), scaled by the link's rate over the table's
  (``ClusterSpec.intra_node_bandwidth_GBps`` or a GPU of the same family with another rate). Ring
  all-gather / reduce-scatter / send-recv reach the ring's rate, 80–82 % of the link at large sizes like a
  ring all-reduce; NVLink SHARP (NVLS) raises **all-reduce only**, and only with more than 4 (H100/H200)
  or 5 (B200) GPUs of one node, by the measured gain per GPU count (``NVLS_GAIN``). GPUs without a table
  of their own (V100, unknown ids) use A100's ring curve scaled to their link.
* **B(S), across nodes** (a group of ``m`` ranks per node on ``k`` nodes): NCCL's rings run one channel per
  NIC, so each node's share crosses the network through its ``m`` NICs at once; the bandwidth is the
  smaller of the NVLink ring's and ``m`` × the NIC's achieved ceiling (``NIC_CEILING_GBps``: HDR ≈ 24,
  NDR ≈ 47 GB/s per port), following the ring curve's shape by size. One rank per node (e.g. DP across
  nodes with TP filling each node) therefore runs at one NIC's rate, eight ranks per node at eight.
* **latency and protocol**: inside a node NCCL's LL128 ring (14.0 + steps·1.9 µs over NVLink — it matches the
  measured 8-GPU floors, 43.8 µs A100 and 39.8 µs H200 at 32 KiB; the measured curve is what NCCL chose there).
  Across nodes all-reduce, all-gather and reduce-scatter run what NCCL's tuner selects (``pricing.nccl``: ring or
  tree, NVLS-tree, PAT × LL, LL128, Simple, by size, ranks and the stack's NCCL era): its latency, and the rate
  above capped by that pair's bus bandwidth (LL's ≈ 20 GB/s, LL128's and the tree's per-channel caps) × its
  algorithm-bandwidth ratio; the cheapest pair so priced. Send/recv and all-to-all: the Simple ring's
  8.4 + NVLink steps·3.4 + network steps·14.

Overrides (``ClusterSpec``): ``intra_node_bandwidth_GBps`` / ``inter_node_bandwidth_GBps`` are the nominal
per-GPU, one-direction link rates as a datasheet states them (the GPU's NVLink and NIC figures by default);
the measured efficiency curve and the NIC's achieved fraction apply to them. ``intra_node_latency_us`` /
``inter_node_latency_us`` replace NCCL's per-step hardware latency of NVLink and of the network.

A measured ``NetworkProfile`` (``meshplan profile cluster``) replaces this model per collective and link
class: its α-β fit at group size g gives the per-step latency and the link bandwidth through the ring
factors, re-applied at the group size needed. Every constant's source is in docs/planner.md.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

from planner.pricing import nccl
from planner.specs import ClusterSpec, GpuSpec, NetworkProfile

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

#: NCCL's ring latency, µs (NVIDIA/nccl ``src/graph/tuning.cc``): base and per-step hardware latency (``pricing.nccl``).
NCCL_BASE_US = {"ring_ll128": 14.0, "ring_simple": 8.4}
NCCL_NVLINK_STEP_US = {"ring_ll128": 1.9, "ring_simple": 3.4}
NCCL_NET_STEP_US = {"ring_simple": 14.0}

#: Defaults of the per-step latencies a ``ClusterSpec`` may override (``*_latency_us``).
DEFAULT_INTRA_LATENCY_S = NCCL_NVLINK_STEP_US["ring_ll128"] * 1e-6
DEFAULT_INTER_LATENCY_S = NCCL_NET_STEP_US["ring_simple"] * 1e-6

#: 8-GPU all-reduce bus bandwidth by buffer size, (bytes, GB/s), one node. Source: stas00/ml-engineering
#: ``network/README.md`` "Real network throughput" (A100: nccl-tests ``all_reduce_perf -b 32k -e 16G -f 2 -g 8``;
#: H200: ``all_reduce_bench.py``, NVLS on) and "Inter-node speed depends on intra-node speed" (B200, 1 node).
_SIZES = tuple(32 * KiB << i for i in range(20))  # 32 KiB … 16 GiB
ALLREDUCE_8: dict[str, tuple[float, tuple[tuple[int, float], ...]]] = {
    # family: (the table's link rate, GB/s per GPU one direction; table)
    "a100": (
        300.0,
        tuple(
            zip(
                _SIZES,
                (1.31, 2.45, 4.43, 7.47, 11.41, 18.00, 36.18, 72.33, 109.93, 106.16)
                + (138.49, 171.54, 176.92, 194.07, 222.72, 229.04, 231.41, 233.88, 234.61, 234.89),
            )
        ),
    ),
    "h200": (
        450.0,
        tuple(
            zip(
                _SIZES,
                (1.44, 2.93, 5.73, 11.74, 23.94, 39.93, 64.53, 107.16, 155.53, 219.89)
                + (275.84, 346.51, 401.93, 436.15, 450.29, 463.58, 469.17, 473.10, 477.45, 482.26),
            )
        ),
    ),
    "b200": (
        900.0,
        tuple(
            zip(
                _SIZES,
                (1.20, 2.17, 4.86, 9.54, 18.71, 36.06, 63.09, 76.48, 126.49, 254.96)
                + (325.97, 400.60, 568.38, 646.11, 688.99, 723.34, 734.97, 740.64, 839.07, 845.67),
            )
        ),
    ),
}
#: Which table a GPU family uses (H100 has H200's NVLink4 and NVSwitch; V100 and unknown GPUs: A100's ring).
TABLE_OF = {"a100": "a100", "h100": "h200", "h200": "h200", "b200": "b200", "v100": "a100"}
#: NVLink SHARP all-reduce gain over the ring by GPUs in the group, 8 GiB (same README, "SHARP": 8×H200
#: nccl-tests with ``NCCL_NVLS_ENABLE`` on/off; 8×B200): none at ≤ 4 (H200) / ≤ 5 (B200) GPUs.
NVLS_GAIN: dict[str, dict[int, float]] = {
    "h200": {5: 1.14, 6: 1.19, 7: 1.26, 8: 1.29},
    "b200": {6: 1.15, 7: 1.19, 8: 1.23},
}
#: Achieved per-port ceilings of InfiniBand NICs, GB/s, by nominal rate (NCCL maintainers: HDR 200 Gb/s
#: ≈ 24 GB/s, NVIDIA/nccl#412; NDR 400 Gb/s ≈ 46–48 GB/s, NVIDIA/nccl-tests#290). Other rates: the NDR fraction.
NIC_CEILING_GBps = {25.0: 24.0, 50.0: 47.0}
NIC_FRACTION = 47.0 / 50.0

_BUS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "reduce": lambda n: 1.0,  # nccl-tests doc/PERFORMANCE.md: reduce busbw = algbw
    "send_recv": lambda n: 1.0,
    # nccl-tests doc/PERFORMANCE.md: alltoall busbw = algbw·(n−1)/n (each rank keeps 1/n of its buffer)
    "all_to_all": lambda n: (n - 1) / n,
}
_STEPS = {
    "all_reduce": lambda n: 2 * (n - 1),
    "all_gather": lambda n: n - 1,
    "reduce_scatter": lambda n: n - 1,
    "reduce": lambda n: n,  # NCCL's tuner: nRanks steps (pricing.nccl.TUNED)
    "send_recv": lambda n: 1,
    "all_to_all": lambda n: n - 1,
}


def family(gpu_id: str) -> str:
    return gpu_id.lower()[:4]


def nic_ceiling_GBps(nominal_GBps: float) -> float:
    """The achieved rate of one NIC port of ``nominal_GBps`` (its datasheet rate per GPU, one direction)."""
    return NIC_CEILING_GBps.get(nominal_GBps, NIC_FRACTION * nominal_GBps)


def ring_latency_8() -> float:
    """Seconds of NCCL's LL128 ring latency for the tables' 8-GPU all-reduce (14 steps)."""
    return (NCCL_BASE_US["ring_ll128"] + 14 * NCCL_NVLINK_STEP_US["ring_ll128"]) * 1e-6


@dataclass(frozen=True)
class BusTable:
    """One measured 8-GPU all-reduce table as *bandwidth time*: ``w(S)`` = the measured time minus NCCL's
    latency of that all-reduce (at least the bytes at the table's best rate), monotone in S; ``S·1.75 / w(S)``
    is the bus bandwidth of the link's bytes alone. Log-log interpolation between the points; above the
    last, its rate; below the first, its time."""

    link_GBps: float
    points: tuple[tuple[int, float], ...]

    @cached_property
    def _curve(self) -> tuple[list[float], list[float]]:
        bus8, lat8 = 2 * 7 / 8, ring_latency_8()
        peak = max(b for _, b in self.points) * 1e9
        xs, ws, best = [], [], 0.0
        for size, busbw in self.points:
            t = size * bus8 / (busbw * 1e9)
            best = max(best, t - lat8, size * bus8 / peak)  # a larger buffer never takes less time
            xs.append(math.log(size))
            ws.append(math.log(best))
        return xs, ws

    @cached_property
    def asymptote_Bps(self) -> float:
        """Bus bandwidth of the largest buffer (bytes only)."""
        size = self.points[-1][0]
        return size * 2 * 7 / 8 / math.exp(self._curve[1][-1])

    def bus_rate_Bps(self, size: float) -> float:
        """Bus bandwidth (bytes per second) of the link's bytes alone at buffer ``size``."""
        xs, ws = self._curve
        x = math.log(max(size, 1.0))
        if x >= xs[-1]:
            return self.asymptote_Bps
        if x <= xs[0]:  # below the table: the first point's rate (the time left is NCCL's latency)
            return math.exp(xs[0]) * 2 * 7 / 8 / math.exp(ws[0])
        i = bisect.bisect_right(xs, x)
        f = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
        w = math.exp(ws[i - 1] + f * (ws[i] - ws[i - 1]))
        return size * 2 * 7 / 8 / w


TABLES = {fam: BusTable(link, points) for fam, (link, points) in ALLREDUCE_8.items()}


@lru_cache(maxsize=256)
def nvls_gain(fam: str, n: int) -> float:
    """NVLink SHARP's all-reduce gain over the ring for ``n`` GPUs of one node (1 where it does not apply)."""
    gains = NVLS_GAIN.get(fam, {})
    return gains[min(n, max(gains))] if gains and n >= min(gains) else 1.0


#: Nodes of one scalable unit when the cluster does not say: the DGX SuperPOD H100 reference architecture's SU of
#: 32 DGX (rail-aligned: "always one hop away from the other 31 nodes in a SU"; Table 4: leaf–spine cabling 1:1,
#: no oversubscription), also the B200 RA's (docs.nvidia.com/dgx-superpod/reference-architecture-scalable-
#: infrastructure-h100/, "Network Fabrics").
DEFAULT_SU_NODES = 32


@dataclass(frozen=True)
class Link:
    """One link class: its per-step hardware latency (s) and nominal rate per GPU, one direction (B/s)."""

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
    #: the measured table family (``TABLE_OF``) of the GPU
    table: str = "a100"
    #: the fabric above a scalable unit (``ClusterSpec.oversubscription``, ``scalable_unit_nodes``)
    oversubscription: float = 1.0
    su_nodes: int = DEFAULT_SU_NODES
    #: the NCCL version era that selects algorithm and protocol across nodes (``Stack.nccl``; ``pricing.nccl``)
    nccl_era: nccl.Era = "2.23"
    #: NCCL's GPU generation (``nccl.GEN_OF``)
    gen: nccl.Gen = "ampere"
    #: times already computed, by (collective, size, n, link, per_node)
    _memo: dict[tuple[str, float, int, str, int], float] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def for_cluster(
        cls,
        cluster: ClusterSpec,
        gpu: GpuSpec,
        network: NetworkProfile | None = None,
        scale: float = 1.0,
        nccl_era: nccl.Era = "2.23",
    ) -> CommModel:
        intra_bw = cluster.intra_node_bandwidth_GBps or gpu.nvlink_bandwidth_GBps
        inter_bw = cluster.inter_node_bandwidth_GBps or gpu.nic_bandwidth_GBps
        us_intra, us_inter = cluster.intra_node_latency_us, cluster.inter_node_latency_us
        intra_lat = DEFAULT_INTRA_LATENCY_S if us_intra is None else us_intra * 1e-6
        inter_lat = DEFAULT_INTER_LATENCY_S if us_inter is None else us_inter * 1e-6
        return cls(
            Link(intra_lat, intra_bw * 1e9),
            Link(inter_lat, inter_bw * 1e9),
            cluster.gpus_per_node,
            network,
            scale,
            TABLE_OF.get(family(gpu.id), "a100"),
            cluster.oversubscription or 1.0,
            cluster.scalable_unit_nodes or DEFAULT_SU_NODES,
            nccl_era,
            nccl.GEN_OF.get(family(gpu.id), "ampere"),
        )

    def link_class(self, ranks: list[int]) -> str:
        nodes = {r // self.gpus_per_node for r in ranks}
        return "intra_node" if len(nodes) == 1 else "inter_node"

    # --- the pieces (seconds; B/s)

    @property
    def _scale(self) -> float:
        """This link's rate over the rate of the table it uses."""
        return self.intra.bandwidth_Bps / (TABLES[self.table].link_GBps * 1e9)

    def ring_rate(self, size: float) -> float:
        """Bus bandwidth of a ring collective (no NVLS) inside a node at buffer ``size``, bytes only."""
        t = TABLES[self.table]
        return t.bus_rate_Bps(size) * self._scale / nvls_gain(self.table, 8)

    def ring_asymptote(self) -> float:
        """Bus bandwidth of a large ring collective inside a node (B/s)."""
        return TABLES[self.table].asymptote_Bps * self._scale / nvls_gain(self.table, 8)

    def nic_Bps(self, nodes: int = 1) -> float:
        """Achieved rate of one GPU's NIC (its share of the node's ports) for a group spanning ``nodes`` nodes:
        ÷ the fabric's oversubscription when the group leaves one scalable unit (its traffic crosses the spine)."""
        rate = nic_ceiling_GBps(self.inter.bandwidth_Bps / 1e9) * 1e9
        return rate / self.oversubscription if nodes > self.su_nodes else rate

    def _nvlink_steps_s(self, proto: str) -> float:
        """Per-step NVLink latency of an NCCL protocol, scaled when the cluster overrides it."""
        return self.intra.latency_s * NCCL_NVLINK_STEP_US[proto] / NCCL_NVLINK_STEP_US["ring_ll128"]

    def latency(self, collective: str, n: int, per_node: int = 1, inter: bool = False) -> float:
        """NCCL's latency of one collective: ring (LL128 inside a node; Simple across nodes)."""
        steps = _STEPS[collective](n)
        if not inter:
            return NCCL_BASE_US["ring_ll128"] * 1e-6 + steps * self._nvlink_steps_s("ring_ll128")
        nodes = max(1, n // per_node)
        net_steps = min(steps, 2 * (nodes - 1) if collective == "all_reduce" else nodes - 1)
        if collective == "send_recv":
            net_steps = 1
        return (
            NCCL_BASE_US["ring_simple"] * 1e-6
            + (steps - net_steps) * self._nvlink_steps_s("ring_simple")
            + net_steps * self.inter.latency_s
        )

    def topo(self, n: int, per_node: int) -> nccl.Topo:
        """What NCCL's tuner sees of a group of ``n`` ranks across nodes, ``per_node`` on each (``nccl.link_topo``)."""
        nic, lat = nic_ceiling_GBps(self.inter.bandwidth_Bps / 1e9), (self.intra.latency_s, self.inter.latency_s)
        return nccl.link_topo(n, per_node, nic, self.gen, self.gpus_per_node, *lat)

    def model_time(self, collective: str, size_bytes: float, n: int, link: str, per_node: int = 1) -> float:
        """Seconds by the model (no measured profile): latency + bus bytes ÷ achieved bus bandwidth."""
        bus = _BUS[collective](n) * size_bytes
        if link == "intra_node":
            rate = self.ring_rate(size_bytes)
            if collective == "all_reduce":
                rate *= nvls_gain(self.table, n)
            return self.latency(collective, n) + bus / rate
        m = max(1, min(per_node, n))
        ring = self.ring_rate(size_bytes)
        if collective in ("send_recv", "all_to_all"):  # one pair, one NIC; an all-to-all's share, its own NIC
            m = 1
        # The node's m NICs carry its share, the NVLink ring the rest: the slower bounds the rate, and the
        # ring curve's size efficiency applies to both (one pipeline of chunks).
        cap = m * self.nic_Bps(-(-n // m))
        rate = ring * min(1.0, cap / self.ring_asymptote())
        if collective not in nccl.TUNED:
            return self.latency(collective, n, m, inter=True) + bus / rate
        # NCCL's pairs at their latency, the measured rate capped by the pair's bus bandwidth (docs/planner.md, "NCCL")
        return min(
            lat * (f if size_bytes >= start else 1.0) + size_bytes / (min(rate, cap) * ratio)
            for lat, f, start, cap, ratio in nccl.terms(collective, self.topo(n, m), self.nccl_era)
        )

    def time(self, collective: str, size_bytes: float, n: int, link: str, per_node: int = 1) -> float:
        """Seconds for one collective of ``size_bytes`` (per rank, unsharded) over ``n`` ranks; across nodes
        (``link`` = ``inter_node``) the group has ``per_node`` ranks on each node: the model's
        (``unscaled_time``) × ``scale`` (the ``comm_scale`` residual; 1.0 leaves it as is)."""
        return self.scale * self.unscaled_time(collective, size_bytes, n, link, per_node)

    def unscaled_time(self, collective: str, size_bytes: float, n: int, link: str, per_node: int = 1) -> float:
        """Seconds for one collective by the model (or the measured network fit), before residuals."""
        if n <= 1 or size_bytes <= 0:
            return 0.0
        key = (collective, size_bytes, n, link, per_node)
        t = self._memo.get(key)
        if t is None:
            t = self._memo[key] = self._time(collective, size_bytes, n, link, per_node)
        return t

    def _time(self, collective: str, size_bytes: float, n: int, link: str, per_node: int) -> float:
        fit = self.network.fit(link, collective) if self.network is not None else None
        if fit is not None:
            g = fit.group_size
            # Per-step latency and link bandwidth implied by the fit at its own group size.
            alpha = fit.alpha_s / _STEPS[collective](g)
            seconds_per_byte = fit.beta_s_per_byte / _BUS[collective](g)
            return _STEPS[collective](n) * alpha + _BUS[collective](n) * size_bytes * seconds_per_byte
        return self.model_time(collective, size_bytes, n, link, per_node)


# ---------------------------------------------------------------------------------------------
# Where a plan's groups sit (the mesh layout of ``planner.specs.layout``: dims (pp, dp, tp), TP innermost;
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


@lru_cache(maxsize=65536)
def dp_ranks_per_node(gpus_per_node: int, dp: int, tp: int) -> int:
    """Ranks of one DP group (stride tp, ``dp`` consecutive strides) on the node that holds fewest of them,
    the one whose NICs bound the group: gcd(dp, g/tp) when tp divides the node (g/tp when dp is a multiple
    of it), else 1 (TP fills or spans nodes)."""
    g = gpus_per_node
    if tp <= g and g % tp == 0:
        return math.gcd(dp, g // tp)
    return 1


def tp_link(gpus_per_node: int, tp: int) -> str:
    """The link class of a TP group (TP innermost: inside a node iff tp divides the node)."""
    return "intra_node" if (tp <= gpus_per_node and gpus_per_node % tp == 0) else "inter_node"
