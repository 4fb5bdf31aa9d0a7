"""The network the published runs are priced on (``bench/bench_fidelity.py`` ``CLUSTER_NETWORK``), checked by hand.

torchtitan's 2024-04 A100 tables ran on AWS P4de (4 × 100 Gb/s EFA per node, 8 GPUs: the source is cited at
``CLUSTER_NETWORK``); every other group keeps its GPU's default NICs (A100: HDR 200 Gb/s per GPU, 25 GB/s)."""

from __future__ import annotations

import pytest

from planner.answer.calibrate import predict_step_time
from planner.specs import Residuals
from tests.bench_support import bench_module

bench = bench_module("bench_fidelity")
DATA = bench.load()
RUNS = {r["id"]: r for r in DATA["runs"]}

#: (run, its NIC rate per GPU in GB/s, one direction, by hand): 4 EFA × 100 Gb/s ÷ 8 bits ÷ 8 GPUs = 6.25;
#: a DGX A100's own HDR port, 200 Gb/s ÷ 8 = 25 (the catalog's default: no override).
NETWORK_CASES = [
    ("torchtitan_2404_a100_8B_selective_op", 4 * 100 / 8 / 8),
    ("torchtitan_2404_a100_llama2_70b_lbs1", 4 * 100 / 8 / 8),
    ("torchtitan_2404_a100_70B_full", 4 * 100 / 8 / 8),
    ("megatron_2020_dgxa100_dp128_8B", None),
]


@pytest.mark.parametrize(("rid", "per_gpu_GBps"), NETWORK_CASES)
def test_each_run_is_priced_on_the_network_it_ran_on(rid, per_gpu_GBps):
    cluster = bench.request(RUNS[rid], DATA["gpus"]).cluster
    assert cluster.inter_node_bandwidth_GBps == per_gpu_GBps


#: (run, parameters, 8 nodes): FSDP2 moves per step a bf16 all-gather of every parameter in forward and again in
#: backward and an fp32 reduce-scatter of the gradients (8 bytes per parameter), (n − 1)/n of it through each node's
#: links, all of which leaves a node through its 4 EFA ports at the achieved 47/50 of their 400 Gb/s: a step can be no
#: shorter than that (Llama 2 70B at local batch 1: the model prices it network-bound).
PARAMS_70B = 68_976_648_192  # Llama 2 70B, vocab 32,000 (catalog llama2-70b)


def test_the_network_bound_row_is_no_faster_than_its_fsdp_traffic():
    row = RUNS["torchtitan_2404_a100_llama2_70b_lbs1"]
    req = bench.request(row, DATA["gpus"])
    n = row["cluster"]["num_gpus"]
    node_Bps = 4 * 100e9 / 8 * 47 / 50
    wire = 8 * PARAMS_70B * (n - 1) / n / node_Bps
    step = predict_step_time(req, Residuals())
    assert step >= wire
    assert step < 1.3 * wire  # and the compute under it (≈ 8.4 s) is hidden: the step is the traffic plus a little
