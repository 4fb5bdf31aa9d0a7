"""The GPU check's results against the cost model, and the calibration they give that GPU (issue 11, "Also").

``bench/gpu/check.sh`` ran on a lent GPU (``bench/gpu/h200/``: an H200); this prints, from its files:

1. **GEMM by shape**: every measured bf16 GEMM (Llama 3 8B/70B linears at TP 1–8, squares) against
   ``planner.pricing.gpu.gemm_time`` on the catalog GPU (the datasheet peak × ``device.GEMM_EFFICIENCY`` × the
   wave/tile efficiency), summarised per (model, TP, tokens);
2. **attention**: SDPA's causal forward + backward by backend against ``gpu.flash_rate`` (the published
   FlashAttention-2 table of the GPU's family, which the ``flash`` stacks are priced with);
3. **HBM**: copies by size against ``gpu.hbm_time`` (datasheet bandwidth × ``HBM_EFFICIENCY`` by size),
   and the host's launch rate against ``gpu.GPU_LAUNCH_US``;
4. **the calibration**: ``compute_scale`` fitted on the GEMMs, ``memory_scale`` on the copies of at least
   ``MIN_COPY_BYTES`` (smaller ones run from the 60 MB L2 or at the launch rate), ``kernel_overhead_us`` =
   the measured launch beyond ``GPU_LAUNCH_US`` (``planner.answer.calibrate.fit_residuals``, leave-one-out error);
   written as a ``Calibration`` (``--out``; ``meshplan plan --calibration`` / ``POST /v1/calibrations``);
5. **the runs**: the bundled runtime's one-GPU runs (``RunReport``) against the plan's prediction without
   and with that calibration, and priced with the layer profile measured on the GPU (``--profile``);
6. **one profiled step** per run (``bench/gpu/trace_step.py``): GPU kernel time by class, the GEMMs and the
   attention core beside what the model prices for them.

``python bench/gpu_calibration.py [--dir bench/gpu/h200] [--out bench/gpu/h200/calibration.json]``
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.answer.calibrate import Observation, fit_residuals  # noqa: E402
from planner.answer.request import context  # noqa: E402
from planner.api import estimate_plan  # noqa: E402
from planner.pricing import gpu as kernels  # noqa: E402
from planner.specs import Calibration, ModelSpec, PlanRequest, Profile, Residuals, RunReport  # noqa: E402
from planner.specs.catalog import GPUS  # noqa: E402

#: Copies below this many bytes moved are not HBM-bound on an H100/H200 (50/60 MB L2, ~6 µs launches).
MIN_COPY_BYTES = 128 << 20
GPU_ID = {"NVIDIA H200": "h200-sxm-141gb", "NVIDIA H100 80GB HBM3": "h100-sxm5-80gb"}


def request(gpu: str, model: ModelSpec, *, mbs: int = 1, calibration: Calibration | None = None, profile=None):
    return PlanRequest.model_validate(
        {
            "model": model.model_dump(),
            "cluster": {"gpu": gpu, "num_nodes": 1, "gpus_per_node": 1},
            "training": {"global_batch_size": 8, "seq_len": 8192, "precision": "bf16", "stack": "meshplan"},
            "parallel": {"tp": 1, "pp": 1, "dp": 1, "micro_batch_size": mbs},
            **({"calibration": calibration.model_dump()} if calibration else {}),
            **({"profile": profile.model_dump()} if profile else {}),
        }
    )


def pct(x: float) -> str:
    return f"{x:+.1%}"


def gemm_table(ctx, gemms: list[dict]) -> list[Observation]:
    print("\n## GEMM by shape (bf16): measured vs planner.pricing.gpu.gemm_time\n")
    print("| group | shapes | measured TFLOP/s (time-weighted) | model TFLOP/s | model ÷ measured time − 1 |")
    print("|---|---|---|---|---|")
    groups: dict[str, list[tuple[dict, float]]] = {}
    obs = []
    for g in gemms:
        model_s = kernels.gemm_time(ctx, g["m"], g["n"], g["k"])
        key = g["label"].rsplit(" ", 1)[0] if not g["label"].startswith("square") else "square 1k–16k"
        groups.setdefault(key, []).append((g, model_s))
        obs.append(Observation(g["seconds"], predict=lambda r, s=model_s: r.compute_scale * s, label=g["label"]))
    for key, rows in groups.items():
        fl = sum(2 * g["m"] * g["n"] * g["k"] for g, _ in rows)
        meas, model = sum(g["seconds"] for g, _ in rows), sum(s for _, s in rows)
        print(f"| {key} | {len(rows)} | {fl / meas / 1e12:.0f} | {fl / model / 1e12:.0f} | {pct(model / meas - 1)} |")
    errs = [o.predicted(Residuals()) / o.measured_step_time_s - 1 for o in obs]
    print(
        f"\nper shape, uncalibrated: median {pct(statistics.median(errs))}, range {pct(min(errs))} … {pct(max(errs))}"
    )
    return obs


def attention_table(ctx, rows: list[dict]) -> None:
    print("\n## Attention (SDPA, causal, bf16, batch·seq = 16k, hidden 2048): fwd+bwd TFLOP/s (FA's causal count)\n")
    print("| head dim | seq | flash (FA2) | cuDNN | default | FA2 table (model) | model ÷ FA2 measured − 1 |")
    print("|---|---|---|---|---|---|---|")
    by = {(r["backend"], r["head_dim"], r["seq"]): r.get("fwd_bwd_tflops") for r in rows}
    for d in (64, 128):
        for seq in sorted({r["seq"] for r in rows}):
            rate = kernels.flash_rate(ctx, d, seq)
            fa2 = by.get(("flash", d, seq))
            cells = [f"{by.get((b, d, seq)) or float('nan'):.0f}" for b in ("flash", "cudnn", "default")]
            err = pct(fa2 / rate - 1) if fa2 and rate else "n/a"
            print(f"| {d} | {seq} | {' | '.join(cells)} | {rate:.0f} | {err} |")


def copy_table(ctx, copies: list[dict], launch: dict) -> list[Observation]:
    print("\n## HBM copies (y.copy_(x), bytes read + written) vs planner.pricing.gpu.hbm_time\n")
    print("| bytes moved | measured GB/s | model GB/s | model ÷ measured time − 1 |")
    print("|---|---|---|---|")
    obs = []
    for c in copies:
        model_s = kernels.hbm_time(ctx, c["moved_bytes"])
        used = c["moved_bytes"] >= MIN_COPY_BYTES
        note = "" if used else " (L2 / launch-bound: not fitted)"
        print(
            f"| {c['moved_bytes'] / 2**20:,.1f} MiB | {c['GBps']:.0f} | {c['moved_bytes'] / model_s / 1e9:.0f} | "
            f"{pct(model_s / c['seconds'] - 1)}{note} |"
        )
        if used:
            obs.append(
                Observation(c["seconds"], predict=lambda r, s=model_s: r.memory_scale * s, label=f"copy {c['bytes']}")
            )
    print(
        f"\nlaunch: {launch['us_per_kernel']:.2f} µs per kernel (eager PyTorch, {launch['kernels']:,} tiny kernels) "
        f"against GPU_LAUNCH_US = {kernels.GPU_LAUNCH_US} µs"
    )
    return obs


def calibrate(gpu: str, gemm_obs, copy_obs, launch: dict, device: str) -> Calibration:
    gemm = fit_residuals(gemm_obs, free=("compute_scale",), field_name="gemms")
    copy = fit_residuals(copy_obs, free=("memory_scale",), field_name="copies")
    overhead = max(0.0, launch["us_per_kernel"] - kernels.GPU_LAUNCH_US)
    residuals = Residuals(
        compute_scale=gemm.residuals.compute_scale,
        memory_scale=copy.residuals.memory_scale,
        kernel_overhead_us=overhead,
    )
    print("\n## Calibration (fit_residuals; leave-one-out)\n")
    print("| residual | value | on | in-sample error | leave-one-out error | uncalibrated error |")
    print("|---|---|---|---|---|---|")
    for name, fit, n in (("compute_scale", gemm, len(gemm_obs)), ("memory_scale", copy, len(copy_obs))):
        print(
            f"| {name} | {getattr(residuals, name):.3f} | {n} {'GEMMs' if name == 'compute_scale' else 'copies'} | "
            f"{fit.in_sample_mape:.1%} | {fit.cross_validated_mape or 0:.1%} | {fit.before_mape:.1%} |"
        )
    print(f"| kernel_overhead_us | {overhead:.2f} | the launch measurement | measured | | |")
    obs = gemm.observations + copy.observations
    cal = gemm.calibration(gpu, "meshplan")
    return cal.model_copy(
        update={
            "residuals": residuals,
            "runs": cal.runs + copy.calibration(gpu, "meshplan").runs,
            "in_sample_mape": statistics.fmean(abs(o.after_s / o.measured_s - 1) for o in obs),
            "cross_validated_mape": statistics.fmean(abs(o.cross_validated_s / o.measured_s - 1) for o in obs),
            "notes": [
                f"fitted by bench/gpu_calibration.py on microbenchmarks of one {device} (bench/gpu_microbench.py): "
                f"compute_scale on {len(gemm_obs)} bf16 GEMMs, memory_scale on {len(copy_obs)} HBM copies ≥ "
                f"{MIN_COPY_BYTES >> 20} MiB, kernel_overhead_us = the measured eager launch − {kernels.GPU_LAUNCH_US} µs"
            ],
        }
    )


def runs_table(gpu: str, model: ModelSpec, d: Path, cal: Calibration, profile: Profile | None) -> None:
    print("\n## The bundled runtime on one GPU (meshplan run): step time and peak memory\n")
    print(
        "| run | measured s | predicted s (err) | calibrated s (err) | with the GPU's layer profile s (err) | "
        "peak GiB measured | predicted (err) |"
    )
    print("|---|---|---|---|---|---|---|")
    for f in sorted(d.glob("run-*.json")):
        r = RunReport.model_validate_json(f.read_text())
        mbs = r.parallel.micro_batch_size
        m = r.measured_step_time_s
        plain = estimate_plan(request(gpu, model, mbs=mbs)).estimate
        calibrated = estimate_plan(request(gpu, model, mbs=mbs, calibration=cal)).estimate
        prof = estimate_plan(request(gpu, model, mbs=mbs, profile=profile)).estimate if profile else None
        peak = max(r.peak_memory_gib_per_rank)
        cells = [f"{e.step_time_s:.3f} ({pct(e.step_time_s / m - 1)})" for e in (plain, calibrated)]
        cells.append(f"{prof.step_time_s:.3f} ({pct(prof.step_time_s / m - 1)})" if prof else "n/a")
        compiled = " (torch.compile)" if any("compile" in n for n in r.notes) else ""
        print(
            f"| {f.stem}{compiled} | {m:.3f} | {' | '.join(cells)} | {peak:.1f} | "
            f"{plain.peak_memory_gib:.1f} ({pct(plain.peak_memory_gib / peak - 1)}) |"
        )


def trace_table(ctx, model: ModelSpec, d: Path) -> None:
    """One profiled step (bench/gpu/trace_step.py) by kernel class, GEMMs and attention beside the model's."""
    traces = sorted(d.glob("trace-*.json"))
    if not traces:
        return
    print("\n## One step under torch.profiler (bench/gpu/trace_step.py): GPU kernel seconds by class\n")
    print(
        "| run | wall s | GEMM s (model) | GEMM TFLOP/s | attention s (model) | copies/casts | element-wise | "
        "optimizer | reductions | other |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for f in traces:
        t = json.loads(f.read_text())
        mbs, n, cls = trace_classes(ctx, f)
        gemm_model, gemm_flops = step_gemms(ctx, model, mbs)
        af, ab = kernels.attention_time(ctx, mbs, 1)
        att_model = n * model.num_layers * (af + ab)
        print(
            f"| {f.stem} | {t['profiled_wall_s']:.3f} | {cls['gemm']:.3f} ({gemm_model:.3f}) | "
            f"{gemm_flops / cls['gemm'] / 1e12:.0f} | {cls['attention']:.3f} ({att_model:.3f}) | "
            f"{cls['copy/cast']:.3f} | {cls['elementwise']:.3f} | {cls['optimizer']:.3f} | {cls['reduce']:.3f} | "
            f"{cls['other']:.3f} |"
        )


def trace_classes(ctx, f: Path) -> tuple[int, int, dict[str, float]]:
    """A stored trace's micro-batch size, its micro-batches a step, and its GPU kernel seconds by class."""
    t = json.loads(f.read_text())
    mbs = int(re.search(r"mbs(\d+)", f.stem).group(1))
    cls = dict(t["by_class_s"])
    for name, secs, _ in t["top_kernels"]:  # record_function ranges listed on the GPU timeline (older traces)
        if name.startswith(("FSDP::", "Optimizer.", "ProfilerStep")):
            cls[trace_class(name)] -= secs
    return mbs, ctx.training.global_batch_size // mbs, cls


def step_gemms(ctx, model: ModelSpec, mbs: int) -> tuple[float, float]:
    """(model seconds, FLOPs) of one step's linear GEMMs, forward and both backward, every block and the LM head."""
    tokens, n = mbs * ctx.training.seq_len, ctx.training.global_batch_size // mbs
    bf, bb, bflops = kernels.linear_times(ctx, "transformer_block", tokens, 1)
    hf, hb, hflops = kernels.linear_times(ctx, "lm_head", tokens, 1)
    return n * (model.num_layers * (bf + bb) + hf + hb), n * 3 * (model.num_layers * bflops + hflops)


def trace_class(name: str) -> str:
    sys.path.insert(0, str(ROOT / "bench" / "gpu"))
    from trace_step import classify

    return classify(name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=ROOT / "bench" / "gpu" / "h200")
    ap.add_argument("--model", type=Path, default=ROOT / "bench" / "gpu" / "llama3-8b-8l.json")
    ap.add_argument("--out", type=Path, help="write the calibration here")
    args = ap.parse_args(argv)
    micro = json.loads((args.dir / "microbench.json").read_text())
    gpu = GPU_ID.get(micro["device"])
    if gpu is None or gpu not in GPUS:
        raise SystemExit(f"--dir: {micro['device']!r} is not a catalog GPU this script knows ({sorted(GPU_ID)})")
    model = ModelSpec.model_validate_json(args.model.read_text())
    ctx = context(request(gpu, model))
    print(f"# {micro['device']} ({gpu}), PyTorch {micro['torch']}, CUDA {micro['cuda']}, {micro['sm_count']} SMs")
    gemm_obs = gemm_table(ctx, micro["gemms"])
    attention_table(ctx, micro["attention"])
    copy_obs = copy_table(ctx, micro["copies"], micro["launch"])
    cal = calibrate(gpu, gemm_obs, copy_obs, micro["launch"], micro["device"])
    prof_path = args.dir / "profile.json"
    profile = Profile.model_validate_json(prof_path.read_text()) if prof_path.exists() else None
    runs_table(gpu, model, args.dir, cal, profile)
    trace_table(ctx, model, args.dir)
    if args.out:
        args.out.write_text(cal.model_dump_json(indent=1) + "\n")
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
