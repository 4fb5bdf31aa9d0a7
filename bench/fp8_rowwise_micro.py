"""The planner's FP8 rowwise linear against torchao's own measured table (cost model 56's check, docs/validation.md).

torchao's README "Rowwise scaling" (``docs/static/fp8-rowwise-perf.png`` at 6243040): the speedup of LayerNorm →
Linear → Sigmoid, forward + backward, with the linear in rowwise FP8 against bf16 on H100, by forward (M, K, N). Priced
here on the H100 SXM5: the three GEMMs of each precision (``gpu.gemm_time``; the FP8 backward ones with the split
accumulator), the rowwise casts (``workload.fp8.linear_cast_ops``), and the LayerNorm and Sigmoid as HBM passes common
to both (forward read + write, backward two reads + a write, 2 bytes an element). Prints the measured speedup, the
predicted one and their ratio.

Run: ``python bench/fp8_rowwise_micro.py``.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.answer.request import context, parse_request  # noqa: E402
from planner.pricing.gpu import gemm_time, hbm_time, ops_time  # noqa: E402
from planner.workload.fp8 import linear_cast_ops  # noqa: E402
from planner.workload.ops import Linear  # noqa: E402

#: (M, K, N): the measured speedup, read off torchao's table.
MEASURED = {
    (4096, 4096, 4096): 0.84,
    (4096, 4096, 16384): 1.01,
    (4096, 8192, 8192): 1.01,
    (4096, 8192, 32768): 1.13,
    (8192, 1024, 8192): 0.77,
    (8192, 4096, 4096): 1.00,
    (8192, 4096, 16384): 1.17,
    (8192, 8192, 2048): 0.85,
    (8192, 8192, 8192): 1.20,
    (8192, 16384, 4096): 1.03,
    (16384, 2048, 8192): 1.05,
    (16384, 4096, 4096): 1.02,
    (16384, 8192, 8192): 1.33,
    (16384, 8192, 32768): 1.49,
    (16384, 16384, 16384): 1.42,
    (32768, 8192, 8192): 1.41,
    (32768, 16384, 32768): 1.73,
}


def main() -> None:
    req = {
        "model": "llama3-8b",
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
        "training": {
            "global_batch_size": 64,
            "seq_len": 8192,
            "precision": "fp8",
            "fp8_recipe": "rowwise",
            "stack": "torchtitan",
        },
        "parallel": {"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 1, "zero_stage": 3, "recompute": "full"},
    }
    ctx = context(parse_request(req))
    ratios = []
    for (m, k, n), measured in sorted(MEASURED.items()):
        bf16 = gemm_time(ctx, m, n, k) + gemm_time(ctx, m, k, n) + gemm_time(ctx, k, n, m)
        fp8 = gemm_time(ctx, m, n, k, fp8=True)
        fp8 += gemm_time(ctx, m, k, n, fp8=True, backward=True) + gemm_time(ctx, k, n, m, fp8=True, backward=True)
        fwd, bwd = linear_cast_ops(ctx, [Linear("x", n, k, 0, "x", 0, fp8=True)], m)
        casts = ops_time(ctx, fwd) + ops_time(ctx, bwd)
        other = (
            hbm_time(ctx, 4 * m * k) + hbm_time(ctx, 6 * m * k) + hbm_time(ctx, 4 * m * n) + hbm_time(ctx, 6 * m * n)
        )
        predicted = (bf16 + other) / (fp8 + casts + other)
        ratios.append(predicted / measured)
        print(f"M {m:6d} K {k:6d} N {n:6d}  measured {measured:.2f}  predicted {predicted:.2f}  ratio {ratios[-1]:.2f}")
    print(f"ratio median {statistics.median(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f}")


if __name__ == "__main__":
    main()
