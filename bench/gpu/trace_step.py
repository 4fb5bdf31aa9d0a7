"""Where one GPU training step of the bundled runtime spends its time and memory (run by bench/gpu/check.sh).

Builds the plan's job as ``meshplan run`` does (``runtime.job.Job``; one process), runs warm-up steps, then
one step under ``torch.profiler`` and prints the GPU kernel time by class (GEMM, attention, FSDP2 casts and
copies, element-wise, optimizer, reductions), the GPU's busy time against the step's wall time, and the
allocated memory at the points that set the peak (after build, after the first micro-batch's forward, peak).
``python bench/gpu/trace_step.py --plan bench/gpu/plan-mbs1.json --out trace.json``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

#: Kernel name patterns → class, first match wins (CUDA kernel names of cuBLAS/CUTLASS, FlashAttention/cuDNN,
#: PyTorch's ATen kernels, FSDP2's foreach copy-in/out, NCCL).
CLASSES = [
    ("gemm", r"gemm|cutlass|sm90_xmma|nvjet|cublas"),
    ("attention", r"flash|fmha|cudnn|attention|sdpa"),
    ("nccl", r"nccl"),
    ("optimizer", r"adam|multi_tensor_apply|foreach"),
    ("copy/cast", r"copy|cast|memcpy|chunk_cat|split_with_sizes|to_copy|CatArrayBatched"),
    ("reduce", r"reduce|norm|softmax|cross_entropy|nll|log_softmax|sum"),
    ("elementwise", r"elementwise|vectorized|unrolled|silu|mul|add|fill"),
]


#: ``record_function`` ranges the profiler also lists on the GPU's timeline (they span kernels counted already).
ANNOTATIONS = ("FSDP::", "Optimizer.", "ProfilerStep", "## ")


def classify(name: str) -> str:
    low = name.lower()
    return next((c for c, pat in CLASSES if re.search(pat, low)), "other")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()

    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    from planner.specs import Plan
    from runtime.data import SyntheticTokens
    from runtime.job import Job, TrainConfig

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(0)
    dist.init_process_group("cpu:gloo,cuda:nccl")
    plan = Plan.model_validate_json(Path(args.plan).read_text())
    job = Job.build(plan, TrainConfig(seed=0, lr=1e-3, max_grad_norm=1.0))
    mem = {"after_build_gib": torch.cuda.memory_allocated() / 2**30}
    data = SyntheticTokens(plan.model.vocab_size, 0)
    gb, seq = plan.training.global_batch_size, plan.training.seq_len
    walls = []
    for step in range(args.warmup):
        x, y = data.batch(step, gb, seq)
        torch.cuda.synchronize()
        t = time.perf_counter()
        job.train_step(x, y)
        torch.cuda.synchronize()
        walls.append(time.perf_counter() - t)
    mem["after_warmup_gib"] = torch.cuda.memory_allocated() / 2**30
    mem["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    mem["reserved_peak_gib"] = torch.cuda.max_memory_reserved() / 2**30
    x, y = data.batch(args.warmup, gb, seq)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t = time.perf_counter()
        job.train_step(x, y)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t
    by_class: dict[str, float] = {}
    top: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type.name != "CUDA" or e.name.startswith(ANNOTATIONS):
            continue
        us = e.time_range.elapsed_us()  # a kernel's own duration
        c = classify(e.name)
        by_class[c] = by_class.get(c, 0.0) + us / 1e6
        t_ = top.setdefault(e.name[:120], [0.0, 0])
        t_[0] += us / 1e6
        t_[1] += 1
    busy = sum(by_class.values())
    result = {
        "plan": args.plan,
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "warmup_walls_s": walls,
        "profiled_wall_s": wall,
        "gpu_busy_s": busy,
        "by_class_s": dict(sorted(by_class.items(), key=lambda kv: -kv[1])),
        "top_kernels": sorted(([k, v[0], v[1]] for k, v in top.items()), key=lambda r: -r[1])[:40],
        "memory": mem,
    }
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"wall {wall:.3f} s (warm-up steps {', '.join(f'{w:.3f}' for w in walls)}), GPU busy {busy:.3f} s")
    for c, s in result["by_class_s"].items():
        print(f"  {c:12s} {s * 1e3:9.1f} ms")
    for name, s, n in result["top_kernels"][:15]:
        print(f"  {s * 1e3:8.1f} ms {n:5d}× {name}")
    print("memory:", {k: round(v, 2) for k, v in mem.items()})
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
