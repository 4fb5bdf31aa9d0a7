"""NCCL's choice of algorithm × protocol (``planner.pricing.nccl``) against numbers computed by hand from
``src/graph/tuning.cc`` at v2.10.3-1 and v2.23.4-1, the computed table of ../shared/notes/scale-physics.md §1
case by case, the sizes where NCCL's formula switches algorithm or protocol, and the cost model's use of the
choice across nodes (``CommModel.model_time``) by NCCL era (``Stack.nccl``)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from planner.pricing import nccl
from planner.pricing.comm import CommModel
from planner.pricing.nccl import Topo, pairs, select
from planner.specs import ClusterSpec, PlanRequest
from planner.specs.catalog import get_gpu
from planner.specs.stacks import resolve

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def lat(coll: str, n: int, ppn: int, era: nccl.Era, algo: str, proto: str, **kw: object) -> float:
    """The latency (µs) NCCL's tuner tabulates for one pair (HDR-like rings: one channel per NIC at 24 GB/s)."""
    t = Topo(n=n, ppn=ppn, channels=max(1, ppn), bw_intra=24.0, bw_inter=24.0, **kw)  # type: ignore[arg-type]
    found = [p for p in pairs(coll, t, era) if (p.algo, p.proto) == (algo, proto)]
    assert len(found) == 1, (algo, proto, [(p.algo, p.proto) for p in pairs(coll, t, era)])
    return found[0].lat_us


# scale-physics.md §1 "Computed from the formulas above" (µs, 8 GPUs/node unless ppn = 1), each row
# re-derived here by hand: base + (nsteps − nInter)·intraLat + nInter·interLat (ring);
# base + 2·((m−1)·intraLat + ⌊log2 k⌋·interLat) (tree); 8 + ⌊log2 k⌋·interLat/3.5 + 2.8·n (PAT).
NOTES_TABLE = [
    # AG/RS, n = 256, k = 32: 224 NVLink steps, 31 network steps
    ("all_gather", 256, 8, "2.10", "ring", "LL", {}, 3.6 + 224 * 0.47 * 1.8 + 31 * 2.7, 277),
    ("all_gather", 256, 8, "2.10", "ring", "LL128", {}, 10.0 + 224 * 1.9 + 31 * 4.0, 560),
    ("reduce_scatter", 256, 8, "2.10", "ring", "Simple", {}, 8.4 + 224 * 3.4 + 31 * 9.6, 1068),
    ("all_gather", 256, 8, "2.23", "ring", "LL128", {"gen": "hopper"}, 14.0 + 224 * 1.9 + 31 * 4.0, 564),
    ("all_gather", 256, 8, "2.23", "ring", "Simple", {"gen": "hopper"}, 8.4 + 224 * 3.4 + 31 * 14.0, 1204),
    ("all_gather", 256, 8, "2.23", "ring", "Simple", {"gen": "hopper", "cpu": "amd"}, 8.4 + 224 * 6 + 31 * 14, 1786),
    # n = 384 (k = 48): 336 + 47 steps
    ("all_gather", 384, 8, "2.10", "ring", "LL", {}, 3.6 + 336 * 0.47 * 1.8 + 47 * 2.7, 415),
    ("all_gather", 384, 8, "2.10", "ring", "LL128", {}, 10.0 + 336 * 1.9 + 47 * 4.0, 836),
    ("all_gather", 384, 8, "2.10", "ring", "Simple", {}, 8.4 + 336 * 3.4 + 47 * 9.6, 1602),
    ("all_gather", 384, 8, "2.23", "ring", "LL128", {}, 14.0 + 336 * 1.9 + 47 * 4.0, 840),
    ("all_gather", 384, 8, "2.23", "ring", "Simple", {}, 8.4 + 336 * 3.4 + 47 * 14.0, 1809),
    ("all_gather", 384, 8, "2.23", "ring", "Simple", {"cpu": "amd"}, 8.4 + 336 * 6 + 47 * 14.0, 2682),
    # n = 2,240 (k = 280): 1,960 + 279 steps
    ("all_gather", 2240, 8, "2.10", "ring", "LL", {}, 3.6 + 1960 * 0.47 * 1.8 + 279 * 2.7, 2415),
    ("all_gather", 2240, 8, "2.10", "ring", "LL128", {}, 10.0 + 1960 * 1.9 + 279 * 4.0, 4850),
    ("all_gather", 2240, 8, "2.10", "ring", "Simple", {}, 8.4 + 1960 * 3.4 + 279 * 9.6, 9351),
    ("all_gather", 2240, 8, "2.23", "ring", "LL128", {}, 14.0 + 1960 * 1.9 + 279 * 4.0, 4854),
    ("all_gather", 2240, 8, "2.23", "ring", "Simple", {}, 8.4 + 1960 * 3.4 + 279 * 14.0, 10578),
    ("all_gather", 2240, 8, "2.23", "ring", "Simple", {"cpu": "amd"}, 8.4 + 1960 * 6 + 279 * 14.0, 15674),
    # AR, n = 2,240: 2·2239 − 558 NVLink steps, 558 network steps; the tree's ⌊log2 280⌋ = 8
    ("all_reduce", 2240, 8, "2.10", "ring", "LL128", {}, 10.0 + 3920 * 1.9 + 558 * 4.0, 9690),
    ("all_reduce", 2240, 8, "2.10", "ring", "Simple", {}, 8.4 + 3920 * 3.4 + 558 * 9.6, 18693),
    ("all_reduce", 2240, 8, "2.10", "tree", "LL128", {}, 4.4 + 2 * (7 * 1.25 + 8 * 8.5), 158),
    ("all_reduce", 2240, 8, "2.23", "tree", "Simple", {}, 8.4 + 2 * (7 * 4.0 + 8 * 14.0), 288),
    # AR, one rank per node, dp = 96 / 768: every step crosses the network; ⌊log2⌋ = 6 / 9
    ("all_reduce", 96, 1, "2.10", "ring", "LL128", {}, 10.0 + 190 * 4.0, 770),
    ("all_reduce", 96, 1, "2.10", "ring", "Simple", {}, 8.4 + 190 * 9.6, 1832),
    ("all_reduce", 768, 1, "2.10", "ring", "LL128", {}, 10.0 + 1534 * 4.0, 6146),
    ("all_reduce", 768, 1, "2.10", "ring", "Simple", {}, 8.4 + 1534 * 9.6, 14735),
    ("all_reduce", 96, 1, "2.23", "ring", "Simple", {}, 8.4 + 190 * 14.0, 2668),  # ppn = 1: the tree's NET step
    ("all_reduce", 768, 1, "2.23", "ring", "Simple", {}, 8.4 + 1534 * 14.0, 21484),
    ("all_reduce", 96, 1, "2.10", "tree", "LL128", {}, 4.4 + 2 * 6 * 8.5, 106),
    ("all_reduce", 96, 1, "2.23", "tree", "Simple", {}, 8.4 + 2 * 6 * 14.0, 176),
    ("all_reduce", 768, 1, "2.10", "tree", "LL128", {}, 4.4 + 2 * 9 * 8.5, 157),
    ("all_reduce", 768, 1, "2.23", "tree", "Simple", {}, 8.4 + 2 * 9 * 14.0, 260),
    # PAT all-gather, one rank per node (v2.23+), and the ring it replaces
    ("all_gather", 256, 1, "2.23", "pat", "Simple", {}, 8 + 8 * 14.0 / 3.5 + 256 * 2.8, 757),
    ("all_gather", 1024, 1, "2.23", "pat", "Simple", {}, 8 + 10 * 14.0 / 3.5 + 1024 * 2.8, 2915),
    ("all_gather", 256, 1, "2.23", "ring", "Simple", {}, 8.4 + 255 * 14.0, 3578),
    ("all_gather", 1024, 1, "2.23", "ring", "Simple", {}, 8.4 + 1023 * 14.0, 14330),
]


@pytest.mark.parametrize("coll,n,ppn,era,algo,proto,kw,by_hand,notes", NOTES_TABLE)
def test_latency_table_of_the_notes(coll, n, ppn, era, algo, proto, kw, by_hand, notes) -> None:
    got = lat(coll, n, ppn, era, algo, proto, **kw)
    assert got == pytest.approx(by_hand, rel=1e-6)
    assert got == pytest.approx(notes, abs=0.6)  # the notes round to the µs


def _pair(coll: str, t: Topo, era: nccl.Era, algo: str, proto: str) -> nccl.Pair:
    return next(p for p in pairs(coll, t, era) if (p.algo, p.proto) == (algo, proto))


def test_bandwidths_by_hand() -> None:
    """Bus and algorithm bandwidth (GB/s) after each protocol's caps, 32 DGX A100 nodes, 8 rings at HDR's 24 GB/s."""
    t = Topo(n=256, ppn=8, channels=8, bw_intra=24.0, bw_inter=24.0, gen="ampere")
    raw = 8 * 24.0
    # v2.10: LL ring ≤ llMaxBw (Intel, ≥ 3 nodes) = 20.4; LL128 min(0.92·192, 20·8); tree min(0.92·192, 8·17.8)
    assert _pair("all_gather", t, "2.10", "ring", "LL").bus_bw == pytest.approx(min(20.4, raw / 4))
    assert _pair("all_gather", t, "2.10", "ring", "LL128").bus_bw == pytest.approx(160.0)
    assert _pair("all_gather", t, "2.10", "ring", "Simple").alg_bw == pytest.approx(raw * 256 / 255)
    tree = _pair("all_reduce", t, "2.10", "tree", "Simple")
    assert (tree.bus_bw, tree.alg_bw) == pytest.approx((8 * 17.8, 0.5 * 8 * 17.8))
    assert _pair("all_reduce", t, "2.10", "tree", "LL").bus_bw == pytest.approx(min(8 * 17.8 / 3.8, 20.4))
    assert _pair("all_reduce", t, "2.10", "ring", "Simple").alg_bw == pytest.approx(raw * 256 / 510)
    # v2.23: LL ring min(20.4, busBw/2); one rank per node no longer × 0.7 for LL128
    assert _pair("all_gather", t, "2.23", "ring", "LL").bus_bw == pytest.approx(20.4)
    one = Topo(n=32, ppn=1, channels=1, bw_intra=24.0, bw_inter=24.0, gen="ampere")
    assert _pair("all_gather", one, "2.10", "ring", "LL128").bus_bw == pytest.approx(min(0.7 * 24, 20.0))
    assert _pair("all_gather", one, "2.23", "ring", "LL128").bus_bw == pytest.approx(20.0)
    assert _pair("all_gather", one, "2.23", "pat", "Simple").alg_bw == pytest.approx(0.85 * 24)  # no ratio for PAT
    # Hopper, 16 channels of 24 (NDR doubled): LL128 36.7 per channel, tree 36.0 per channel at ≥ 3 nodes
    h = Topo(n=256, ppn=8, channels=16, bw_intra=24.0, bw_inter=24.0, gen="hopper", nvls=True)
    assert _pair("all_gather", h, "2.23", "ring", "LL128").bus_bw == pytest.approx(min(0.92 * 384, 16 * 36.7))
    assert _pair("all_reduce", h, "2.23", "tree", "Simple").bus_bw == pytest.approx(min(0.92 * 384, 16 * 36.0))
    nvt = _pair("all_reduce", h, "2.23", "nvls_tree", "Simple")  # min(bwIntra, bwInter/2) × C, × 5/6
    assert (nvt.bus_bw, nvt.alg_bw, nvt.lat_us) == pytest.approx((16 * 12.0, 16 * 12.0 * 5 / 6, 25 + 2 * 5 * 14.0))


def test_eras_enable_what_their_tuning_cc_enables() -> None:
    t8 = Topo(n=64, ppn=8, channels=8, bw_intra=24.0, bw_inter=24.0, gen="hopper", nvls=True)
    names = lambda coll, t, era: {(p.algo, p.proto) for p in pairs(coll, t, era)}  # noqa: E731
    # 2.10: all-gather is ring only; Hopper did not exist, LL128 only on Volta/Ampere
    assert names("all_gather", t8, "2.10") == {("ring", "LL"), ("ring", "Simple")}
    # 2.23: NVLS-tree across nodes for all-reduce; no PAT with 8 ranks per node
    assert ("nvls_tree", "Simple") in names("all_reduce", t8, "2.23")
    assert not any(a == "pat" for a, _ in names("all_gather", t8, "2.23"))
    one = Topo(n=64, ppn=1, channels=1, bw_intra=24.0, bw_inter=24.0, gen="ampere")
    assert ("pat", "Simple") in names("reduce_scatter", one, "2.23")
    assert not any(a == "pat" for a, _ in names("reduce_scatter", one, "2.10"))
    # Blackwell: LL128 off at v2.23.4-1 (pEnable: compute capability 70/80/90 only)
    bw = Topo(n=64, ppn=8, channels=8, bw_intra=48.0, bw_inter=48.0, gen="blackwell", nvls=True)
    assert not any(p == "LL128" for _, p in names("all_gather", bw, "2.23"))
    with pytest.raises(ValueError, match="send_recv"):
        pairs("send_recv", t8, "2.23")


def _crossover(coll: str, t: Topo, era: nccl.Era, a: tuple[str, str], b: tuple[str, str]) -> float:
    """Bytes where pair a's lat + S/algBw equals pair b's (by hand from the two pairs' tabulated figures)."""
    pa, pb = _pair(coll, t, era, *a), _pair(coll, t, era, *b)
    return (pb.lat_us - pa.lat_us) / (1 / (1000 * pa.alg_bw) - 1 / (1000 * pb.alg_bw))


@pytest.mark.parametrize("era", ["2.10", "2.23"])
def test_all_gather_switches_protocol_where_the_formula_says(era) -> None:
    """32 DGX A100 nodes, 8 ranks each: LL for small buffers, LL128 for mid, Simple for large, switching exactly at
    the sizes where the two pairs' lat + S/algBw cross."""
    t = Topo(n=256, ppn=8, channels=8, bw_intra=24.0, bw_inter=24.0, gen="ampere")
    ll_128 = _crossover("all_gather", t, era, ("ring", "LL"), ("ring", "LL128"))
    s128_simple = _crossover("all_gather", t, era, ("ring", "LL128"), ("ring", "Simple"))
    assert 0 < ll_128 < s128_simple
    for size, proto in ((64 * KiB, "LL"), (ll_128 * 0.99, "LL"), (ll_128 * 1.01, "LL128")):
        assert select("all_gather", size, t, era).proto == proto, size  # type: ignore[union-attr]
    assert select("all_gather", s128_simple * 0.99, t, era).proto == "LL128"  # type: ignore[union-attr]
    assert select("all_gather", s128_simple * 1.01, t, era).proto == "Simple"  # type: ignore[union-attr]
    # 2.10's Simple ring steps are cheaper (9.6 µs a network step, not 14): Simple takes over at smaller buffers
    if era == "2.10":
        assert s128_simple < _crossover("all_gather", t, "2.23", ("ring", "LL128"), ("ring", "Simple"))


def test_all_reduce_small_is_tree_large_is_ring() -> None:
    """16 DGX A100 nodes × 8: a small all-reduce is a (log-latency) tree in LL, a 4 GiB one a Simple ring."""
    t = Topo(n=128, ppn=8, channels=8, bw_intra=24.0, bw_inter=24.0, gen="ampere")
    for era in ("2.10", "2.23"):
        small, large = select("all_reduce", 4 * KiB, t, era), select("all_reduce", 4 * GiB, t, era)
        assert (small.algo, small.proto) == ("tree", "LL"), era  # type: ignore[union-attr]
        assert (large.algo, large.proto) == ("ring", "Simple"), era  # type: ignore[union-attr]
        # the ring's plateau is charged at that size: × 1.9 (2.10), × 1.4 (2.23, sm80)
        ring = _pair("all_reduce", t, era, "ring", "Simple")
        assert large.lat_us == pytest.approx(ring.lat_us * (1.9 if era == "2.10" else 1.4))  # type: ignore[union-attr]


def test_one_node_all_reduce_is_nvls_on_hopper_ring_on_ampere() -> None:
    """One node, 8 GPUs, 1 GiB: NVLS on Hopper (25 µs, 5/6 of the bus), a Simple ring on A100 (no NVLS)."""
    h = Topo(n=8, ppn=8, channels=16, bw_intra=20.0, bw_inter=20.0, gen="hopper", nvls=True)
    a = Topo(n=8, ppn=8, channels=12, bw_intra=20.0, bw_inter=20.0, gen="ampere")
    ch_h, ch_a = select("all_reduce", GiB, h, "2.23"), select("all_reduce", GiB, a, "2.23")
    assert (ch_h.algo, ch_a.algo, ch_a.proto) == ("nvls", "ring", "Simple")  # type: ignore[union-attr]
    assert ch_h.time_us == pytest.approx(25 + GiB / (1000 * 320 * 5 / 6))  # type: ignore[union-attr]
    # 8 KiB on one A100 node: LL's 6.6 + 14·0.6 µs beats every other pair
    small = select("all_reduce", 8 * KiB, a, "2.23")
    assert (small.algo, small.proto) == ("ring", "LL")  # type: ignore[union-attr]
    assert small.lat_us == pytest.approx(6.6 + 14 * 0.6)  # type: ignore[union-attr]


def test_pat_for_one_rank_per_node_until_the_ring_wins() -> None:
    """256 nodes × 1 rank (2.23): PAT's ~757 µs beats the ring's 3,578 µs for a mid-size all-gather; huge buffers
    go to the ring (PAT runs at 0.85 of the bus)."""
    t = Topo(n=256, ppn=1, channels=1, bw_intra=48.0, bw_inter=48.0, gen="hopper")
    mid = select("all_gather", 16 * MiB, t, "2.23")
    assert mid.algo == "pat"  # type: ignore[union-attr]
    assert select("all_gather", 64 * GiB, t, "2.23").algo == "ring"  # type: ignore[union-attr]
    assert select("all_gather", 16 * MiB, t, "2.10").algo == "ring"  # type: ignore[union-attr]


# ---- the cost model's use of the choice


def comm(gpu: str, nodes: int, era: nccl.Era) -> CommModel:
    cluster = ClusterSpec(gpu=gpu, num_nodes=nodes, gpus_per_node=8)
    return CommModel.for_cluster(cluster, get_gpu(gpu), nccl_era=era)


def test_cost_model_prices_the_chosen_pair_by_hand() -> None:
    """A 256-rank all-gather of 64 MiB on 32 DGX A100 (2.10): NCCL picks the LL128 ring (560 µs latency) and so does the
    cost model: that latency plus the bytes at the measured ring rate capped by 8 HDR NICs and by LL128's 160 GB/s;
    the Simple ring (1,068 µs) and LL (277 µs, ≤ 19.0 GB/s on the DGX A100's AMD hosts) priced alike cost more."""
    cm = comm("a100-sxm4-80gb", 32, "2.10")
    size = 64 * MiB
    ch = select("all_gather", size, cm.topo(256, 8), "2.10")
    assert (ch.algo, ch.proto) == ("ring", "LL128")  # type: ignore[union-attr]
    rate = cm.ring_rate(size) * min(1.0, 8 * 24e9 / cm.ring_asymptote())
    ll128 = (10.0 + 224 * 1.9 + 31 * 4.0) * 1e-6 + 255 / 256 * size / min(rate, 160e9)
    simple = (8.4 + 224 * 3.4 + 31 * 9.6) * 1e-6 + 255 / 256 * size / min(rate, 192e9)
    ll = (3.6 + 224 * 0.47 * 1.8 + 31 * 2.7) * 1e-6 + 255 / 256 * size / min(rate, 19.0e9)  # AMD hosts: 19.0
    assert ll128 < min(simple, ll)
    assert cm.time("all_gather", size, 256, "inter_node", 8) == pytest.approx(ll128, rel=1e-9)


def test_protocol_caps_are_ceilings_on_the_measured_rate() -> None:
    """256 KiB over 4 DGX A100 nodes: the measured ring curve at that size is below LL's 20.4 GB/s ceiling, so LL costs
    its latency and the curve's rate, not the curve × LL's share of the link (that would count the size twice)."""
    cm = comm("a100-sxm4-80gb", 4, "2.23")
    size = 256 * KiB
    rate = cm.ring_rate(size) * min(1.0, 8 * 24e9 / cm.ring_asymptote())
    t = cm.topo(32, 8)
    ll = next(p for p in pairs("all_gather", t, "2.23") if (p.algo, p.proto) == ("ring", "LL"))
    assert rate < ll.bus_bw * 1e9
    # DGX A100 hosts are AMD EPYC (nccl.CPU_OF): NVLink step max(0.6, 2 µs net overhead); LL ≤ 19.0 GB/s
    by_hand = (6.6 + 28 * 2.0 + 3 * 2.7) * 1e-6 + 31 / 32 * size / rate
    assert (ll.lat_us, ll.bus_bw) == pytest.approx((6.6 + 28 * 2.0 + 3 * 2.7, 19.0))
    assert cm.time("all_gather", size, 32, "inter_node", 8) == pytest.approx(by_hand, rel=1e-9)


def test_the_era_moves_large_rings_latency() -> None:
    """2,240 ranks (280 DGX A100): a 256 MiB all-gather costs more latency on 2.23 (14 µs network steps, higher bases)
    than on 2.10; inside a node both eras price the measured curve alike."""
    old, new = comm("a100-sxm4-80gb", 280, "2.10"), comm("a100-sxm4-80gb", 280, "2.23")
    assert old.time("all_gather", 256 * MiB, 2240, "inter_node", 8) < new.time(
        "all_gather", 256 * MiB, 2240, "inter_node", 8
    )
    assert old.time("all_gather", 256 * MiB, 8, "intra_node", 8) == new.time(
        "all_gather", 256 * MiB, 8, "intra_node", 8
    )


def test_the_hosts_cpu_is_the_dgx_of_the_generation() -> None:
    """DGX A100: AMD EPYC 7742 (2 µs net overhead, × 3 for Simple: a multi-node Simple ring's NVLink step is 6 µs, not
    3.4); DGX H100: Intel Xeon 8480C (1 µs: 3.4 stays)."""
    a, h = comm("a100-sxm4-80gb", 32, "2.23").topo(256, 8), comm("h100-sxm5-80gb", 32, "2.23").topo(256, 8)
    assert (a.cpu, h.cpu) == ("amd", "intel")
    assert _pair("all_gather", a, "2.23", "ring", "Simple").lat_us == pytest.approx(8.4 + 224 * 6.0 + 31 * 14.0)
    assert _pair("all_gather", h, "2.23", "ring", "Simple").lat_us == pytest.approx(8.4 + 224 * 3.4 + 31 * 14.0)


def test_the_stack_carries_the_era_and_bad_values_are_named() -> None:
    assert resolve("megatron").nccl == "2.23"
    assert resolve({"base": "megatron", "nccl": "2.10"}).nccl == "2.10"
    body = {
        "model": "llama3-8b",
        "cluster": {"gpu": "a100-sxm4-80gb", "num_nodes": 2, "gpus_per_node": 8},
        "training": {"global_batch_size": 64, "seq_len": 2048, "stack": {"base": "megatron", "nccl": "2.5"}},
    }
    with pytest.raises(ValidationError) as err:
        PlanRequest.model_validate(body)
    assert "nccl" in str(err.value) and "2.10" in str(err.value)


@pytest.mark.parametrize("era", ["2.10", "2.23"])
def test_the_hot_path_terms_are_price_s_numbers(era) -> None:
    """``nccl.terms`` (what ``CommModel`` reads) charges each pair ``price``'s latency on both sides of the plateau."""
    t = Topo(n=128, ppn=8, channels=8, bw_intra=24.0, bw_inter=24.0, gen="ampere")
    for size in (4 * KiB, 128 / 16 * 65536 - 1, 128 / 16 * 65536, 64 * 8 * 128 - 1, 64 * 8 * 128, GiB):
        for p, (lat, f, start, cap, ratio) in zip(pairs("all_reduce", t, era), nccl.terms("all_reduce", t, era)):
            assert lat * (f if size >= start else 1.0) == pytest.approx(
                nccl.price("all_reduce", p, size, t, era).lat_us * 1e-6
            )
            assert (cap, ratio) == pytest.approx((p.bus_bw * 1e9, p.alg_bw / p.bus_bw))
