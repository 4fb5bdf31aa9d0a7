"""FP8 GEMM time by shape on sm_90 (cost model 50, ``planner.pricing.gpu.fp8_table_seconds``): an M×N×K FP8 GEMM
takes at least the measured time of the 16-bit M×N×(K/2) GEMM (Hopper's FP8 ``wgmma`` covers k32 where the 16-bit
one covers k16), and the FP8 ceiling × waves where that is slower. Checked against hand formulas with the literal
entries of XLA's sm_90 table (``gemm_table.SM90_BF16_TFLOPS``, rows ``k=…  m=…``)."""

from __future__ import annotations

import math

import pytest

from planner.answer.request import context, parse_request
from planner.pricing.gemm_table import IN_STEP_SLOWDOWN
from planner.pricing.gpu import gemm_time, measured_fp8_table


def ctx_of(gpu: str):
    return context(
        parse_request(
            {
                "model": "llama3-8b",
                "cluster": {"gpu": gpu, "num_nodes": 1, "gpus_per_node": 8},
                "training": {"global_batch_size": 64, "seq_len": 8192, "precision": "fp8", "stack": "torchtitan"},
                "parallel": {"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 1, "zero_stage": 3, "recompute": "full"},
            }
        )
    )


def waves(m: int, n: int, sms: int) -> float:
    """Useful fraction of 128×128 tiles over ``sms`` SMs (hand count)."""
    tiles = math.ceil(m / 128) * math.ceil(n / 128)
    return tiles / (math.ceil(tiles / sms) * sms)


def ceiling_s(m: int, n: int, k: int, fp8_peak: float, sms: int) -> float:
    """The FP8 ceiling: 2·M·N·K at the dense FP8 peak × 0.709 (mamf-finder's best shape) × waves."""
    return 2 * m * n * k / (fp8_peak * 1e12 * 0.709 * waves(m, n, sms))


def hbm_s(m: int, n: int, k: int, gbps: float) -> float:
    """FP8 operands (1 byte) and the 16-bit result at the achieved HBM fraction for the size (Calculon)."""
    nbytes = m * k + k * n + 2 * m * n
    eff = 0.90 if nbytes >= 100e6 else 0.75 if nbytes >= 10e6 else 0.60 if nbytes >= 1e6 else 0.30
    return nbytes / (gbps * 1e9 * eff)


# (M, N, K, the table's TFLOP/s at (M, N, K/2) — row "k=K/2 m=M", column N —, which bound sets the time)
CASES = [
    (4096, 4096, 1024, 551.8, "table"),  # k=512 m=4096, n=4096: a TP8 wo-like depth
    (1024, 2048, 512, 144.3, "table"),  # k=256 m=1024, n=2048
    (2048, 1024, 2048, 386.8, "table"),  # k=1024 m=2048, n=1024
    (4096, 4096, 8192, 780.2, "ceiling"),  # k=4096 m=4096, n=4096: large, the FP8 ceiling is slower
]


@pytest.mark.parametrize(("m", "n", "k", "tflops", "bound"), CASES)
def test_h100_fp8_gemm_is_the_half_depth_16bit_gemm_or_the_ceiling(m, n, k, tflops, bound):
    ctx = ctx_of("h100-sxm5-80gb")  # the table's own part: bf16 peak 989.4, FP8 1978.9, 132 SMs, 3.35 TB/s
    assert measured_fp8_table(ctx)
    table = 2 * m * n * (k / 2) / (tflops * 1e12)  # the 16-bit GEMM of depth K/2 at its measured rate
    ceiling = ceiling_s(m, n, k, 1978.9, 132)
    expected = max(max(table, ceiling) * IN_STEP_SLOWDOWN, hbm_s(m, n, k, 3350.0))  # at a step's clock
    assert gemm_time(ctx, m, n, k, fp8=True) == pytest.approx(expected, rel=1e-9)
    assert (table > ceiling) == (bound == "table")


def test_power_capped_h100_scales_with_its_own_16bit_peak():
    # torchtitan's 500 W part: bf16 731.5 (measured GEMMs, catalog), FP8 1587.4; the table's fraction × 731.5
    ctx = ctx_of("h100-sxm-96gb-hbm2e")
    m, n, k = 4096, 4096, 1024
    table = 2 * m * n * (k / 2) / (551.8 / 989.4 * 731.5e12)
    expected = max(max(table, ceiling_s(m, n, k, 1587.4, 132)) * IN_STEP_SLOWDOWN, hbm_s(m, n, k, 2400.0))
    assert gemm_time(ctx, m, n, k, fp8=True) == pytest.approx(expected, rel=1e-9)
    assert expected == table * IN_STEP_SLOWDOWN


def test_other_gpus_keep_the_ceiling():
    ctx = ctx_of("b200-sxm-192gb")  # no measured sm_100 table: the FP8 ceiling × waves (148 SMs)
    assert not measured_fp8_table(ctx)
    m, n, k = 4096, 4096, 1024
    expected = max(ceiling_s(m, n, k, 4500.0, 148), hbm_s(m, n, k, 8000.0))
    assert gemm_time(ctx, m, n, k, fp8=True) == pytest.approx(expected, rel=1e-9)


def test_fp8_never_slower_than_16bit_at_the_same_shape():
    # the half-depth 16-bit GEMM does no more tile work than the full-depth one (both by the same table)
    ctx = ctx_of("h100-sxm5-80gb")
    for m, n, k in [
        (98304, 128, 4096),
        (98304, 4096, 512),
        (98304, 4096, 128),
        (16384, 14336, 4096),
        (8192, 1024, 300),
    ]:
        assert gemm_time(ctx, m, n, k, fp8=True) <= gemm_time(ctx, m, n, k) * (1 + 1e-9)
