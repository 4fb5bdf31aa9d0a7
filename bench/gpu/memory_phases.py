"""Allocated GPU memory through one training step of the bundled runtime, phase by phase (pp = 1 plans).

Runs a plan's job (``runtime.job.Job``; one process) for a warm-up step, then one step with the runtime's own
micro-batch loop (``Job.forward_backward``'s, unrolled) and prints, per phase, the allocated memory after it
and the peak during it: which phase sets the step's peak and what the parameter, gradient and optimizer
states weigh. ``python bench/gpu/memory_phases.py --plan bench/gpu/plan-mbs1.json --out mem.json``
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import torch
    import torch.distributed as dist

    from planner.specs import Plan
    from runtime.data import SyntheticTokens
    from runtime.job import Job, TrainConfig, loss_fn

    cuda = torch.cuda.is_available()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if cuda:
        torch.cuda.set_device(0)
    dist.init_process_group("cpu:gloo,cuda:nccl" if cuda else "gloo")
    plan = Plan.model_validate_json(Path(args.plan).read_text())
    job = Job.build(plan, TrainConfig(seed=0, lr=1e-3, max_grad_norm=1.0))
    data = SyntheticTokens(plan.model.vocab_size, 0)
    gb, seq = plan.training.global_batch_size, plan.training.seq_len
    rows: list[dict] = []

    def mark(phase: str) -> None:
        if cuda:
            torch.cuda.synchronize()
            rows.append(
                {
                    "phase": phase,
                    "allocated_gib": torch.cuda.memory_allocated() / 2**30,
                    "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
                }
            )
            torch.cuda.reset_peak_memory_stats()
        else:
            rows.append({"phase": phase})

    mark("built")
    x, y = data.batch(0, gb, seq)
    job.train_step(x, y)
    mark("warm-up step")
    x, y = data.batch(1, gb, seq)
    (model,) = job.chunks.values()
    n = job.num_microbatches
    for i, (xi, yi) in enumerate(zip(x.to(job.device).chunk(n), y.to(job.device).chunk(n))):
        if hasattr(model, "set_requires_gradient_sync"):
            model.set_requires_gradient_sync(i == n - 1)
        logits = model(xi)
        mark(f"mb{i} forward")
        loss = loss_fn(logits, yi) / n
        mark(f"mb{i} loss")
        del logits
        loss.backward()
        del loss
        mark(f"mb{i} backward")
    grads = [getattr(p.grad, "_local_tensor", p.grad) for _, p in job.named_parameters() if p.grad is not None]
    grad_info = {
        "grad_gib": sum(g.numel() * g.element_size() for g in grads) / 2**30,
        "grad_dtypes": sorted({str(g.dtype) for g in grads}),
        "param_dtypes": sorted({str(getattr(p, "_local_tensor", p).dtype) for _, p in job.named_parameters()}),
    }
    job.clip_grad_norm()
    mark("clip")
    job.optimizer_step()
    mark("optimizer step")
    params = sum(p.numel() for _, p in job.named_parameters())
    result = {"plan": args.plan, "parameters": params, "microbatches": n, "phases": rows, **grad_info}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"{params / 1e9:.3f} B parameters, {n} micro-batches; after the backward: {grad_info}")
    for r in rows:
        print(
            f"  {r['phase']:16s} allocated {r.get('allocated_gib', 0):7.2f} GiB  peak during {r.get('peak_gib', 0):7.2f} GiB"
        )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
