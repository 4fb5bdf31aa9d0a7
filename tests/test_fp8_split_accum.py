"""The backward FP8 GEMMs' split accumulator on sm_90 (cost model 56, ``planner.pricing.fp8_accum``): torchao and
Transformer Engine run the input- and weight-gradient FP8 GEMMs without fast accumulation, measured 1.1×–1.2×
slower (pytorch/ao issue 2377): their compute time × 1.15 on H100/H200, the forward GEMM and Blackwell unchanged.
Checked against hand formulas with the literal entries of XLA's sm_90 table (as ``test_fp8_gemm_shape``)."""

from __future__ import annotations

import pytest

from planner.pricing.gemm_table import IN_STEP_SLOWDOWN
from planner.pricing.gpu import gemm_time, linear_times
from planner.workload.fp8 import fp8_gemm_shapes
from tests.test_fp8_gemm_shape import ceiling_s, ctx_of, hbm_s

# (M, N, K, the table's TFLOP/s at (M, N, K/2), which bound sets the fast-accumulation time)
CASES = [
    (4096, 4096, 1024, 551.8, "table"),
    (1024, 2048, 512, 144.3, "table"),
    (2048, 1024, 2048, 386.8, "table"),
    (4096, 4096, 8192, 780.2, "ceiling"),
]


@pytest.mark.parametrize(("m", "n", "k", "tflops", "bound"), CASES)
def test_h100_backward_fp8_gemm_is_115_percent_of_the_forward_compute(m, n, k, tflops, bound):
    ctx = ctx_of("h100-sxm5-80gb")
    table = 2 * m * n * (k / 2) / (tflops * 1e12)
    compute = max(table, ceiling_s(m, n, k, 1978.9, 132)) * IN_STEP_SLOWDOWN  # at a step's clock
    hbm = hbm_s(m, n, k, 3350.0)
    assert gemm_time(ctx, m, n, k, fp8=True) == pytest.approx(max(compute, hbm), rel=1e-9)
    assert gemm_time(ctx, m, n, k, fp8=True, backward=True) == pytest.approx(max(1.15 * compute, hbm), rel=1e-9)
    assert (table > ceiling_s(m, n, k, 1978.9, 132)) == (bound == "table")


@pytest.mark.parametrize(
    ("gpu", "m", "n", "k"), [("b200-sxm-192gb", 4096, 4096, 1024), ("h100-sxm5-80gb", 4096, 4096, 8192)]
)
def test_no_slowdown_off_sm90_or_for_16bit_gemms(gpu, m, n, k):
    ctx = ctx_of(gpu)
    if gpu.startswith("b200"):  # no fast-accumulation mode on sm_100 (TE PR 2748)
        assert gemm_time(ctx, m, n, k, fp8=True, backward=True) == gemm_time(ctx, m, n, k, fp8=True)
    assert gemm_time(ctx, m, n, k, backward=True) == gemm_time(ctx, m, n, k)  # 16-bit: no split accumulator


def test_layer_backward_is_the_sum_of_split_accumulator_gemms():
    ctx = ctx_of("h100-sxm5-80gb")
    tokens, tp = 8192, 1
    f, b, _ = linear_times(ctx, "transformer_block", tokens, tp)
    shapes = fp8_gemm_shapes(ctx, "transformer_block", tokens, tp)
    assert all(fp8 for *_, fp8 in shapes)
    fwd = sum(gemm_time(ctx, m, n, k, c, fp8=True) for m, n, k, c, _ in shapes)
    slow = sum(
        gemm_time(ctx, m, k, n, c, fp8=True, backward=True) + gemm_time(ctx, k, n, m, c, fp8=True, backward=True)
        for m, n, k, c, _ in shapes
    )
    fast = sum(gemm_time(ctx, m, k, n, c, fp8=True) + gemm_time(ctx, k, n, m, c, fp8=True) for m, n, k, c, _ in shapes)
    assert f == pytest.approx(fwd, rel=1e-12)
    assert b == pytest.approx(slow, rel=1e-12)
    assert 1.0 < b / fast <= 1.15 + 1e-9  # the large 8B GEMMs are compute-bound: close to the full 1.15
    assert b / fast > 1.14
