"""Overhead of meshplan's runtime: step time of `runtime.job.Job` applying a plan versus a hand-written
composition of the same PyTorch APIs (fully_shard, parallelize_module, PipelineStage + schedule) for
the same model, seed, batch and configuration. Both run in the same processes, alternating, so load
on the machine hits both alike. Prints the figures (median step time, slowest rank). Then, in one
process, the step time a measured CPU profile (``profiler``) implies beside the measured one.

    python bench/bench_runtime.py [--steps 12] [--nproc 2]

(Re-launches itself under torchrun; OMP_NUM_THREADS=1.)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONFIGS = [  # (name, model, parallel settings) on 2 processes; batch 8 × 32, micro-batch 1
    ("dp2 ZeRO-3 (fully_shard)", "tiny-llama", dict(dp=2, zero_stage=3)),
    ("tp2 + sequence parallel", "tiny-llama", dict(tp=2, sequence_parallel=True)),
    ("pp2 1F1B", "tiny-llama", dict(pp=2, schedule="1f1b")),
]


def hand_written(plan, mesh, device):
    """The same configuration written directly against PyTorch, as a user would (torchtitan style)."""
    import torch
    import torch.nn.functional as F
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    from runtime.models import build_model

    p = plan.parallel
    model = build_model(plan.model, seed=0)

    def loss_fn(out, y):
        return F.cross_entropy(out.flatten(0, 1).float(), y.flatten(0, 1))

    n_mb = plan.training.global_batch_size // (p.dp * p.micro_batch_size)
    if p.pp > 1:
        rank = mesh.get_local_rank("pp")
        half = plan.model.num_layers // 2
        for i in range(plan.model.num_layers):
            if (i < half) != (rank == 0):
                del model.layers[str(i)]
        if rank == 0:
            model.norm = model.head = None
        else:
            model.embed = None
        schedule = Schedule1F1B(
            PipelineStage(model, rank, 2, device, group=mesh.get_group("pp")), n_mb, loss_fn=loss_fn
        )
    if p.tp > 1:
        parallelize_module(
            model,
            mesh["tp"],
            {
                "embed.tok": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
                "layers.*.attn_norm": SequenceParallel(),
                "layers.*.mlp_norm": SequenceParallel(),
                "layers.*.attn": PrepareModuleInput(
                    input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True
                ),
                "layers.*.mlp": PrepareModuleInput(
                    input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True
                ),
                "layers.*.attn.wq": ColwiseParallel(),
                "layers.*.attn.wk": ColwiseParallel(),
                "layers.*.attn.wv": ColwiseParallel(),
                "layers.*.attn.wo": RowwiseParallel(output_layouts=Shard(1)),
                "layers.*.mlp.w1": ColwiseParallel(),
                "layers.*.mlp.w3": ColwiseParallel(),
                "layers.*.mlp.w2": RowwiseParallel(output_layouts=Shard(1)),
                "norm": SequenceParallel(),
                "head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
            },
        )
    if p.dp > 1:
        for block in model.layers.values():
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)

    def step(x, y):
        if p.pp > 1:
            losses = []
            if rank == 0:
                schedule.step(x, return_outputs=False)
            else:
                schedule.step(target=y, losses=losses, return_outputs=False)
        else:
            for i, (xm, ym) in enumerate(zip(x.chunk(n_mb), y.chunk(n_mb))):
                if hasattr(model, "set_requires_gradient_sync"):
                    model.set_requires_gradient_sync(i == n_mb - 1)
                (loss_fn(model(xm), ym) / n_mb).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def worker(steps: int) -> None:
    import torch
    import torch.distributed as dist

    from runtime.data import SyntheticTokens
    from runtime.job import Job, TrainConfig
    from runtime.testing import make_plan

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    device = torch.device("cpu")
    rows = []
    for name, model, par in CONFIGS:
        plan = make_plan(model, **par)
        job = Job.build(plan, TrainConfig(max_grad_norm=None))  # no clipping: the hand-written loop has none
        manual = hand_written(plan, job.mesh, device)
        data = SyntheticTokens(plan.model.vocab_size)
        times = {"runtime": [], "hand-written": []}
        for s in range(steps):
            x, y = data.batch(s, 8, 32)
            x, y = job.dp_slice(x), job.dp_slice(y)
            for label in ("runtime", "hand-written") if s % 2 else ("hand-written", "runtime"):
                dist.barrier()
                t0 = time.perf_counter()
                if label == "runtime":
                    job.forward_backward(x, y)
                    job.optimizer_step()
                else:
                    manual(x, y)
                t = torch.tensor(time.perf_counter() - t0)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                times[label].append(float(t))
        med = {k: statistics.median(v[2:]) for k, v in times.items()}  # skip 2 warm-up steps
        rows.append((name, med["runtime"], med["hand-written"]))
    if dist.get_rank() == 0:
        print(f"{'configuration':28s} {'runtime s':>10s} {'hand-written s':>15s} {'overhead':>9s}")
        for name, rt, hw in rows:
            print(f"{name:28s} {rt:10.4f} {hw:15.4f} {100 * (rt / hw - 1):8.1f}%")
        print(
            f"(median of {steps - 2} steps after 2 warm-up steps, slowest of {dist.get_world_size()} ranks; "
            "runtime includes its global-loss all_reduce)"
        )
    dist.destroy_process_group()


def predicted_vs_measured(steps: int) -> None:
    """One process, pp = tp = dp = 1: the step time a measured CPU profile implies (Σ over layers of
    measured forward + backward, times the micro-batch count; the optimizer and the loss are not in
    it) beside the runtime's measured step, and the planner's estimate (``planner.estimate_plan``) given
    that profile."""
    import torch
    import torch.distributed as dist

    import planner
    from planner.specs import ClusterSpec, ParallelPins, PlanRequest
    from profiler.model_profile import profile_model
    from runtime.data import SyntheticTokens
    from runtime.job import Job, TrainConfig
    from runtime.testing import make_plan

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    print("\npredicted (measured CPU profile) vs measured step, one process, fp32, batch 8 × 32")
    print(f"{'model':12s} {'mbs':>4s} {'profile sum s':>14s} {'measured s':>11s} {'ratio':>7s}  planner estimate")
    for model, mbs in (("tiny-gpt", 1), ("tiny-llama", 2)):
        plan = make_plan(model, micro_batch_size=mbs)
        profile = profile_model(plan.model, device="cpu", micro_batch_sizes=(mbs,), tps=(1,), seq_len=32, dtype="fp32")
        per_mb = 0.0
        for layer in profile.layers:
            count = plan.model.num_layers if layer.kind == "transformer_block" else 1
            per_mb += count * ((layer.fwd_time_s or 0.0) + (layer.bwd_time_s or 0.0))
        predicted = per_mb * (8 // mbs)
        job = Job.build(plan, TrainConfig(max_grad_norm=None))
        data, times = SyntheticTokens(plan.model.vocab_size), []
        for s in range(steps):
            x, y = data.batch(s, 8, 32)
            t0 = time.perf_counter()
            job.forward_backward(x, y)
            job.optimizer_step()
            times.append(time.perf_counter() - t0)
        measured = statistics.median(times[2:])
        est = planner.estimate_plan(
            PlanRequest(
                model=plan.model,
                cluster=ClusterSpec(gpu=plan.gpu, num_nodes=1, gpus_per_node=1),
                training=plan.training,
                parallel=ParallelPins(**plan.parallel.model_dump()),
                profile=profile,
            )
        ).estimate.step_time_s
        planner_text = f"{est:.4g} s (ratio {est / measured:.2f})"
        print(f"{model:12s} {mbs:4d} {predicted:14.4f} {measured:11.4f} {predicted / measured:7.2f}  {planner_text}")
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--predict", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if "RANK" in os.environ:
        predicted_vs_measured(args.steps) if args.predict else worker(args.steps)
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    code = subprocess.call(
        [*launch, f"--nproc-per-node={args.nproc}", __file__, "--steps", str(args.steps)], env=env, cwd=ROOT
    )
    code = code or subprocess.call(
        [*launch, "--nproc-per-node=1", __file__, "--steps", str(args.steps), "--predict"], env=env, cwd=ROOT
    )
    sys.exit(code)


if __name__ == "__main__":
    main()
