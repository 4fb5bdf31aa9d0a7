"""Profiler speed and what it measures, as printed figures (not a timed test).

- Llama 3 405B on meta (target: within a minute): wall time for 1 seq length × TP {1,2,4,8} × mbs {1,2,4}.
- gpt3-125m layers on CPU: forward/backward time and the achieved FLOP/s (counted FLOPs ÷ time).
- `meshplan profile cluster`, 2 gloo processes on this host: per collective, the measured bandwidth at
  the largest size, the fitted α-β bandwidth and their ratio, and how much longer 256× the data takes
  (figures that move with the machine's load, so they are printed here, never asserted in tests).

Run: python bench/bench_profile.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from planner.specs import NetworkProfile  # noqa: E402
from planner.specs.catalog import MODELS  # noqa: E402
from profiler.model_profile import profile_model  # noqa: E402


def main() -> None:
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    start = time.perf_counter()
    profile_model(MODELS["tiny-llama"], device="meta", micro_batch_sizes=[1], tps=[1], seq_len=16)
    print(f"first-call warm-up (imports, fake-tensor mode): {time.perf_counter() - start:.1f} s")

    for name, seq in (("llama3-405b", 8192), ("gpt3-175b", 2048)):
        start = time.perf_counter()
        prof = profile_model(
            MODELS[name],
            device="meta",
            micro_batch_sizes=[1, 2, 4],
            tps=[1, 2, 4, 8],
            seq_len=seq,
            sequence_parallel=True,
        )
        elapsed = time.perf_counter() - start
        print(
            f"{name} meta, seq {seq}, tp 1,2,4,8 (+SP), mbs 1,2,4: {len(prof.layers)} records in {elapsed:.1f} s "
            f"({elapsed / len(prof.layers) * 1e3:.0f} ms/record)"
        )

    prof = profile_model(
        MODELS["gpt3-125m"],
        device="cpu",
        micro_batch_sizes=[1, 4],
        tps=[1],
        seq_len=512,
        dtype="fp32",
        warmup=1,
        repeats=3,
    )
    print("gpt3-125m on CPU, fp32, seq 512:")
    for p in prof.layers:
        if p.fwd_flops == 0:
            print(
                f"  {p.kind:18s} mbs {p.micro_batch_size}: fwd {p.fwd_time_s * 1e3:7.2f} ms  bwd {p.bwd_time_s * 1e3:7.2f} ms"
            )
            continue
        print(
            f"  {p.kind:18s} mbs {p.micro_batch_size}: fwd {p.fwd_time_s * 1e3:7.2f} ms ({p.fwd_flops / p.fwd_time_s / 1e9:6.1f} GFLOP/s)"
            f"  bwd {p.bwd_time_s * 1e3:7.2f} ms ({p.bwd_flops / p.bwd_time_s / 1e9:6.1f} GFLOP/s)"
            f"  peak {p.peak_memory_bytes / 2**20:6.1f} MiB"
        )

    cluster()


def cluster() -> None:
    root = Path(__file__).resolve().parents[1]
    sizes = [4096, 65536, 1048576]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "net.json"
        env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
        start = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "api.cli",
                "profile",
                "cluster",
                "--nproc-per-node",
                "2",
                "--backend",
                "gloo",
                "--sizes",
                ",".join(map(str, sizes)),
                "--iters",
                "5",
                "--out",
                str(out),
            ],
            cwd=root,
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        elapsed = time.perf_counter() - start
        prof = NetworkProfile.model_validate_json(out.read_text())
    print(f"profile cluster, 2 gloo processes, sizes {sizes}, 5 iterations: {elapsed:.1f} s")
    for f in prof.links:
        (small, t_small), (big, t_big) = f.samples[0], f.samples[-1]
        measured = big / t_big / 1e9
        print(
            f"  {f.collective:14s} α {f.alpha_s * 1e6:7.1f} µs  measured {measured:6.2f} GB/s at {big} B  "
            f"fitted {f.bandwidth_GBps:6.2f} GB/s (×{f.bandwidth_GBps / measured:.2f})  "
            f"t({big} B) / t({small} B) = {t_big / t_small:.1f}"
        )


if __name__ == "__main__":
    main()
