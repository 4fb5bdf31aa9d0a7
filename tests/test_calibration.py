"""Calibration from the user's own runs (issue 11 §4): a ``Calibration`` applied to a request
(``PlanRequest.calibration``), recorded in the plan so that it replays exactly, refused on other hardware;
`meshplan calibrate` on RunReports; and the CPU proof — calibrated on some real runs of this machine, the
model predicts other plans' measured step times."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planner.api import estimate_plan, plan, replay_request
from planner.errors import MeshplanError
from planner.specs import Calibration, CalibrationRun, GpuSpec, PeakTflops, Residuals

ROOT = Path(__file__).resolve().parents[1]

H100 = {
    "model": "llama3-8b",
    "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
    "training": {"global_batch_size": 64, "seq_len": 4096},
    "parallel": {"tp": 4, "pp": 1, "micro_batch_size": 1},
}
CPU = GpuSpec(
    id="cpu",
    memory_gib=16.0,
    peak_tflops=PeakTflops(fp32=0.05),
    hbm_bandwidth_GBps=5.0,
    nvlink_bandwidth_GBps=1.0,
    nic_bandwidth_GBps=1.0,
    source="test host",
)
TINY_CPU = {
    "model": "tiny-gpt",
    "cluster": {"gpu": CPU.model_dump(), "num_nodes": 1, "gpus_per_node": 2},
    "training": {"global_batch_size": 8, "seq_len": 64, "precision": "fp32"},
    "parallel": {"tp": 2, "pp": 1, "micro_batch_size": 8},
}


def calibration(gpu: str, stack: str = "meshplan", **residuals: float) -> Calibration:
    runs = [CalibrationRun(label="r", measured_step_time_s=1.0, predicted_before_s=0.5, predicted_after_s=0.98)]
    return Calibration(
        gpu=gpu,
        stack=stack,
        residuals=Residuals(**residuals),
        runs=runs,
        in_sample_mape=0.02,
        cross_validated_mape=0.04,
    )


# ---------------------------------------------------------------------------------------------
# Applying a calibration to a request


def test_a_calibration_prices_the_plan_and_the_plan_says_so() -> None:
    base = estimate_plan(H100)
    cal = calibration("h100-sxm5-80gb", step_overhead_s=0.5, comm_scale=2.0)
    calibrated = estimate_plan({**H100, "calibration": cal.model_dump()})
    # step_overhead_s adds once per step; comm_scale doubles the exposed communication: slower by ≥ 0.5 s
    assert calibrated.estimate.step_time_s >= base.estimate.step_time_s + 0.5 - 1e-9
    assert calibrated.inputs.calibration == cal
    note = next(n for n in calibrated.estimate.notes if n.startswith("calibrated"))
    assert "h100-sxm5-80gb" in note and "1 measured run" in note and "meshplan stack" in note
    assert "2.0%" in note and "4.0%" in note and "step_overhead_s=0.5" in note


def test_replay_of_a_calibrated_plan_re_prices_it_exactly() -> None:
    cal = calibration("h100-sxm5-80gb", step_overhead_s=0.25, comm_scale=3.0, compute_scale=1.2)
    p = estimate_plan({**H100, "calibration": cal.model_dump()})
    again = estimate_plan(replay_request(p))
    assert again.estimate == p.estimate
    assert again.inputs.calibration == cal


def test_plan_search_with_a_calibration_explains_it() -> None:
    cal = calibration("h100-sxm5-80gb", step_overhead_s=0.1)
    request = {**H100, "parallel": {}, "top_k": 1, "options": {"time_limit_s": 5}, "calibration": cal.model_dump()}
    best = plan(request).plans[0]
    assert best.inputs.calibration == cal
    assert best.explanation is not None and any(d.startswith("calibrated") for d in best.explanation.details)


@pytest.mark.parametrize(
    "request_, field, fix",
    [
        ({**H100, "calibration_id": "cal-1"}, "calibration_id", "pass the Calibration itself"),
        (
            {**H100, "calibration": calibration("cpu").model_dump()},
            "calibration.gpu",
            "calibrate on runs of the cluster's GPU",
        ),
        (
            {**H100, "calibration": calibration("a100-sxm4-80gb").model_dump()},
            "calibration.gpu",
            "set cluster.gpu to 'a100-sxm4-80gb'",
        ),
        (
            {**TINY_CPU, "calibration": calibration("h100-sxm5-80gb").model_dump()},
            "calibration.gpu",
            "leave out the calibration",
        ),
        (
            {**H100, "calibration": calibration("h100-sxm5-80gb", stack="megatron").model_dump()},
            "calibration.stack",
            "set training.stack to 'megatron'",
        ),
    ],
)
def test_a_calibration_of_other_hardware_or_stack_is_refused(request_: dict, field: str, fix: str) -> None:
    with pytest.raises(MeshplanError) as exc:
        estimate_plan(request_)
    assert exc.value.field == field and fix in exc.value.fix


@pytest.mark.parametrize(
    "gpu, request_",
    [
        ("cpu", TINY_CPU),  # a CPU calibration on the host's own spec
        ("NVIDIA H100 80GB HBM3", H100),  # a device name, as a CUDA run records it, on its catalog id
        (
            "h100-sxm5-80gb",
            {**H100, "training": {**H100["training"], "stack": {"base": "meshplan", "attention": "unfused"}}},
        ),
    ],
)
def test_a_calibration_of_the_same_hardware_and_stack_applies(gpu: str, request_: dict) -> None:
    cal = calibration(gpu, step_overhead_s=0.01)
    p = estimate_plan({**request_, "calibration": cal.model_dump()})
    assert p.inputs.calibration == cal


def test_the_request_file_carries_a_calibration_through_the_cli(tmp_path: Path) -> None:
    cal = calibration("h100-sxm5-80gb", step_overhead_s=0.5)
    f = tmp_path / "cal.json"
    f.write_text(cal.model_dump_json())
    args = ["estimate", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--nodes", "1", "--gpus-per-node", "8"]
    args += ["--global-batch-size", "64", "--seq-len", "4096", "--tp", "4", "--micro-batch-size", "1", "--json"]
    plain, calibrated = cli(*args), cli(*args, "--calibration", str(f))
    assert plain.returncode == 0 and calibrated.returncode == 0, calibrated.stderr
    a, b = json.loads(plain.stdout), json.loads(calibrated.stdout)
    assert b["estimate"]["step_time_s"] >= a["estimate"]["step_time_s"] + 0.5 - 1e-9
    assert b["inputs"]["calibration"]["gpu"] == "h100-sxm5-80gb"
    other = cli(*[("a100-sxm4-80gb" if x == "h100-sxm5-80gb" else x) for x in args], "--calibration", str(f))
    assert other.returncode == 2 and "calibration.gpu" in other.stderr and "Traceback" not in other.stderr


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "api.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
