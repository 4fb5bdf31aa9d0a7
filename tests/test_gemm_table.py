"""GEMM time by shape on sm_90 from XLA's measured table (``planner.pricing.gemm_table``): exact at the table's
points (the TFLOP/s below are read off openxla/xla ``xla/service/gpu/model/matmul_interpolator_data.h``, key
``sm_90``, ``b: 1``, ``bf16xbf16->bf16``, rounded to 0.1), interpolated in log space between them, and the
out-of-grid rules checked against a hand computation from the same numbers."""

from __future__ import annotations

import math

import pytest

from planner.answer.request import context, parse_request
from planner.pricing import gpu as kernels
from planner.pricing.gemm_table import REFERENCE_PEAK_TFLOPS, table_efficiency

PEAK = 989.4  # H100 SXM5 dense BF16 TFLOP/s (datasheet)


@pytest.mark.parametrize(
    ("m", "n", "k", "tflops"),
    [
        (4096, 1024, 1024, 497.6),
        (1024, 2048, 1024, 384.0),
        (4096, 4096, 4096, 780.2),
        (4096, 4096, 2048, 735.6),
        (4096, 4096, 256, 398.6),
        (256, 256, 256, 6.7),
        (1024, 4096, 4096, 751.9),
    ],
)
def test_exact_at_the_table_points(m: int, n: int, k: int, tflops: float):
    assert REFERENCE_PEAK_TFLOPS == PEAK
    assert table_efficiency(m, n, k) == pytest.approx(tflops / PEAK, abs=1e-9)


def test_log_space_midpoints():
    """Halfway in log2 between two grid points is the mean of their fractions (trilinear in log M, N, K)."""
    mid = math.sqrt(2048 * 4096)
    assert table_efficiency(round(mid), 4096, 4096) == pytest.approx(
        (752.3 + 780.2) / 2 / PEAK, rel=2e-4
    )  # round() moves it off the exact midpoint by < 1e-4 in log2
    assert table_efficiency(4096, 4096, 3000) == pytest.approx(
        (735.6 + (780.2 - 735.6) * math.log2(3000 / 2048)) / PEAK, rel=1e-9
    )


def test_k_beyond_the_grid_is_fixed_plus_linear_tile_time():
    """K 8,192 and 14,336 at 4096×4096: time per unit of M·N a + b·K through K 2,048 and 4,096."""
    t1, t2 = 2048 / (735.6 / PEAK), 4096 / (780.2 / PEAK)
    b = (t2 - t1) / 2048
    a = t1 - 2048 * b
    for k in (8192, 14336):
        assert table_efficiency(4096, 4096, k) == pytest.approx(k / (a + b * k), rel=1e-9)
    assert 780.2 / PEAK < table_efficiency(4096, 4096, 14336) < 1 / b


@pytest.mark.parametrize(
    ("shape", "same_tiles"),
    [
        ((16384, 512, 4096), (4096, 2048, 4096)),  # M·N kept: 4096 × 2048
        ((1024, 16384, 4096), (4096, 4096, 4096)),  # 4096 × 4096 (the smaller side widened to match)
        ((65536, 65536, 2048), (4096, 4096, 2048)),  # past 4096×4096: saturated
        ((16384, 32, 4096), (4096, 128, 4096)),  # 4096 × 128, then below 256: the time of 256
        ((4096, 4096, 128), (4096, 4096, 128)),
    ],
)
def test_m_n_beyond_and_below_the_grid(shape, same_tiles):
    m, n, k = same_tiles
    expect = table_efficiency(min(m, 4096), max(n, 256), max(k, 256)) * min(n / 256, 1) * min(k / 256, 1)
    assert table_efficiency(*shape) == pytest.approx(expect, rel=1e-9)


def test_below_the_grid_keeps_the_time_of_256():
    assert table_efficiency(4096, 4096, 128) == pytest.approx(398.6 / PEAK / 2, rel=1e-9)


def _ctx(gpu: str):
    req = {
        "model": "llama3-8b",
        "cluster": {"gpu": gpu, "num_nodes": 1, "gpus_per_node": 8},
        "training": {"global_batch_size": 8, "seq_len": 4096, "precision": "bf16", "stack": "megatron"},
        "parallel": {"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 1},
    }
    return context(parse_request(req))


@pytest.mark.parametrize(
    ("m", "n", "k"), [(4096, 4096, 512), (4096, 1024, 1024), (8192, 4096, 14336), (16384, 14336, 4096)]
)
def test_gemm_time_is_the_lower_of_the_two_rates_at_a_steps_clock_on_h100(m: int, n: int, k: int):
    ctx = _ctx("h100-sxm5-80gb")
    wave = kernels.wave_efficiency(m, n, 132)
    rate = min(0.80 * wave, table_efficiency(m, n, k))
    compute = 2.0 * m * n * k / (PEAK * 1e12 * rate) * 1.062  # at a training step's clock (IN_STEP_SLOWDOWN)
    assert kernels.gemm_time(ctx, m, n, k) == pytest.approx(
        max(compute, kernels.hbm_time(ctx, (m * k + k * n + m * n) * 2))
    )


def test_a_gpu_without_a_table_keeps_the_wave_model():
    ctx = _ctx("a100-sxm4-80gb")
    m, n, k = 4096, 4096, 512
    compute = 2.0 * m * n * k / (312e12 * 0.86 * kernels.wave_efficiency(m, n, 108))
    assert kernels.gemm_time(ctx, m, n, k) == pytest.approx(
        max(compute, kernels.hbm_time(ctx, (m * k + k * n + m * n) * 2))
    )
