"""α-β collective costs against the nccl-tests formulas, link classes from the mesh layout, and a
measured network profile replacing the defaults."""

from __future__ import annotations

import pytest

from planner.catalog import get_gpu
from planner.comm import DEFAULT_INTER_LATENCY_S, DEFAULT_INTRA_LATENCY_S, CommModel
from planner.specs import ClusterSpec, LinkFit, NetworkProfile

H100 = get_gpu("h100-sxm5-80gb")
CLUSTER = ClusterSpec(gpu="h100-sxm5-80gb", num_nodes=2, gpus_per_node=8)


@pytest.mark.parametrize(
    "collective,steps,factor",
    [
        ("all_reduce", lambda n: 2 * (n - 1), lambda n: 2 * (n - 1) / n),
        ("all_gather", lambda n: n - 1, lambda n: (n - 1) / n),
        ("reduce_scatter", lambda n: n - 1, lambda n: (n - 1) / n),
    ],
)
@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_formulas(collective, steps, factor, n) -> None:
    cm = CommModel.for_cluster(CLUSTER, H100)
    size = 256 * 2**20
    expect = steps(n) * DEFAULT_INTRA_LATENCY_S + factor(n) * size / (H100.nvlink_bandwidth_GBps * 1e9)
    assert cm.time(collective, size, n, "intra_node") == pytest.approx(expect)
    expect_inter = steps(n) * DEFAULT_INTER_LATENCY_S + factor(n) * size / (H100.nic_bandwidth_GBps * 1e9)
    assert cm.time(collective, size, n, "inter_node") == pytest.approx(expect_inter)


def test_single_rank_and_empty_messages_cost_nothing() -> None:
    cm = CommModel.for_cluster(CLUSTER, H100)
    assert cm.time("all_reduce", 1e9, 1, "intra_node") == 0.0
    assert cm.time("all_reduce", 0, 8, "intra_node") == 0.0


def test_cluster_overrides() -> None:
    cluster = CLUSTER.model_copy(update={"inter_node_bandwidth_GBps": 25.0, "inter_node_latency_us": 10.0})
    cm = CommModel.for_cluster(cluster, H100)
    assert cm.time("send_recv", 25e9, 2, "inter_node") == pytest.approx(1.0 + 10e-6)


def test_network_profile_replaces_defaults() -> None:
    """A fit at group size 4 (α = 30 µs, β = 1/(10 GB/s) × 2·3/4) re-applied at group size 8."""
    fit = LinkFit(
        link="intra_node", collective="all_reduce", group_size=4, alpha_s=30e-6, beta_s_per_byte=(2 * 3 / 4) / 10e9
    )
    net = NetworkProfile(backend="nccl", device="h100", world_size=8, links=[fit])
    cm = CommModel.for_cluster(CLUSTER, H100, net)
    size = 1e9
    expect = 2 * 7 * (30e-6 / 6) + (2 * 7 / 8) * size / 10e9
    assert cm.time("all_reduce", size, 8, "intra_node") == pytest.approx(expect)
    # collectives without a fit keep the datasheet model
    assert cm.time("all_gather", size, 8, "intra_node") == pytest.approx(
        7 * DEFAULT_INTRA_LATENCY_S + 7 / 8 * size / 450e9
    )


@pytest.mark.parametrize(
    "ranks,link",
    [([0, 7], "intra_node"), ([7, 8], "inter_node"), ([0, 1, 2, 3], "intra_node"), ([4, 12], "inter_node")],
)
def test_link_class(ranks, link) -> None:
    assert CommModel.for_cluster(CLUSTER, H100).link_class(ranks) == link
