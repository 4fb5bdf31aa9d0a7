"""Predicted versus measured step time on this machine, end to end, for several plans.

1. Profile the tiny model's layers on this CPU (``profiler.model_profile``, measured fwd/bwd times).
2. Profile the network: gloo collectives between 2 local processes (``meshplan profile cluster``),
   α-β fits per collective.
3. For each plan: ``planner.estimate_plan`` with both profiles and a CPU "device" spec → the
   predicted step time; then ``meshplan run`` trains it under torchrun → the measured step time
   (median of the steps after the first).

The CPU device spec's rates only matter for what the profiles do not cover (the optimizer step's
memory traffic): 2 cores, ~0.1 TFLOP/s fp32, ~10 GB/s memory bandwidth (order of magnitude for this
kind of machine). Run: ``python bench/bench_predicted_vs_measured.py [--steps 8]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner import estimate_plan  # noqa: E402
from planner.specs import ClusterSpec, GpuSpec, NetworkProfile, ParallelPins, PeakTflops, PlanRequest, TrainingSpec  # noqa: E402
from planner.specs.catalog import get_model  # noqa: E402

MODEL = "tiny-gpt"
GBS, SEQ = 8, 64
CPU = GpuSpec(
    id="cpu-2core",
    memory_gib=20.0,
    peak_tflops=PeakTflops(fp32=0.1),
    hbm_bandwidth_GBps=10.0,
    nvlink_bandwidth_GBps=1.0,
    nic_bandwidth_GBps=1.0,
    source="this CI-class machine, order of magnitude",
)
#: (label, processes, pins)
PLANS = [
    ("single process, mbs 8", 1, dict(tp=1, pp=1, dp=1, micro_batch_size=8)),
    ("single process, mbs 2 ×4", 1, dict(tp=1, pp=1, dp=1, micro_batch_size=2)),
    ("dp2 ZeRO-0", 2, dict(tp=1, pp=1, dp=2, micro_batch_size=4, zero_stage=0)),
    ("dp2 ZeRO-3", 2, dict(tp=1, pp=1, dp=2, micro_batch_size=4, zero_stage=3)),
    ("pp2 1F1B mbs 2", 2, dict(tp=1, pp=2, dp=1, micro_batch_size=2, schedule="1f1b")),
    ("pp2 GPipe mbs 2", 2, dict(tp=1, pp=2, dp=1, micro_batch_size=2, schedule="gpipe")),
    ("tp2", 2, dict(tp=2, pp=1, dp=1, micro_batch_size=8)),
    ("tp2 + SP", 2, dict(tp=2, pp=1, dp=1, micro_batch_size=8, sequence_parallel=True)),
]


def env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp)}


def meshplan(args: list[str], tmp: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "api.cli", *args],
        cwd=ROOT,
        env=env(tmp),
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=900,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)  # the workers run with OMP_NUM_THREADS=1 too
    from profiler.model_profile import profile_model

    model = get_model(MODEL)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        profile = profile_model(
            model,
            device="cpu",
            micro_batch_sizes=(2, 4, 8),
            tps=(1, 2),
            seq_len=SEQ,
            sequence_parallel=True,
            dtype="fp32",
            warmup=3,
            repeats=9,
        )
        meshplan(["profile", "cluster", "--nproc-per-node", "2", "--out", str(tmp / "net.json")], tmp)
        network = NetworkProfile.model_validate_json((tmp / "net.json").read_text())
        print(
            f"{MODEL}, global batch {GBS} × {SEQ} tokens, fp32 AdamW, {args.steps} steps; "
            f"torch {torch.__version__}, {os.cpu_count()} cores"
        )
        print(f"{'plan':26s} {'procs':>5s} {'predicted s':>12s} {'measured s':>11s} {'pred/meas':>10s}")
        ratios = []
        for label, procs, pins in PLANS:
            request = PlanRequest(
                model=MODEL,
                cluster=ClusterSpec(gpu=CPU, num_nodes=1, gpus_per_node=procs),
                training=TrainingSpec(global_batch_size=GBS, seq_len=SEQ, precision="fp32", optimizer="adam"),
                parallel=ParallelPins(**pins),
                profile=profile,
                network=network,
            )
            plan = estimate_plan(request)
            plan_file, report_file = tmp / "plan.json", tmp / "report.json"
            plan_file.write_text(plan.model_dump_json())
            meshplan(
                [
                    "run",
                    "--plan",
                    str(plan_file),
                    "--nproc-per-node",
                    str(procs),
                    "--steps",
                    str(args.steps),
                    "--report",
                    str(report_file),
                ],
                tmp,
            )
            report = json.loads(report_file.read_text())
            predicted, measured = plan.estimate.step_time_s, report["measured_step_time_s"]
            ratios.append(predicted / measured)
            print(f"{label:26s} {procs:5d} {predicted:12.4f} {measured:11.4f} {predicted / measured:10.2f}")
        errors = sorted(abs(r - 1) for r in ratios)
        print(f"|pred/meas − 1|: median {errors[len(errors) // 2]:.0%}, max {errors[-1]:.0%} over {len(ratios)} plans")


if __name__ == "__main__":
    main()
