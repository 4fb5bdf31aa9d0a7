"""Calibration from the user's own runs, proven on this CPU (issue 11 §4).

1. Measure this machine once, alone: a layer profile of the tiny model (``profiler.model_profile``, one
   process, one thread) and a gloo network fit at every process count the runs use (``meshplan profile
   cluster --nproc-per-node N``: 2 and 4), as a user profiles their cluster at the scale they run. On
   these 2 cores the 4-process fit is the oversubscribed one: a collective's steps wait for ranks the
   scheduler has not running, which the 2-process fit (one core per rank) cannot show.
2. Train real plans of the tiny model with ``meshplan run`` (torchrun, gloo, one thread per rank),
   each given those two files (``--profile``/``--network``): every ``RunReport`` carries the request that
   re-prices its plan on this hardware (``local_prediction.request``).
3. ``meshplan calibrate --runs`` on the CALIBRATION plans fits the residual constants.
4. The calibration predicts the PREDICTED plans, which it never saw: the table prints measured, predicted
   before and after calibration, and the error. Target: every predicted plan within 15 %.

The calibration and the predicted runs are measured in the same invocation, interleaved (one round of
every plan, then the next), so a machine that is busier during one part of it loads both. Each round is a run
of its own (a fresh ``torchrun``) that measures its own host classes; its measurement is its fastest step
after the warm-up (``fastest_step``: on a machine that others share, the step least slowed by their work),
priced with those classes. The calibration is fitted on every run of the calibration plans, and a plan's
figures are the medians over its runs of its fastest step and of its prediction; the table prints the
spread of the runs' own errors beside them. Twenty steps a run, five rounds (≈ 14 minutes). Why: a run's
fastest of seven steps is 0–9 % over its fastest of nineteen (medians over 20 runs: one process 0–2 %,
ZeRO-3 9 %, tp2 + SP 8 %, dp2 × tp2 7 %), so with eight steps the multi-process plans, whose steps vary more,
were measured slower than the one-process runs that settle the residuals; and the one run of a plan with
the fastest step of all its rounds carried that run's classes, however far from the others' (tp2 + SP: one
step 10 % faster than any other of its run, beside TP classes 20 % over the other runs', read +33 %).
Run: ``python bench/bench_calibration.py [--steps 20] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.specs import Calibration, RunReport  # noqa: E402

MODEL = "tiny-gpt"
GBS, SEQ = 8, 64


@dataclass(frozen=True)
class Case:
    label: str
    procs: int
    pins: tuple[str, ...]  # `meshplan estimate` flags
    role: str  # "calibration" or "predicted"


CASES = [
    Case("1 process, mbs 8", 1, ("--tp", "1", "--pp", "1", "--micro-batch-size", "8"), "calibration"),
    Case("1 process, mbs 2 × 4", 1, ("--tp", "1", "--pp", "1", "--micro-batch-size", "2"), "calibration"),
    Case(
        "dp2", 2, ("--tp", "1", "--pp", "1", "--dp", "2", "--micro-batch-size", "4", "--zero-stage", "0"), "calibration"
    ),
    Case("tp2", 2, ("--tp", "2", "--pp", "1", "--micro-batch-size", "8", "--no-sequence-parallel"), "calibration"),
    Case(
        "pp2 1F1B, mbs 2", 2, ("--tp", "1", "--pp", "2", "--micro-batch-size", "2", "--schedule", "1f1b"), "predicted"
    ),
    Case("tp2 + SP", 2, ("--tp", "2", "--pp", "1", "--micro-batch-size", "8", "--sequence-parallel"), "predicted"),
    Case(
        "dp2 ZeRO-3",
        2,
        ("--tp", "1", "--pp", "1", "--dp", "2", "--micro-batch-size", "4", "--zero-stage", "3"),
        "predicted",
    ),
    Case(
        "dp2 × tp2 (4 processes)",
        4,
        ("--tp", "2", "--pp", "1", "--dp", "2", "--micro-batch-size", "4", "--no-sequence-parallel"),
        "predicted",
    ),
]
TARGET = 0.15


def env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp)}


def meshplan(args: list[str], tmp: Path, *, capture: bool = True) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "api.cli", *args],
        cwd=ROOT,
        env=env(tmp),
        capture_output=capture,
        text=True,
        timeout=900,
    )
    if out.returncode:
        raise RuntimeError(f"meshplan {' '.join(args)} failed ({out.returncode}):\n{out.stderr}")
    return out.stdout or ""


def measure_hardware(
    tmp: Path, layers: str = "analytic", *, repeats: int = 9, procs: tuple[int, ...] = (2,)
) -> tuple[Path, dict[int, Path]]:
    """This machine, alone: a layer profile and a gloo network fit per process count in ``procs`` (each
    run is given the fit of its own count). ``layers="analytic"``: a meta profile (FLOPs and bytes, no
    times), so the per-op model prices the layers on the host's measured matmul and copy rates and the
    compute and kernel residuals act; ``"measured"``: CPU times of one process (median of ``repeats``)."""
    prof = tmp / "profile.json"
    device = ["--device", "meta"] if layers == "analytic" else ["--device", "cpu", "--repeats", str(repeats)]
    meshplan(
        ["profile", "model", "--model", MODEL, *device, "--dtype", "fp32", "--micro-batch-sizes", "2,4,8"]
        + ["--tp", "1,2", "--seq-len", str(SEQ), "--sequence-parallel", "--no-progress", "--out", str(prof)],
        tmp,
    )
    nets = {}
    for n in sorted(set(procs)):
        nets[n] = tmp / f"network-{n}.json"
        meshplan(["profile", "cluster", "--nproc-per-node", str(n), "--out", str(nets[n])], tmp)
    return prof, nets


def run_case(case: Case, tmp: Path, prof: Path, net: Path, steps: int, tag: str) -> RunReport:
    """``meshplan estimate`` the case's plan (for an H100 node, as a user plans), then ``meshplan run`` it here."""
    plan, report = tmp / f"{tag}.plan.json", tmp / f"{tag}.report.json"
    spec = ["--model", MODEL, "--gpu", "h100-sxm5-80gb", "--nodes", "1", "--gpus-per-node", str(case.procs)]
    spec += ["--global-batch-size", str(GBS), "--seq-len", str(SEQ), "--precision", "fp32", *case.pins, "--json"]
    plan.write_text(meshplan(["estimate", *spec], tmp))
    try:
        meshplan(
            ["run", "--plan", str(plan), "--nproc-per-node", str(case.procs), "--steps", str(steps)]
            + ["--profile", str(prof), "--network", str(net), "--report", str(report)],
            tmp,
        )
    except RuntimeError:
        # a rank that aborts while torchrun tears the job down after the report is written (seen with
        # PyTorch 2.13 under heavy load: "terminate called without an active exception") loses nothing
        if not report.exists():
            raise
    return RunReport.model_validate_json(report.read_text())


def fastest_step(report: RunReport) -> float:
    """The run's fastest step after the first (warm-up): on a machine others share, the step the least
    slowed by their work (the median, ``measured_step_time_s``, moves with it)."""
    return min(report.step_times_s[1:] or report.step_times_s)


def measure(
    cases: list[Case], tmp: Path, prof: Path, nets: dict[int, Path], steps: int, rounds: int
) -> dict[str, list[Path]]:
    """Every case ``rounds`` times, interleaved. Per case, one report per run: a copy with the run's fastest step
    as ``measured_step_time_s`` (``fastest_step``; the original reports stay beside them), each priced with
    the host classes that run measured."""
    out: dict[str, list[Path]] = {c.label: [] for c in cases}
    for r in range(rounds):
        for i, c in enumerate(cases):
            tag = f"case{i}-round{r}"
            rep = run_case(c, tmp, prof, nets[max(2, c.procs)], steps, tag)
            t = fastest_step(rep)
            tokens = rep.global_batch_size * rep.seq_len / t
            run = tmp / f"{tag}.fastest.json"
            run.write_text(rep.model_copy(update={"measured_step_time_s": t, "tokens_per_s": tokens}).model_dump_json())
            out[c.label].append(run)
    return out


#: The residuals fitted (``meshplan calibrate --free``): per-kernel host overhead and per step. Not ``comm_scale``:
#: every collective these runs issue on a host is priced at the class the run measured in its step (TP's,
#: FSDP2's per wrapped module, the pipeline's send/recv: ``planner.pricing.collectives``), so no calibration run depends on
#: it (``meshplan calibrate --free ...,comm_scale`` holds it at 1 and says so).
FREE = "kernel_overhead_us,step_overhead_s"


def calibrate(paths: list[Path], out: Path, tmp: Path, free: str = FREE) -> tuple[Calibration, str]:
    table = meshplan(["calibrate", "--runs", *map(str, paths), "--free", free, "--out", str(out)], tmp)
    return Calibration.model_validate_json(out.read_text()), table


def predict(report: RunReport, calibration: Calibration | None) -> float:
    from planner.api import estimate_plan

    assert report.local_prediction is not None and report.local_prediction.request is not None
    request = report.local_prediction.request.model_copy(update={"calibration": calibration})
    return estimate_plan(request).estimate.step_time_s


@dataclass(frozen=True)
class Row:
    """A plan over its runs: the medians of each run's fastest step and of its predictions (each priced with
    its own run's host classes), and the spread of the runs' own errors."""

    label: str
    role: str
    procs: int
    measured_s: float
    before_s: float
    after_s: float
    run_errors: tuple[float, ...]

    @property
    def error(self) -> float:
        return self.after_s / self.measured_s - 1


def rows(cases: list[Case], runs: dict[str, list[Path]], calibration: Calibration) -> list[Row]:
    out = []
    for c in cases:
        reps = [RunReport.model_validate_json(p.read_text()) for p in runs[c.label]]
        measured = [r.measured_step_time_s for r in reps]
        before = [predict(r, None) for r in reps]
        after = [predict(r, calibration) for r in reps]
        errors = tuple(a / m - 1 for a, m in zip(after, measured))
        med = statistics.median
        out.append(Row(c.label, c.role, c.procs, med(measured), med(before), med(after), errors))
    return out


def print_table(table: list[Row], calibration: Calibration) -> None:
    runs = "runs' own errors"
    print(
        f"{'plan':26s} {'role':12s} {'procs':>5s} {'measured s':>11s} {'before s':>9s} {'after s':>9s} {'error':>7s}"
        f"  {runs:>17s}"
    )
    for r in table:
        spread = f"{min(r.run_errors):+.0%} … {max(r.run_errors):+.0%}"
        print(
            f"{r.label:26s} {r.role:12s} {r.procs:5d} {r.measured_s:11.4f} {r.before_s:9.4f} {r.after_s:9.4f} "
            f"{r.error:+7.1%}  {spread:>17s}"
        )
    predicted = [abs(r.error) for r in table if r.role == "predicted"]
    res = calibration.residuals
    print(
        f"residuals: comm_scale {res.comm_scale:.4g}, step_overhead_s {res.step_overhead_s:.4g}, "
        f"kernel_overhead_us {res.kernel_overhead_us:.4g}, compute_scale {res.compute_scale:.4g}, "
        f"memory_scale {res.memory_scale:.4g}; calibration runs: in-sample {calibration.in_sample_mape:.1%}, "
        f"cross-validated {calibration.cross_validated_mape if calibration.cross_validated_mape is None else f'{calibration.cross_validated_mape:.1%}'}"
    )
    print(
        f"predicted plans: max |error| {max(predicted):.1%}, mean {statistics.mean(predicted):.1%} "
        f"(target ≤ {TARGET:.0%})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5, help="Measurements of every plan, interleaved.")
    parser.add_argument("--keep", type=Path, default=None, help="Keep the plans, reports and calibration here.")
    parser.add_argument("--layers", choices=("analytic", "measured"), default="analytic")
    parser.add_argument("--free", default=FREE, help="Residuals to fit (meshplan calibrate --free).")
    args = parser.parse_args()
    import torch

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        tmp = args.keep or Path(d)
        tmp.mkdir(parents=True, exist_ok=True)
        prof, nets = measure_hardware(tmp, args.layers, procs=tuple(max(2, c.procs) for c in CASES))
        runs = measure(CASES, tmp, prof, nets, args.steps, args.rounds)
        cal_paths = [p for c in CASES if c.role == "calibration" for p in runs[c.label]]
        calibration, table = calibrate(cal_paths, tmp / "calibration.json", tmp, args.free)
        print(
            f"{MODEL}, global batch {GBS} × {SEQ} tokens, fp32 AdamW, {args.steps} steps × {args.rounds} rounds; "
            f"torch {torch.__version__}, {len(os.sched_getaffinity(0))} cores\n"
        )
        print(
            f"$ meshplan calibrate --runs {' '.join(p.name for p in cal_paths)} --free {args.free} --out calibration.json"
        )
        print(table)
        result = rows(CASES, runs, calibration)
        print_table(result, calibration)
        print(f"({time.perf_counter() - t0:.0f} s)")
        if args.keep:
            (args.keep / "table.json").write_text(json.dumps([r.__dict__ for r in result], indent=2))


if __name__ == "__main__":
    main()
