"""Microbenchmarks of one GPU for the cost model's per-op tables (issue 11, "Also"): GEMM by shape, attention
by kernel and sequence length, HBM bandwidth by transfer size, and the host's kernel-launch rate.

Runs with PyTorch alone (no meshplan import), so that it runs on a bare GPU machine:
``python bench/gpu_microbench.py --out h200.json``. ``bench/gpu_calibration.py`` then compares every
measurement with what ``planner.pricing.gpu`` prices for the same op on the catalog GPU and fits a calibration
(``planner.specs.Calibration``) for that GPU from them.

What is measured (bf16, CUDA events, the median of three timed loops of ≥ ``--loop-ms`` each after a warm-up):

* GEMMs: the linear layers of Llama 3 8B and 70B blocks on one TP rank (TP 1, 2, 4, 8) at 4,096 and 16,384
  tokens per micro-batch, forward (tokens × out × in) and both backward GEMMs (data gradient, weight
  gradient), and square products 1,024…16,384 — the shapes ``planner.workload.ops.gemm_shapes`` prices.
* Attention: ``torch.nn.functional.scaled_dot_product_attention``, causal, forward and forward + backward,
  at batch · seq = 16,384 tokens and hidden 2,048 (head dim 64 and 128), seq 512…16,384 — the setup of
  FlashAttention-2's published benchmark (``planner.pricing.gpu.FLASH_CAUSAL_TFLOPS``), by SDPA backend.
* HBM: ``y.copy_(x)`` from 64 KiB to 2 GiB (bytes read + written) — ``planner.pricing.gpu.HBM_EFFICIENCY``.
* Launch: a one-element in-place add launched 5,000 times back to back: the host's µs per kernel
  (``planner.pricing.gpu.GPU_LAUNCH_US``).

``--device cpu --quick`` is a dry run of the script on small shapes (no figure of it means anything).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F

#: Llama 3 8B and 70B (Meta, "The Llama 3 Herd of Models", Table 3): hidden, query heads, KV heads, FFN, head dim.
MODELS = {"llama3-8b": (4096, 32, 8, 14336, 128), "llama3-70b": (8192, 64, 8, 28672, 128)}


def layer_gemms(tokens: int, tp: int, dims: tuple[int, int, int, int, int]) -> list[tuple[str, int, int, int]]:
    """(op, M, N, K) of one block's linear GEMMs on one TP rank: forward Y = X·W (tokens × out × in), the
    data gradient (tokens × in × out) and the weight gradient (in × out × tokens)."""
    h, heads, kv, ffn, d = dims
    q, k, f = heads * d // tp, kv * d // tp, ffn // tp
    linears = {"wq": (q, h), "wk": (k, h), "wo": (h, q), "w1": (f, h), "w2": (h, f)}  # w3 as w1
    out = []
    for name, (n, kk) in linears.items():
        out += [(f"{name}.fwd", tokens, n, kk), (f"{name}.dgrad", tokens, kk, n), (f"{name}.wgrad", kk, n, tokens)]
    return out


class Timer:
    """Seconds per call of ``fn`` on ``device``: CUDA events around loops of ``reps`` calls (CPU: perf_counter)."""

    def __init__(self, device: torch.device, loop_ms: float):
        self.device, self.loop_s = device, loop_ms / 1e3

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def loop(self, fn, reps: int) -> float:
        if self.device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3 / reps
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t) / reps

    def __call__(self, fn) -> float:
        fn()  # warm-up (allocator, cuBLAS heuristics, autotuning)
        self.sync()
        one = self.loop(fn, 1)
        reps = max(1, min(10_000, round(self.loop_s / max(one, 1e-7))))
        self.loop(fn, reps)
        return statistics.median(self.loop(fn, reps) for _ in range(3))


def bench_gemms(timer: Timer, dtype: torch.dtype, device: torch.device, quick: bool) -> list[dict]:
    shapes: list[tuple[str, int, int, int]] = []
    for model, dims in MODELS.items():
        for tp in (1, 8) if quick else (1, 2, 4, 8):
            for tokens in (512,) if quick else (4096, 16384):
                shapes += [(f"{model} tp{tp} t{tokens} {op}", m, n, k) for op, m, n, k in layer_gemms(tokens, tp, dims)]
    for s in (256, 512) if quick else (1024, 2048, 4096, 8192, 16384):
        shapes.append((f"square {s}", s, s, s))
    out = []
    for label, m, n, k in shapes:
        if quick:
            m, n, k = max(1, m // 16), max(1, n // 16), max(1, k // 16)
        a = torch.randn(m, k, dtype=dtype, device=device)
        b = torch.randn(k, n, dtype=dtype, device=device)
        t = timer(lambda a=a, b=b: torch.mm(a, b))
        out.append({"label": label, "m": m, "n": n, "k": k, "seconds": t, "tflops": 2 * m * n * k / t / 1e12})
    return out


def sdpa_backends() -> dict[str, object]:
    from torch.nn.attention import SDPBackend

    names = {"default": None, "flash": SDPBackend.FLASH_ATTENTION}
    if hasattr(SDPBackend, "CUDNN_ATTENTION"):
        names["cudnn"] = SDPBackend.CUDNN_ATTENTION
    return names


def bench_attention(timer: Timer, dtype: torch.dtype, device: torch.device, quick: bool) -> list[dict]:
    from torch.nn.attention import sdpa_kernel

    tokens, hidden = (2048, 256) if quick else (16384, 2048)
    out = []
    for backend, kind in (sdpa_backends() if device.type == "cuda" else {"default": None}).items():
        for d in (64, 128):
            for seq in (512, 1024) if quick else (512, 1024, 2048, 4096, 8192, 16384):
                b, h = tokens // seq, hidden // d
                q, k, v = (torch.randn(b, h, seq, d, dtype=dtype, device=device, requires_grad=True) for _ in range(3))
                grad = torch.randn(b, h, seq, d, dtype=dtype, device=device)

                def fwd(q=q, k=k, v=v):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)

                def fwd_bwd(q=q, k=k, v=v, grad=grad, fwd=fwd):
                    q.grad = k.grad = v.grad = None
                    fwd().backward(grad)

                flops = 4 * b * seq * seq * d * h / 2  # FlashAttention's causal count: half the square
                row = {"backend": backend, "head_dim": d, "seq": seq, "batch": b, "heads": h}
                try:
                    ctx = sdpa_kernel(kind) if kind is not None else _null()
                    with ctx:
                        tf, tfb = timer(fwd), timer(fwd_bwd)
                except RuntimeError as exc:  # backend not available for this shape/dtype/GPU
                    row["error"] = str(exc).splitlines()[0][:200]
                else:
                    row |= {"fwd_s": tf, "fwd_bwd_s": tfb, "fwd_tflops": flops / tf / 1e12}
                    row["fwd_bwd_tflops"] = 3.5 * flops / tfb / 1e12  # backward = 2.5 × forward FLOPs
                out.append(row)
    return out


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def bench_copies(timer: Timer, device: torch.device, quick: bool) -> list[dict]:
    out = []
    top = 24 if quick else 31
    for p in range(16, top + 1):
        nbytes = 1 << p
        x = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=device).normal_()
        y = torch.empty_like(x)
        t = timer(lambda x=x, y=y: y.copy_(x))
        out.append({"bytes": nbytes, "moved_bytes": 2 * nbytes, "seconds": t, "GBps": 2 * nbytes / t / 1e9})
    return out


def bench_launch(device: torch.device, n: int = 5000) -> dict:
    """Host µs per kernel of a stream of tiny kernels (the device finishes each before the next is queued)."""
    x = torch.zeros(1, device=device)
    for _ in range(100):
        x.add_(1)
    best = float("inf")
    for _ in range(3):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            x.add_(1)
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t) / n)
    return {"kernels": n, "us_per_kernel": best * 1e6}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", required=True)
    ap.add_argument("--loop-ms", type=float, default=20.0)
    ap.add_argument("--quick", action="store_true", help="small shapes: a dry run of the script")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    dtype = torch.bfloat16
    timer = Timer(device, args.loop_ms)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    result: dict = {
        "device": name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "dtype": "bf16",
        "quick": args.quick,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        result |= {"sm_count": p.multi_processor_count, "memory_bytes": p.total_memory}
    for key, fn in (
        ("launch", lambda: bench_launch(device)),
        ("copies", lambda: bench_copies(timer, device, args.quick)),
        ("gemms", lambda: bench_gemms(timer, dtype, device, args.quick)),
        ("attention", lambda: bench_attention(timer, dtype, device, args.quick)),
    ):
        t = time.perf_counter()
        result[key] = fn()
        print(
            f"{key}: {len(result[key]) if isinstance(result[key], list) else 1} in {time.perf_counter() - t:.1f} s",
            flush=True,
        )
        with open(args.out, "w") as f:  # after each part: a later failure keeps the earlier ones
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
