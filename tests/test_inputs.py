"""Inputs that say what they did (issue 13): cluster bandwidth as people state it (per node or per GPU,
Gb/s or GB/s, NICs per node) and cluster presets, all normalised once into the per-GPU GB/s the cost
model uses; `--profile FILE`, `--network FILE`, `--model FILE` on the command line; a profile measured
on another device than the cluster's GPU is an error naming both."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import planner
from planner.pricing.comm import CommModel
from planner.specs import ClusterSpec, LinkFit, NetworkProfile, PlanRequest
from planner.specs.catalog import CLUSTER_PRESETS, GPUS, MODELS, get_gpu
from planner.specs.errors import MeshplanError
from planner.workload.analytic import analytic_profile

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "api.cli", *args],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


# ---- one cluster, stated several ways -------------------------------------------------------------

#: Independent arithmetic: a 400 Gb/s NIC carries 400e9 / 8 = 50e9 bytes/s; one per node shared by 8
#: GPUs is 6.25 GB/s per GPU; one per GPU (DGX H100: 8 per node) is 50 GB/s per GPU. DGX A100's 8 × 200
#: Gb/s HDR is 25 GB/s per GPU.
ONE_NIC = 400e9 / 8 / 8 / 1e9
DGX_H100 = 8 * 400e9 / 8 / 8 / 1e9
DGX_A100 = 8 * 200e9 / 8 / 8 / 1e9
H100 = {"gpu": "h100-sxm5-80gb", "gpus_per_node": 8}

STATEMENTS = [  # (expected GB/s per GPU, cluster fields)
    (ONE_NIC, {**H100, "inter_node_bandwidth_GBps": 6.25}),
    (ONE_NIC, {**H100, "inter_node_bandwidth": "1x400Gb/s"}),
    (ONE_NIC, {**H100, "inter_node_bandwidth": "400 Gb/s per node"}),
    (ONE_NIC, {**H100, "inter_node_bandwidth": "0.4 Tb/s per node"}),
    (ONE_NIC, {**H100, "inter_node_bandwidth": "50 GB/s per node"}),
    (ONE_NIC, {**H100, "inter_node_bandwidth": "50Gbps/GPU"}),
    (ONE_NIC, {**H100, "inter_node_bandwidth": "6.25 GB/s per GPU"}),
    (ONE_NIC, {"preset": "h100-1nic-400g"}),
    (DGX_H100, {**H100, "inter_node_bandwidth_GBps": 50}),
    (DGX_H100, {**H100, "inter_node_bandwidth": "8x400Gb/s"}),
    (DGX_H100, {**H100, "inter_node_bandwidth": "8 × 400 Gb/s"}),
    (DGX_H100, {**H100, "inter_node_bandwidth": "3200 Gb/s per node"}),
    (DGX_H100, {**H100, "inter_node_bandwidth": "400 Gb/s per GPU"}),
    (DGX_H100, {**H100, "inter_node_bandwidth": "1x400Gb/s per GPU"}),
    (DGX_H100, {"preset": "dgx-h100"}),
    (DGX_H100, {"preset": "dgx-h100", "gpu": "h100-sxm5-80gb"}),
    (DGX_A100, {"preset": "dgx-a100"}),
    (DGX_A100, {"gpu": "a100-sxm4-80gb", "gpus_per_node": 8, "inter_node_bandwidth": "8x200Gb/s"}),
]


def _request(cluster: dict, **parallel) -> dict:
    return {
        "model": "llama3-8b",
        "cluster": {"num_nodes": 2, **cluster},
        "training": {"global_batch_size": 64, "seq_len": 4096},
        "parallel": parallel,
        "top_k": 1,
        "options": {"time_limit_s": 20, "num_workers": 1},
    }


@pytest.mark.parametrize("expected, cluster", STATEMENTS, ids=[json.dumps(c[1]) for c in STATEMENTS])
def test_every_statement_gives_the_same_per_gpu_bandwidth_and_estimate(expected, cluster):
    spec = ClusterSpec.model_validate({"num_nodes": 2, **cluster})
    assert spec.inter_node_bandwidth_GBps == pytest.approx(expected, rel=1e-12)
    assert spec.gpus_per_node == 8
    gpu = get_gpu(spec.gpu)
    comm = CommModel.for_cluster(spec, gpu)
    assert comm.inter.bandwidth_Bps == pytest.approx(expected * 1e9, rel=1e-12)
    # the estimate of a DP-across-nodes layout is the one of the per-GPU figure given directly
    pins = {"tp": 8, "pp": 1, "micro_batch_size": 1}
    direct = {
        "gpu": spec.gpu,
        "gpus_per_node": 8,
        "inter_node_bandwidth_GBps": expected,
        "intra_node_bandwidth_GBps": spec.intra_node_bandwidth_GBps,
    }
    assert planner.estimate(_request(cluster, **pins)) == planner.estimate(_request(direct, **pins))


@pytest.mark.parametrize("first, second", [(1, 7), (9, 14)], ids=["one-nic", "dgx-h100"])
def test_the_same_cluster_stated_two_ways_gets_the_same_plan(first, second):
    a = planner.plan(_request(STATEMENTS[first][1]))
    b = planner.plan(_request(STATEMENTS[second][1]))
    assert a.plans[0].parallel == b.plans[0].parallel
    assert a.plans[0].estimate == b.plans[0].estimate


def test_fewer_nics_make_cross_node_data_parallelism_slower():
    """The statement is not decorative: with one NIC per node (8× less per-GPU bandwidth than eight) the
    cross-node gradient all-reduce no longer hides under the backward pass. (With eight, the sync hides
    under the backward and costs only the slowdown of the compute under it, σ·sync, planner.compose.terms
    ``OVERLAP_SLOWDOWN``; with one it is exposed beyond the backward, several times that.)"""
    pins = {"tp": 8, "pp": 1, "micro_batch_size": 1}
    one = planner.estimate(_request({"preset": "h100-1nic-400g"}, **pins))
    eight = planner.estimate(_request({"preset": "dgx-h100"}, **pins))
    assert one.breakdown.dp_sync_s > 4 * eight.breakdown.dp_sync_s > 0
    assert one.step_time_s > eight.step_time_s


def test_presets_are_their_datasheets():
    assert set(CLUSTER_PRESETS) >= {"dgx-a100", "dgx-h100", "h100-1nic-400g"}
    for p in CLUSTER_PRESETS.values():
        assert "https://" in p.source and p.gpu in GPUS
    assert CLUSTER_PRESETS["dgx-h100"].inter_node_bandwidth_GBps == DGX_H100
    assert CLUSTER_PRESETS["dgx-a100"].inter_node_bandwidth_GBps == DGX_A100
    assert CLUSTER_PRESETS["h100-1nic-400g"].inter_node_bandwidth_GBps == ONE_NIC


@pytest.mark.parametrize(
    "cluster, flag, words",
    [
        ({**H100, "inter_node_bandwidth": "400 Gb/s"}, "--inter-node-bandwidth", "per node or per GPU"),
        ({**H100, "inter_node_bandwidth": "fast"}, "--inter-node-bandwidth", "8x400Gb/s"),
        ({**H100, "inter_node_bandwidth": "400 Mb/s per GPU"}, "--inter-node-bandwidth", "cannot read"),
        (
            {**H100, "inter_node_bandwidth": "8x400Gb/s", "inter_node_bandwidth_GBps": 25},
            "--inter-node-bandwidth-gbps",
            "give only one",
        ),
        ({"preset": "dgx-z9"}, "--cluster-preset", "dgx-h100"),
    ],
)
def test_bad_bandwidth_statements_name_the_flag_and_the_fix(cluster, flag, words):
    from planner.answer import flags as request_flags
    from planner.specs.errors import InvalidInput

    values = {"model": "llama3-8b", "training.global_batch_size": "8", "training.seq_len": "128"}
    values.update({f"cluster.{k}": str(v) for k, v in cluster.items()})
    with pytest.raises(InvalidInput) as err:
        request_flags.request_from(None, values)
    first = err.value.errors[0]
    assert first.field == flag and first.fix, err.value
    assert words in str(err.value)


def test_cli_presets_and_statements_reach_the_plan(tmp_path: Path):
    out = run(
        "estimate",
        "--model",
        "llama3-8b",
        "--cluster-preset",
        "dgx-a100",
        "--nodes",
        "2",
        "--global-batch-size",
        "64",
        "--seq-len",
        "4096",
        "--tp",
        "8",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["cluster"]["gpu"]["id"] == "a100-sxm4-80gb" and plan["cluster"]["inter_node_bandwidth_GBps"] == DGX_A100
    listed = run("clusters", "--json")
    assert [p["id"] for p in json.loads(listed.stdout)] == list(CLUSTER_PRESETS)


# ---- documents on the command line --------------------------------------------------------------

SMALL = [
    "--gpu",
    "h100-sxm5-80gb",
    "--gpus-per-node",
    "2",
    "--global-batch-size",
    "8",
    "--seq-len",
    "128",
    "--tp",
    "1",
    "--pp",
    "1",
    "--micro-batch-size",
    "1",
    "--precision",
    "fp32",
]


def _measured_profile(device: str) -> dict:
    prof = analytic_profile(MODELS["tiny-gpt"], micro_batch_sizes=[1], seq_len=128, precision="fp32")
    prof.source, prof.device = "measured", device
    for lp in prof.layers:
        lp.fwd_time_s, lp.bwd_time_s = 1e-3, 2e-3
    return prof.model_dump(mode="json")


def test_profile_file_prices_the_layers_with_its_times(tmp_path: Path):
    f = tmp_path / "profile.json"
    f.write_text(json.dumps(_measured_profile("NVIDIA H100 80GB HBM3")))
    with_profile = run("estimate", "--model", "tiny-gpt", *SMALL, "--profile", str(f), "--json")
    assert with_profile.returncode == 0, with_profile.stderr
    plan = json.loads(with_profile.stdout)
    # 4 micro-batches × (8 blocks + embedding + head) × (1 ms fwd + 2 ms bwd): the profile's own times, + the
    # gradient-accumulation pass (cost model 37: not a profiled layer time; tens of µs on tiny-gpt)
    layers = 4 * 10 * 3e-3
    assert 0 < plan["estimate"]["breakdown"]["compute_s"] - layers < 1e-4
    assert plan["inputs"]["profile"]["device"] == "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("device", ["cpu", "NVIDIA A100-SXM4-80GB", "NVIDIA H100 PCIe 40GB"])
def test_profile_from_another_device_is_an_error_naming_both(tmp_path: Path, device: str):
    f = tmp_path / "profile.json"
    f.write_text(json.dumps(_measured_profile(device)))
    out = run("estimate", "--model", "tiny-gpt", *SMALL, "--profile", str(f))
    assert out.returncode == 2, out.stdout
    assert "--profile (device)" in out.stderr and device in out.stderr and "h100-sxm5-80gb" in out.stderr
    assert "Fix:" in out.stderr and "Traceback" not in out.stderr
    req = PlanRequest.model_validate(
        {
            "model": "tiny-gpt",
            "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 2},
            "training": {"global_batch_size": 8, "seq_len": 128},
            "profile": _measured_profile(device),
        }
    )
    with pytest.raises(MeshplanError) as err:
        planner.plan(req)
    assert err.value.field == "profile.device"


def test_network_file_prices_the_collectives(tmp_path: Path):
    links = [
        LinkFit(link="intra_node", collective=c, group_size=2, alpha_s=1e-3, beta_s_per_byte=1e-9)
        for c in ("all_reduce", "all_gather", "reduce_scatter", "send_recv")
    ]
    f = tmp_path / "network.yaml"
    f.write_text(
        yaml.safe_dump(NetworkProfile(backend="gloo", device="cpu", world_size=2, links=links).model_dump(mode="json"))
    )
    args = ["estimate", "--model", "tiny-gpt", *SMALL, "--json"]
    base = json.loads(run(*args).stdout)["estimate"]
    slow = run(*args, "--network", str(f))
    assert slow.returncode == 0, slow.stderr
    measured = json.loads(slow.stdout)
    assert measured["inputs"]["network"]["backend"] == "gloo"
    # the gradient all-reduce at 1 ms + 1 ns/byte no longer hides under the backward pass
    # (base: hidden under the backward, only the slowdown of the compute under it, planner.compose.terms OVERLAP_SLOWDOWN)
    assert base["breakdown"]["dp_sync_s"] < 0.01 * measured["estimate"]["breakdown"]["dp_sync_s"]
    assert measured["estimate"]["step_time_s"] > base["step_time_s"] + 1e-3


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_model_file_is_a_modelspec(tmp_path: Path, suffix: str):
    spec = MODELS["tiny-llama"].model_copy(update={"name": "my-qwen-like", "qkv_bias": True}).model_dump()
    f = tmp_path / f"model{suffix}"
    f.write_text(json.dumps(spec) if suffix == ".json" else yaml.safe_dump(spec))
    out = run("estimate", "--model", str(f), *SMALL, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["model"] == spec


def test_bad_model_file_names_the_file_the_field_and_the_flag(tmp_path: Path):
    spec = {**MODELS["tiny-llama"].model_dump(), "num_layers": 0}
    f = tmp_path / "model.json"
    f.write_text(json.dumps(spec))
    out = run("estimate", "--model", str(f), *SMALL)
    assert out.returncode == 2
    assert f"num_layers (in {f}, given by --model)" in out.stderr and "Traceback" not in out.stderr
    missing = run("estimate", "--model", str(tmp_path / "nope.yaml"), *SMALL)
    assert missing.returncode == 2 and "--model" in missing.stderr and "does not exist" in missing.stderr


# ---- context length per family version ----------------------------------------------------------


@pytest.mark.parametrize(
    "model, max_seq",
    [
        ("llama3-8b", 8192),
        ("llama3-70b", 8192),
        ("llama3.1-8b", 131072),
        ("llama3.1-70b", 131072),
        ("qwen2.5-7b", 131072),
        ("qwen2.5-72b", 131072),
    ],
)
def test_context_length_is_the_family_versions(model, max_seq):
    assert MODELS[model].max_seq_len == max_seq
    long = {
        "model": model,
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
        "training": {"global_batch_size": 8, "seq_len": 16384},
        "parallel": {"tp": 4, "pp": 2},
    }
    if max_seq < 16384:
        with pytest.raises(MeshplanError) as err:
            planner.estimate(long)
        assert err.value.field == "training.seq_len" and str(max_seq) in err.value.fix
    else:
        assert planner.estimate(long).step_time_s > 0


# A CUDA run re-prices its plan with the profile it measured (``runtime.train.predict_here``): the GPU spec
# it prices on must accept that profile — on an H200 the run named the spec 'NVIDIA H200' and was refused.
DEVICE_MATCHES = [
    # (profiled device, GPU spec id, accepted)
    ("NVIDIA H200", "h200-sxm-141gb", True),
    ("NVIDIA H100 80GB HBM3", "h100-sxm5-80gb", True),
    ("NVIDIA H200", "NVIDIA H200", True),  # a spec named for the profiled device (a GPU not in the catalog)
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", True),
    ("NVIDIA H100 PCIe 40GB", "h100-sxm5-80gb", False),
    ("NVIDIA A100-SXM4-80GB", "h100-sxm5-80gb", False),
    ("NVIDIA H200", "NVIDIA H100 80GB HBM3", False),
    ("cpu", "h200-sxm-141gb", False),
]


@pytest.mark.parametrize("device, gpu_id, accepted", DEVICE_MATCHES)
def test_profile_device_matches_the_gpu_it_prices(device: str, gpu_id: str, accepted: bool):
    from planner.answer.request import check_profile_device

    if accepted:
        check_profile_device(device, gpu_id)
    else:
        with pytest.raises(MeshplanError) as err:
            check_profile_device(device, gpu_id)
        assert err.value.field == "profile.device"


@pytest.mark.parametrize(
    "device, plan_gpu, expected_id",
    [
        ("NVIDIA H200", "h200-sxm-141gb", "h200-sxm-141gb"),  # ran on the plan's GPU: the catalog id stays
        ("NVIDIA H100 80GB HBM3", "h100-sxm5-80gb", "h100-sxm5-80gb"),
        ("NVIDIA A100-SXM4-80GB", "h100-sxm5-80gb", "NVIDIA A100-SXM4-80GB"),  # elsewhere: the device's name
    ],
)
def test_a_cuda_run_reprices_on_the_gpu_it_ran_on(device: str, plan_gpu: str, expected_id: str):
    from planner.answer.request import check_profile_device
    from planner.specs.catalog import GPUS
    from runtime.report import cuda_spec

    spec = cuda_spec(GPUS[plan_gpu], device)
    assert spec.id == expected_id
    check_profile_device(device, spec.id)  # the run's own profile prices it


@pytest.mark.parametrize(
    "gpu_id, kind, on_host",
    [
        ("cpu", None, True),  # a host recorded before GpuSpec.kind: its id says so
        ("CPU-epyc", None, True),
        ("h100-sxm5-80gb", None, False),
        ("my-workstation", "host", True),  # the field decides, whatever the id
        ("cpu-named-gpu", "gpu", False),
    ],
)
def test_the_device_kind_is_a_field_of_the_gpu_spec(gpu_id, kind, on_host):
    from planner.specs import GpuSpec

    body = {
        "id": gpu_id,
        "memory_gib": 16,
        "peak_tflops": {"fp32": 0.1},
        "hbm_bandwidth_GBps": 10,
        "nvlink_bandwidth_GBps": 10,
        "nic_bandwidth_GBps": 10,
    }
    if kind is not None:
        body["kind"] = kind
    gpu = GpuSpec.model_validate(body)
    assert gpu.on_host is on_host
    # unset, it is not written (request hashes of runs recorded before the field are unchanged)
    assert ("kind" in gpu.model_dump()) is (kind is not None)
    assert GpuSpec.model_validate_json(gpu.model_dump_json()).on_host is on_host
