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

from planner.answer.request import replay_request
from planner.api import estimate_plan, plan
from planner.specs import Calibration, CalibrationRun, PlanRequest, Residuals, RunReport
from planner.specs.catalog import get_gpu
from planner.specs.errors import MeshplanError
from runtime.report import build_report
from tests.bench_support import bench_module
from tests.host_support import CPU

ROOT = Path(__file__).resolve().parents[1]

H100 = {
    "model": "llama3-8b",
    "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
    "training": {"global_batch_size": 64, "seq_len": 4096},
    "parallel": {"tp": 4, "pp": 1, "micro_batch_size": 1},
}
GPU_H100 = get_gpu("h100-sxm5-80gb").model_dump()
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
        # a catalog id on the device-named spec a CUDA run re-prices itself with
        (
            "h100-sxm5-80gb",
            {**H100, "cluster": {**H100["cluster"], "gpu": {**GPU_H100, "id": "NVIDIA H100 80GB HBM3"}}},
        ),
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
    # the calibration replaces the built-in residuals (the meshplan stack's on H100: the generation's pooled row), so
    # it is compared with an identity calibration of the same hardware: the 0.5 s step overhead is the difference
    files = {}
    for name, overhead in (("cal", 0.5), ("identity", 0.0)):
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(calibration("h100-sxm5-80gb", step_overhead_s=overhead).model_dump_json())
    args = ["estimate", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--nodes", "1", "--gpus-per-node", "8"]
    args += ["--global-batch-size", "64", "--seq-len", "4096", "--tp", "4", "--micro-batch-size", "1", "--json"]
    plain, calibrated = (
        cli(*args, "--calibration", str(files["identity"])),
        cli(*args, "--calibration", str(files["cal"])),
    )
    assert plain.returncode == 0 and calibrated.returncode == 0, calibrated.stderr
    a, b = json.loads(plain.stdout), json.loads(calibrated.stdout)
    assert b["estimate"]["step_time_s"] >= a["estimate"]["step_time_s"] + 0.5 - 1e-9
    assert b["inputs"]["calibration"]["gpu"] == "h100-sxm5-80gb"
    other = cli(*[("a100-sxm4-80gb" if x == "h100-sxm5-80gb" else x) for x in args], "--calibration", str(files["cal"]))
    assert other.returncode == 2 and "--calibration (gpu)" in other.stderr and "Traceback" not in other.stderr


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "api.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


# ---------------------------------------------------------------------------------------------
# `meshplan calibrate` on run reports

#: CPU plans of the tiny model as `meshplan run` re-prices them (a host "GPU"; the layers by the per-op
#: model, so every residual acts): (processes, pins).
CPU_PLANS = [
    (1, {"tp": 1, "pp": 1, "dp": 1, "micro_batch_size": 8}),
    (1, {"tp": 1, "pp": 1, "dp": 1, "micro_batch_size": 2}),
    (2, {"tp": 1, "pp": 1, "dp": 2, "micro_batch_size": 4, "zero_stage": 0}),
    (2, {"tp": 2, "pp": 1, "dp": 1, "micro_batch_size": 8}),
    (2, {"tp": 1, "pp": 2, "dp": 1, "micro_batch_size": 2, "schedule": "1f1b"}),
    (2, {"tp": 1, "pp": 1, "dp": 2, "micro_batch_size": 4, "zero_stage": 3}),
]
#: comm_scale 5, not more: at 20 the bundled runtime's own collectives (an all-reduce per column-parallel linear,
#: one per FSDP2-wrapped module: cost model 10) make the dp and tp runs communication-bound, and four compute-side
#: residuals would rest on three runs (a flat direction the fit cannot resolve).
KNOWN = Residuals(compute_scale=3.0, kernel_overhead_us=40.0, comm_scale=5.0, step_overhead_s=0.02)


def cpu_request(procs: int, pins: dict) -> PlanRequest:
    return PlanRequest.model_validate(
        {**TINY_CPU, "cluster": {**TINY_CPU["cluster"], "gpus_per_node": procs}, "parallel": pins}
    )


def synthetic_report(request: PlanRequest, measured: float, steps: int = 5, device: str = "cpu") -> RunReport:
    """A RunReport as `meshplan run` writes it for ``request``'s plan on this CPU, measuring ``measured``."""
    from planner.specs import Prediction

    plan_ = estimate_plan(request)
    local = Prediction(predicted_on=device, step_time_s=plan_.estimate.step_time_s, request=request)
    return build_report(
        plan_,
        device=device,
        torch_version="2.13.0+cpu",
        losses=[5.0] * steps,
        step_times=[measured] * steps,
        peak_memory_bytes_per_rank=[1 << 30] * plan_.parallel.num_gpus,
        local=local,
    )


def write_reports(tmp_path: Path, residuals: Residuals) -> list[Path]:
    """One report per ``CPU_PLANS`` entry whose measured step time is what ``residuals`` predict."""
    from planner.answer.calibrate import predict_step_time

    paths = []
    for i, (procs, pins) in enumerate(CPU_PLANS):
        request = cpu_request(procs, pins)
        report = synthetic_report(request, predict_step_time(request, residuals))
        path = tmp_path / f"run{i}.json"
        path.write_text(report.model_dump_json())
        paths.append(path)
    return paths


def test_calibrate_recovers_the_residuals_that_produced_the_times(tmp_path: Path) -> None:
    """Runs whose times the model gives at KNOWN residuals: `meshplan calibrate` finds KNOWN again, and the
    calibration it writes prices every run at its measured time (an independent check of the re-pricing,
    the fit and the file: nothing else could land on these numbers)."""
    paths = write_reports(tmp_path, KNOWN)
    out = cli("calibrate", "--runs", *map(str, paths), "--out", str(tmp_path / "cal.json"))
    assert out.returncode == 0, out.stderr
    cal = Calibration.model_validate_json((tmp_path / "cal.json").read_text())
    for field in ("compute_scale", "kernel_overhead_us", "comm_scale", "step_overhead_s"):
        assert getattr(cal.residuals, field) == pytest.approx(getattr(KNOWN, field), rel=0.02), field
    assert cal.gpu == "cpu" and cal.stack == "meshplan" and len(cal.runs) == len(CPU_PLANS)
    assert cal.in_sample_mape is not None and cal.in_sample_mape < 0.005
    for r in cal.runs:
        assert r.predicted_after_s == pytest.approx(r.measured_step_time_s, rel=0.01)
        assert r.predicted_before_s < 0.8 * r.measured_step_time_s  # identity is far from these times
    for token in (
        "measured s",
        "before s",
        "after s",
        "left out s",
        "tiny-gpt tp2 pp1 dp1 mbs8 on 2× cpu",
        "calibrated on 6",
    ):
        assert token in out.stdout, token
    # the file prices a plan it was not fitted on, through --calibration
    request = cpu_request(2, {"tp": 2, "pp": 1, "dp": 1, "micro_batch_size": 8, "sequence_parallel": True})
    from planner.answer.calibrate import predict_step_time

    priced = estimate_plan(request.model_copy(update={"calibration": cal}))
    assert priced.estimate.step_time_s == pytest.approx(predict_step_time(request, KNOWN), rel=0.02)


@pytest.mark.parametrize(("copies", "how"), [(1, "leave-one-out"), (2, "leave-one-group-out")])
def test_runs_of_one_plan_are_left_out_together(tmp_path: Path, copies: int, how: str) -> None:
    """A user who ran each plan several times (as bench/bench_calibration.py does) gets the error of a plan the
    fit never saw: the runs of one configuration are left out together, not one by one beside their twins."""
    import shutil

    paths = write_reports(tmp_path, KNOWN)
    for k in range(1, copies):
        paths += [Path(shutil.copy(p, tmp_path / f"{p.stem}-again{k}.json")) for p in paths[: len(CPU_PLANS)]]
    out = cli("calibrate", "--runs", *map(str, paths), "--out", str(tmp_path / "cal.json"))
    assert out.returncode == 0, out.stderr
    cal = Calibration.model_validate_json((tmp_path / "cal.json").read_text())
    assert len(cal.runs) == copies * len(CPU_PLANS)
    assert any(f"cross-validation: {how}" in n for n in cal.notes), cal.notes
    assert cal.cross_validated_mape is not None and cal.cross_validated_mape < 0.01


def _edit(path: Path, **changes) -> Path:
    data = json.loads(path.read_text())
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split("__")
        for p in parents:
            node = node[p]
        node[last] = value
    path.write_text(json.dumps(data))
    return path


def _copies(path: Path, d: Path, n: int) -> list[Path]:
    """``n`` reports of one configuration (the runs of a plan run ``n`` times)."""
    out = [d / f"copy{i}.json" for i in range(n)]
    for p in out:
        p.write_text(path.read_text())
    return out


@pytest.mark.parametrize(
    "mutate, extra, field, fix",
    [
        (lambda ps, d: [d / "missing.json"], [], "runs", ""),
        (lambda ps, d: [_edit(ps[0], local_prediction__request=None), ps[1]], [], "runs", "re-run the plan"),
        (lambda ps, d: [_edit(ps[0], local_prediction=None), ps[1]], [], "runs", "re-run the plan"),
        (lambda ps, d: [_edit(ps[0], steps=1, losses=[5.0], step_times_s=[0.1]), ps[1]], [], "runs", "--steps 5"),
        (lambda ps, d: [_edit(ps[0], device="NVIDIA H100 80GB HBM3"), ps[1]], [], "runs", "calibrate the runs of each"),
        (lambda ps, d: ps[:2], ["--free", "comm_speed"], "free", "choose among"),
        (lambda ps, d: ps[:1], [], "runs", "at least"),
        (lambda ps, d: _copies(ps[0], d, 4), [], "runs", "runs of different configurations"),  # one plan, 4 runs
    ],
)
def test_calibrate_bad_input_exits_2_naming_the_field_and_the_fix(tmp_path, mutate, extra, field, fix) -> None:
    paths = mutate(write_reports(tmp_path, KNOWN), tmp_path)
    out = cli("calibrate", "--runs", *map(str, paths), *extra, "--out", str(tmp_path / "cal.json"))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr and f"error: {field}" in out.stderr and fix in out.stderr, out.stderr
    assert not (tmp_path / "cal.json").exists()


# ---------------------------------------------------------------------------------------------
# The CPU proof (bench/bench_calibration.py), small: real runs of this machine


def _bench():
    return bench_module("bench_calibration")


@pytest.mark.slow
def test_calibrated_on_real_cpu_runs_the_model_predicts_another_plan(tmp_path: Path) -> None:
    """`meshplan run` a one-process plan and tp2 of the tiny model here, `meshplan calibrate` on them, and
    predict tp2 + SP, measured in the same test (a busy machine slows all three alike, so no bound here
    depends on the load). Every run records the host's dispatch costs by class with its re-pricing
    request (``GpuSpec.host_dispatch``; the TP runs their in-step TP collectives); priced as a user would
    before running it (the tp2 run's request with SP on, so its host figures are the calibration's) and
    calibrated, tp2 + SP lands within a factor 4, and the calibration prices the runs it was fitted on, together,
    no worse than the uncalibrated model (bench/bench_calibration.py holds the full table and the 15 % target)."""
    bench = _bench()
    cases = [
        bench.Case("one", 1, ("--tp", "1", "--pp", "1", "--micro-batch-size", "8"), "calibration"),
        bench.Case(
            "tp2", 2, ("--tp", "2", "--pp", "1", "--micro-batch-size", "8", "--no-sequence-parallel"), "calibration"
        ),
        bench.Case(
            "tp2sp", 2, ("--tp", "2", "--pp", "1", "--micro-batch-size", "8", "--sequence-parallel"), "predicted"
        ),
    ]
    prof, nets = bench.measure_hardware(tmp_path)
    reports = {label: runs[0] for label, runs in bench.measure(cases, tmp_path, prof, nets, steps=5, rounds=1).items()}
    for label, path in reports.items():
        gpu = RunReport.model_validate_json(path.read_text()).local_prediction.request.cluster.gpu  # type: ignore[union-attr]
        hd = gpu.host_dispatch
        assert hd is not None and hd.adam_dtensor_us > hd.adam_plain_us > 0, (label, hd)
        # the TP runs their TP collectives as DTensor issues them, measured by their own ranks
        assert (hd.tp_all_reduce_us is not None) == (label != "one"), (label, hd)
    calibration, table = bench.calibrate(
        [reports["one"], reports["tp2"]], tmp_path / "cal.json", tmp_path, "comm_scale,step_overhead_s"
    )
    assert "tiny-gpt tp2 pp1 dp1 mbs8 on 2× cpu" in table and calibration.gpu == "cpu"
    # price tp2 + SP as a user would before running it: the tp2 run's own re-pricing request (its host's
    # measured figures, taken with the calibration runs) with sequence parallelism switched on
    import math

    from planner.api import estimate_plan

    tp2 = RunReport.model_validate_json(reports["tp2"].read_text()).local_prediction.request  # type: ignore[union-attr]
    assert tp2 is not None
    sp = tp2.model_copy(update={"parallel": tp2.parallel.model_copy(update={"sequence_parallel": True})})
    measured = RunReport.model_validate_json(reports["tp2sp"].read_text()).measured_step_time_s
    row = (
        estimate_plan(sp).estimate.step_time_s,
        estimate_plan(sp.model_copy(update={"calibration": calibration})).estimate.step_time_s,
        measured,
    )
    after = abs(math.log(row[1] / measured))
    # Load-robust bounds (the 15 % target is the bench's, on a quiet machine): the in-step TP collective is
    # measured at one moment of a shared machine (0.3–1.8 ms per collective across runs), and in CI another
    # pytest worker's processes share the cores, so the calibrated tp2 + SP has landed from −12…+9 % (quiet,
    # bench) to 2× over (CI). Since the host model counts the collectives SP issues, the uncalibrated price
    # is no longer far under (−50 % quiet, +40 % in CI), so "closer than before" is not a property; what a
    # user relies on is that the fit matches the runs it was given and predicts the unseen plan within 4×.
    assert after < math.log(4.0), row

    # The fit minimises Σ log²(predicted ÷ measured) over the runs it was given, starting from the uncalibrated
    # model, so together they are priced no worse than before. (Not each run: one free residual shared by a
    # run the model over-prices and one it under-prices moves one of them away; CI saw tp2 go +54 → +71 %.)
    def sq_log_error(cal: object) -> float:
        total = 0.0
        for label in ("one", "tp2"):
            run = RunReport.model_validate_json(reports[label].read_text())
            req = run.local_prediction.request  # type: ignore[union-attr]
            assert req is not None
            pred = estimate_plan(req.model_copy(update={"calibration": cal})).estimate.step_time_s
            total += math.log(pred / run.measured_step_time_s) ** 2
        return total

    assert sq_log_error(calibration) <= sq_log_error(None) + 1e-6, (sq_log_error(None), sq_log_error(calibration))


def _meta_profile(tmp: Path, model: str, mbs=(2, 4, 8), tps=(1, 2)) -> Path:
    from planner.specs.catalog import get_model
    from profiler.model_profile import profile_model

    prof = profile_model(get_model(model), device="meta", micro_batch_sizes=mbs, tps=tps, seq_len=64, dtype="fp32")
    path = tmp / f"{model}-meta.json"
    path.write_text(prof.model_dump_json())
    return path


@pytest.mark.parametrize(
    "model, mbs, ok, fix",
    [
        ("tiny-gpt", (2, 4, 8), True, ""),  # FLOPs and bytes only: the per-op model prices it as before
        ("tiny-llama", (2, 4, 8), False, "profile the run's model"),
        ("tiny-gpt", (4,), False, "--micro-batch-sizes 8"),  # misses the runs' micro-batch sizes
    ],
)
def test_calibrate_profile_replaces_the_runs_own(tmp_path: Path, model: str, mbs: tuple, ok: bool, fix: str) -> None:
    paths = write_reports(tmp_path, KNOWN)
    out = cli(
        "calibrate", "--runs", *map(str, paths), "--profile", str(_meta_profile(tmp_path, model, mbs)),
        "--out", str(tmp_path / "cal.json"), "--json",
    )  # fmt: skip
    if ok:
        assert out.returncode == 0, out.stderr
        cal = Calibration.model_validate_json(out.stdout)
        assert cal.residuals.comm_scale == pytest.approx(KNOWN.comm_scale, rel=0.05)
    else:
        assert out.returncode == 2 and "error: profile" in out.stderr and fix in out.stderr, out.stderr
