"""NCCL's own choice of algorithm and protocol for a collective, as its tuner computes it, by NCCL version.

NCCL prices every enabled (algorithm, protocol) pair of a collective with ``time = lat·latCount + nBytes/algBw``
and runs the cheapest (``ncclTopoTuneModel`` fills the latency and bandwidth tables once per communicator;
``ncclTopoGetAlgoTime`` prices one call; ``topoGetAlgoInfo`` / ``updateCollCostTable`` take the minimum).
``nBytes`` is the full buffer (an all-gather's ``sendcount·n``; ``ncclFuncMaxSendRecvCount``), one call
(``numPipeOps`` = 1, ``latCount`` = 1). Two eras, each transcribed from ``src/graph/tuning.cc`` at its tag:

* ``"2.10"`` — NVIDIA/nccl v2.10.3-1 (2021-07; the 2020–2021 Megatron-LM, MT-NLG and DeepSpeed runs ran
  NCCL 2.7–2.10, whose tuner constants differ little): tree and ring for all-reduce, ring for everything else;
  tree Simple at 28 µs a step; ring Simple 9.6 µs a network step; LL's NVLink steps × 1.8 across nodes; LL128
  at 0.7 of the bus with one rank per node; the ring all-reduce "plateau" × 1.9 from ``n/16·64 KiB``; A100
  bus bandwidth ≤ 235 GB/s; LL128 enabled on Volta and Ampere only.
* ``"2.23"`` — NVIDIA/nccl v2.23.4-1 (2024-09; ring/tree constants unchanged to v2.30.4-1; PAT 0.75 from v2.24.3-1,
  NVLS × 0.85 on Hopper from v2.28.3-1, NVLS-tree network step 20.9 at v2.30.4-1 are not taken): higher LL/LL128
  bases, tree Simple at 4.0 (NVLink) / 14 (network) µs, ring Simple 14 µs a network step; a network ring step's
  NVLink part at least the host's net overhead (Intel 1 µs, AMD 2 µs, × 3 for Simple); with one rank per node
  the tree's network step; the plateau × 1.4 on sm80+ from ``nBytes/(C·n) ≥ 64``; PAT for all-gather and
  reduce-scatter when every node holds one rank; NVLS (one node) and NVLS-tree (≥ 2 nodes) all-reduce on
  NVSwitch Hopper/Blackwell; per-generation LL128 and tree per-channel caps; LL128 off on Blackwell.

Not modelled: CollNet/SHARP (a plugin), NVLS all-gather/reduce-scatter, the channel and thread counts NCCL
drops to for small messages (``calcCollChunking``; the measured curves carry size effects), tuner plugins and
``NCCL_ALGO``/``NCCL_PROTO`` overrides, a net plugin's own latency (0 for InfiniBand). docs/planner.md,
"NCCL's selection", says how the cost model combines this choice with the measured bandwidth curves.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

Era = Literal["2.10", "2.23"]
ERAS: tuple[Era, ...] = ("2.10", "2.23")
Gen = Literal["volta", "ampere", "hopper", "blackwell"]
PROTOS = ("LL", "LL128", "Simple")
#: NCCL's GPU generation (compute capability 7.0 / 8.0 / 9.0 / 10.0) of a GPU family
GEN_OF: dict[str, Gen] = {"v100": "volta", "a100": "ampere", "h100": "hopper", "h200": "hopper", "b200": "blackwell"}
#: The host CPU vendor NCCL reads (``ncclTopoCpuType``: LL's bandwidth across nodes, the net overhead) by GPU generation:
#: the DGX of that generation — DGX-2 and DGX H100/B200 dual Intel Xeon (8168, 8480C, 8570), DGX A100 dual AMD EPYC 7742.
CPU_OF: dict[str, Literal["intel", "amd"]] = {
    "volta": "intel",
    "ampere": "amd",
    "hopper": "intel",
    "blackwell": "intel",
}
#: The collectives NCCL's tuner prices (send/recv and all-to-all are point-to-point in NCCL: no selection). A reduce
#: (ncclReduce: DeepSpeed v0.5.0's ZeRO-2) runs a ring only, nRanks steps, algBw = busBw (tuning.cc:112-137 at
#: v2.10.3-1, 165-227 at v2.23.4-1); its latency is one hop's per step (``_reduce_lat``).
TUNED = ("all_reduce", "all_gather", "reduce_scatter", "reduce")

# ---- v2.10.3-1 src/graph/tuning.cc: baseLat, hwLat[NVLINK/NET][Tree/Ring][LL/LL128/Simple], caps
_BASE_10 = {"tree": (4.4, 4.4, 0.0), "ring": (3.6, 10.0, 8.4)}
_NVL_10 = {"tree": (0.52, 1.25, 28.0), "ring": (0.47, 1.9, 3.4)}
_NET_10 = {"tree": (5.0, 8.5, 28.0), "ring": (2.7, 4.0, 9.6)}
#: llMaxBws[Volta-N1/Intel-N2/Intel-N4 ; Ampere-N1/AMD-N2/AMD-N4]
_LLMAX_10 = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0))
_TREE_CH_10 = {"volta": (26.5, 18.5, 10.0), "ampere": (24.0, 23.6, 17.8)}
_LL128_CH_10 = 20.0

# ---- v2.23.4-1 src/graph/tuning.cc
_BASE_23 = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "nvls": (0.0, 0.0, 0.0), "nvls_tree": (0.0, 0.0, 0.0)}
_NVL_23 = {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "nvls": (0.0, 0.0, 25.0), "nvls_tree": (0.0, 0.0, 25.0)}
_NET_23 = {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0), "nvls": (0.0, 0.0, 18.0), "nvls_tree": (0.0, 0.0, 14.0)}
#: llMaxBws[Volta-N1/Intel-N2/Intel-N4 ; Ampere-N1/AMD-N2/AMD-N4 ; Hopper-N1/AMD-N2/AMD-N4]
_LLMAX_23 = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0))
_RING_LL128_CH_23 = {"volta": (20.0,) * 3, "ampere": (20.0,) * 3, "hopper": (36.7,) * 3}
_TREE_LL128_CH_23 = {"volta": (20.0,) * 3, "ampere": (20.0,) * 3, "hopper": (36.7, 36.7, 29.0)}
_TREE_CH_23 = {"volta": (26.5, 18.5, 10.0), "ampere": (24.0, 23.6, 17.8), "hopper": (38.7, 41.4, 36.0)}
#: getNetOverhead: x86 Intel 1 µs, AMD 2 µs (× 3 for Simple)
_NET_OVERHEAD = {"intel": 1.0, "amd": 2.0}
#: PAT busBw factor at v2.23.4-1 (0.75 from v2.24.3-1)
PAT_BW = 0.85

#: treeCorrectionFactor[LL/LL128/Simple][log2(nBytes/64)], 64 B … 256 MB (identical at both tags)
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 1.0, 1.0),
    (0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8, 0.9, 0.9),
)


def log2i(x: int) -> int:
    """NCCL's ``log2i``: floor(log2 x), −1 for x ≤ 0."""
    return int(x).bit_length() - 1


@dataclass(frozen=True, slots=True)
class Topo:
    """What NCCL's tuner reads of a communicator: ranks, nodes, its ring/tree graph's channels and per-channel
    bandwidth inside and across nodes (GB/s), the GPU generation, whether NVLS runs (NVSwitch, Hopper+), the
    host CPU, and multipliers of the per-step hardware latencies (a cluster's own latency overrides)."""

    n: int
    ppn: int
    channels: int
    bw_intra: float
    bw_inter: float
    gen: Gen = "ampere"
    nvls: bool = False
    cpu: Literal["intel", "amd"] = "intel"
    intra_lat_scale: float = 1.0
    inter_lat_scale: float = 1.0

    @property
    def nodes(self) -> int:
        return max(1, self.n // max(1, self.ppn))


@dataclass(frozen=True, slots=True)
class Pair:
    """One enabled (algorithm, protocol) of a collective as ``ncclTopoTuneModel`` tabulates it: latency (µs),
    bus bandwidth after the protocol's caps and the algorithm bandwidth NCCL divides the bytes by (GB/s)."""

    algo: str
    proto: str
    lat_us: float
    bus_bw: float
    alg_bw: float


@dataclass(frozen=True, slots=True)
class Choice:
    """NCCL's choice for one call: the pair, its latency as ``ncclTopoGetAlgoTime`` charges it (plateau
    included), the algorithm bandwidth it divides by (tree size correction included), and the time (µs)."""

    pair: Pair
    lat_us: float
    alg_bw: float
    time_us: float

    @property
    def algo(self) -> str:
        return self.pair.algo

    @property
    def proto(self) -> str:
        return self.pair.proto


@lru_cache(maxsize=4096)
def link_topo(n: int, ppn: int, nic_GBps: float, gen: Gen, gpus_per_node: int, intra_s: float, inter_s: float) -> Topo:
    """A group of ``n`` ranks, ``ppn`` per node, across nodes: NCCL's rings run one channel per NIC in use, each at the
    NIC's rate (``nic_GBps``; ``search.cc`` "NET n -> GPU a -> … -> NET n"), channels doubled at half the rate
    when it is ≥ 25 GB/s except on Hopper+ below 50 GB/s with more than 4 (``ncclTopoDupChannels``); NVLS where
    Hopper/Blackwell GPUs share an NVSwitch (≥ 4 per node). ``intra_s`` / ``inter_s``: the cluster's per-step NVLink
    and network latency (s), scaling NCCL's hardware latencies by their ratio to the defaults (1.9 µs, 14 µs); the
    hosts' CPU vendor that of the generation's DGX (``CPU_OF``)."""
    c, bw = max(1, ppn), nic_GBps
    if bw >= 25.0 and not (gen in ("hopper", "blackwell") and bw < 50.0 and c > 4):
        c, bw = 2 * c, bw / 2
    nvls = gen in ("hopper", "blackwell") and gpus_per_node >= 4
    return Topo(n, ppn, c, bw, bw, gen, nvls, CPU_OF[gen], intra_s / 1.9e-6, inter_s / 14e-6)


def _nsteps(coll: str, n: int) -> int:
    return 2 * (n - 1) if coll == "all_reduce" else n if coll == "reduce" else n - 1


def _reduce_lat(base: float, net: dict, nvl: dict, proto: int, t: Topo) -> float:
    """A ring reduce's latency, µs, as both eras' tuners price it (tuning.cc:143-151 at v2.10.3-1, 242-249 at
    v2.23.4-1): the base + nRanks × one hop's latency (the network's across nodes, NVLink's inside one) — Simple at
    the tree's hop latency ("Add some chunk latency") — the rings' ``sameChannels == 0`` branch: the search keeps
    identical channels only when they reach the system's width (search.cc:780-793), which one NIC's channels do not
    on a multi-NIC node; a single-hop latency where they are identical is not priced."""
    hop = (net if t.nodes > 1 else nvl)["tree" if PROTOS[proto] == "Simple" else "ring"][proto]
    return base + t.n * hop * (t.inter_lat_scale if t.nodes > 1 else t.intra_lat_scale)


def _ninter(coll: str, k: int) -> int:
    return 0 if k == 1 else (2 * (k - 1) if coll == "all_reduce" else k - 1)


def _pairs_210(coll: str, t: Topo) -> list[Pair]:
    n, k, c, ppn = t.n, t.nodes, t.channels, t.n / t.nodes
    a80 = t.gen == "ampere"
    i2 = min(k, 3) - 1
    llmax = _LLMAX_10[int(a80) if k == 1 else int(t.cpu == "amd")][i2]
    tree_ch = _TREE_CH_10["ampere" if a80 else "volta"][i2]
    ll128_on = t.gen in ("volta", "ampere")
    nsteps, ninter = _nsteps(coll, n), _ninter(coll, k)
    out = []
    for algo in ("tree", "ring") if coll == "all_reduce" else ("ring",):
        for p, proto in enumerate(PROTOS):
            if proto == "LL128" and not ll128_on:
                continue
            bus = c * (t.bw_intra if k <= 2 else t.bw_inter)
            if a80:
                bus = min(bus, 235.0)
            if algo == "ring" and proto == "LL":
                bus = min(llmax, bus / 4 if (k > 1 or coll in ("all_reduce", "reduce")) else bus / 3)
            if algo == "ring" and proto == "LL128":
                bus = min(bus * (0.7 if ppn < 2 else 0.92), _LL128_CH_10 * c)
            if algo == "tree":
                bus = min(bus * 0.92, c * tree_ch)
                if proto == "LL":
                    bus = min(bus / 3.8, llmax)
                if proto == "LL128":
                    bus = min(bus * (7 / 9 if k == 1 else 120 / 128), _LL128_CH_10 * c)
            ratio = n / nsteps if algo == "ring" else 0.5
            intra = _NVL_10[algo][p] * t.intra_lat_scale
            inter = _NET_10[algo][p] * t.inter_lat_scale
            if k > 1 and proto == "LL":
                intra *= 1.8
            lat = _BASE_10[algo][p]
            if coll == "reduce":
                lat = _reduce_lat(lat, _NET_10, _NVL_10, p, t)
            elif algo == "ring":
                lat += (nsteps - ninter) * intra + ninter * inter
            else:
                lat += 2 * ((n // k - 1) * intra + log2i(k) * inter)
            out.append(Pair(algo, proto, lat, bus, bus * ratio))
    return out


def _pairs_223(coll: str, t: Topo) -> list[Pair]:
    n, k, c, ppn = t.n, t.nodes, t.channels, t.n / t.nodes
    gen = "hopper" if t.gen == "blackwell" else t.gen  # v2.23.4-1 has no Blackwell row: compCap ≥ 90 → Hopper
    gi = ("volta", "ampere", "hopper").index(gen)
    i2 = min(k, 3) - 1
    llmax = _LLMAX_23[gi if k == 1 else int(t.cpu == "amd")][i2]
    ll128_on = t.gen != "blackwell"  # pEnable: compCap 70/80/90 only
    nsteps, ninter = _nsteps(coll, n), _ninter(coll, k)
    algos = ["tree", "ring"] if coll == "all_reduce" else ["ring"]
    if coll == "all_reduce":
        if t.nvls and t.ppn > 1:
            algos.append("nvls" if k == 1 else "nvls_tree")  # NVLS across nodes needs CollNet; NVLS-tree ≥ 2 nodes
    elif k == n and k > 1 and coll != "reduce":
        algos.append("pat")  # ncclPatEnable: nNodes == nRanks
    out = []
    for algo in algos:
        for p, proto in enumerate(PROTOS):
            if algo in ("nvls", "nvls_tree", "pat") and proto != "Simple":
                continue
            if proto == "LL128" and not ll128_on:
                continue
            bw = t.bw_intra if k <= 2 else t.bw_inter
            if algo == "nvls":
                bw = min(t.bw_intra, t.bw_inter)
            if algo == "nvls_tree":
                bw = min(t.bw_intra, t.bw_inter if k <= 2 else t.bw_inter / 2)
            bus = c * bw
            if algo == "ring" and proto == "LL":
                bus = min(llmax, bus * 0.5)
            if algo == "ring" and proto == "LL128":
                bus = min(bus * 0.92, c * _RING_LL128_CH_23[gen][i2])
            if algo == "tree":
                bus = min(bus * 0.92, c * _TREE_CH_23[gen][i2])
                if proto == "LL":
                    bus = min(bus / 3.8, llmax)
                if proto == "LL128":
                    bus = min(bus * (7 / 9 if k == 1 else 120 / 128), c * _TREE_LL128_CH_23[gen][i2])
            if algo == "pat":
                bus *= PAT_BW
            if algo == "ring":
                ratio = n / nsteps
            elif algo == "pat":
                ratio = 1.0  # not converted: AG/RS on a non-ring algorithm
            else:
                ratio = 5 / 6 if algo in ("nvls", "nvls_tree") else 0.5
            intra = _NVL_23.get(algo, _NVL_23["ring"])[p] * t.intra_lat_scale
            net = _NET_23["tree"] if (ppn == 1 or algo == "pat") else _NET_23[algo]
            inter = net[p] * t.inter_lat_scale
            lat = _BASE_23.get(algo, (0.0, 0.0, 0.0))[p]
            if coll == "reduce":
                lat = _reduce_lat(lat, _NET_23, _NVL_23, p, t)
            elif algo == "ring":
                if k > 1:
                    intra = max(intra, _NET_OVERHEAD[t.cpu] * (3 if proto == "Simple" else 1))
                lat += (nsteps - ninter) * intra + ninter * inter
            elif algo == "tree":
                lat += 2 * ((n // k - 1) * intra + log2i(k) * inter)
            elif algo == "nvls":
                lat = intra
            elif algo == "nvls_tree":
                lat += intra + 2 * log2i(k) * inter
            else:  # pat
                lat = 8 + log2i(k) * (inter / 3.5) + n * 2.8
            out.append(Pair(algo, proto, lat, bus, bus * ratio))
    return out


@lru_cache(maxsize=4096)
def pairs(coll: str, t: Topo, era: Era) -> tuple[Pair, ...]:
    """Every (algorithm, protocol) NCCL enables for ``coll`` on ``t`` at ``era``, as its tuner tabulates them."""
    if coll not in TUNED:
        raise ValueError(f"NCCL's tuner prices {', '.join(TUNED)}; got collective {coll!r}")
    if era not in ERAS:
        raise ValueError(f"unknown NCCL era {era!r}: one of {', '.join(ERAS)}")
    if t.n < 2:
        return ()
    return tuple(_pairs_210(coll, t) if era == "2.10" else _pairs_223(coll, t))


def price(coll: str, pair: Pair, nbytes: float, t: Topo, era: Era) -> Choice:
    """``ncclTopoGetAlgoTime`` of one pair for one call of ``nbytes`` (the full buffer)."""
    bw, lat = pair.alg_bw, pair.lat_us
    log_size = log2i(int(nbytes) >> 6)
    if pair.algo == "tree" and 0 <= log_size < 23:
        bw *= TREE_CORRECTION[PROTOS.index(pair.proto)][log_size]
    if pair.algo == "ring" and pair.proto == "Simple" and t.nodes > 1 and coll == "all_reduce":
        if era == "2.10" and nbytes >= t.n / 16 * 65536:
            lat *= 1.9  # "Plateau effect of ring"
        elif era == "2.23" and nbytes / (t.channels * t.n) >= 64:
            lat *= 1.9 if t.gen == "volta" else 1.4
    return Choice(pair, lat, bw, lat + nbytes / (1000 * bw))


@lru_cache(maxsize=4096)
def terms(coll: str, t: Topo, era: Era) -> tuple[tuple[float, float, float, float, float], ...]:
    """``pairs`` as the cost model's hot path reads them: (latency s, plateau factor, bytes from which it applies, bus
    bandwidth B/s, algBw/busBw) per pair — ``price``'s latency without building a ``Choice``."""
    out = []
    for p in pairs(coll, t, era):
        factor, start = 1.0, float("inf")
        if p.algo == "ring" and p.proto == "Simple" and t.nodes > 1 and coll == "all_reduce":
            factor = 1.9 if era == "2.10" or t.gen == "volta" else 1.4
            start = t.n / 16 * 65536 if era == "2.10" else 64.0 * t.channels * t.n
        out.append((p.lat_us * 1e-6, factor, start, p.bus_bw * 1e9, p.alg_bw / p.bus_bw))
    return tuple(out)


def select(coll: str, nbytes: float, t: Topo, era: Era = "2.23") -> Choice | None:
    """NCCL's choice for one ``coll`` of ``nbytes`` on ``t`` at ``era``: the cheapest enabled pair by NCCL's
    own model (the first in NCCL's order — tree, ring, NVLS, NVLS-tree, PAT; LL, LL128, Simple — on a tie).
    None for a single rank."""
    best: Choice | None = None
    for pair in pairs(coll, t, era):
        ch = price(coll, pair, nbytes, t, era)
        if best is None or ch.time_us < best.time_us:
            best = ch
    return best
