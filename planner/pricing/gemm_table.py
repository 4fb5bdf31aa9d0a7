"""Measured H100 (sm_90) BF16 GEMM throughput by shape, from XLA's default matmul performance table.

Source: openxla/xla ``xla/service/gpu/model/matmul_interpolator_data.h`` (``kDefaultMatmulPTable``, the
``BEGIN_DEFAULT_PERF_TABLE`` textproto that XLA's ``MatmulInterpolator`` reads), read from the ROCm/xla fork at
commit ea2c45f2cacc930dcfa4e7bb0773616b8e353c34 (the code index holds the same file at
63ce2981d3f46d47fb25509a2d257f428f3dd275): GPU key ``"sm_90"``, entries with ``b: 1``, dtype key
``"bf16xbf16->bf16"``, the achieved FLOP/s (2·M·N·K ÷ kernel time) on the 5×5×5 grid M, N, K ∈ {256, …, 4096}
(powers of two). Extracted by a regex over the textproto and rounded to 0.1 TFLOP/s; nothing else changed.

Not taken: the table's ``b`` 2 and 4 entries (a batched GEMM is looked up with its batch folded into M, which the
table bears out to a few per cent, e.g. b 4 × 1024×1024×1024 0.50 of peak against b 1 × 4096×1024×1024 0.50), and
its FP8 entries (``f8e4m3fnxf8e4m3fn->bf16``): at large shapes they exceed the H100 SXM dense FP8 datasheet peak
(1,979 TFLOP/s; 4096³ reads 2,420), so they are not a kernel time this model can use. The table has no sm_80
(A100) key; other GPUs keep the wave model (``planner.pricing.gpu``).
"""

from __future__ import annotations

import math
from functools import lru_cache

#: The grid of M, N and K (each), ascending.
GRID = (256, 512, 1024, 2048, 4096)

#: Dense BF16 peak (TFLOP/s) of the part the table was measured on (H100 SXM5 datasheet): the table's rates are
#: taken as fractions of this, so a GPU of the family with another tensor clock scales with its own peak.
REFERENCE_PEAK_TFLOPS = 989.4

#: How much slower an sm_90 GEMM runs inside a training step than the table's isolated rate: the tensor clock a
#: step sustains at the part's power limit. Measured on our lent H200 (700 W; ``bench/gpu/h200/trace-mbs{1,2}.json``,
#: one Llama 3 8B-shaped step each under ``torch.profiler``, bench/gpu/check.sh): its linear GEMMs, 892.7 TFLOP a
#: step, took 1.212 and 1.245 s of kernel time where the table prices 1.156 s (1.048 and 1.077; this is their
#: geometric mean). The same GEMMs in back-to-back loops (``microbench.json``, 245 shapes) run 1.09-1.15 × the
#: table: a step's memory-bound kernels between GEMMs leave the clock higher than a loop does, so the step, not the
#: loop, is the measure. ``tests/test_gpu_check.py`` derives it again from the stored traces.
IN_STEP_SLOWDOWN = 1.062

#: Achieved TFLOP/s, index [k][m][n] flattened (k outermost, n innermost), one line per (k, m).
# fmt: off
SM90_BF16_TFLOPS = (
    6.7, 12.4, 23.7, 43.8, 82.6,  # k=256 m=256
    12.3, 23.6, 45.7, 84.5, 141.3,  # k=256 m=512
    23.6, 45.5, 80.9, 144.3, 219.7,  # k=256 m=1024
    45.3, 84.3, 145.6, 219.7, 303.3,  # k=256 m=2048
    84.5, 141.9, 223.0, 308.2, 398.6,  # k=256 m=4096
    11.5, 23.0, 43.8, 83.1, 146.2,  # k=512 m=256
    23.0, 43.6, 85.4, 147.5, 243.6,  # k=512 m=512
    43.7, 84.3, 149.1, 244.0, 347.7,  # k=512 m=1024
    79.0, 150.1, 244.9, 348.6, 449.3,  # k=512 m=2048
    144.9, 240.1, 354.6, 449.6, 551.8,  # k=512 m=4096
    18.9, 41.1, 75.1, 141.6, 237.6,  # k=1024 m=256
    41.5, 73.4, 146.5, 241.8, 381.3,  # k=1024 m=512
    69.8, 144.0, 252.8, 384.0, 494.4,  # k=1024 m=1024
    142.8, 257.6, 386.8, 498.0, 596.5,  # k=1024 m=2048
    229.0, 377.5, 497.6, 604.6, 685.2,  # k=1024 m=4096
    31.9, 63.9, 119.6, 222.6, 345.9,  # k=2048 m=256
    61.7, 116.3, 231.0, 342.8, 530.0,  # k=2048 m=512
    116.1, 235.5, 359.8, 529.5, 639.1,  # k=2048 m=1024
    231.4, 354.1, 535.3, 641.0, 725.5,  # k=2048 m=2048
    314.3, 531.0, 643.7, 727.5, 735.6,  # k=2048 m=4096
    90.9, 93.1, 177.1, 296.3, 418.4,  # k=4096 m=256
    92.8, 187.5, 300.9, 460.4, 661.6,  # k=4096 m=512
    187.2, 312.1, 472.6, 665.7, 751.9,  # k=4096 m=1024
    333.9, 458.1, 663.6, 752.2, 752.3,  # k=4096 m=2048
    398.9, 662.0, 751.7, 759.4, 780.2,  # k=4096 m=4096
)
# fmt: on


#: K beyond the grid: a tile's time is a fixed part (prologue, epilogue, pipeline fill) plus a part linear in K
#: (NVIDIA "Matrix Multiplication Background User's Guide" §2: each CTA walks K in steps), so per unit of M·N the
#: time is a + b·K; a and b come from the table's two largest K at that (M, N), and efficiency is K ÷ (a + b·K).
K_FIT = (2048, 4096)


def _pos(x: float) -> tuple[int, float]:
    """Cell index and fraction of ``x`` (within the grid) along log2 of ``GRID``."""
    t = math.log2(x) - math.log2(GRID[0])
    i = min(int(t), len(GRID) - 2)
    return i, t - i


def _interp(m: float, n: float, k: float) -> float:
    """Fraction of ``REFERENCE_PEAK_TFLOPS`` at an in-grid shape: trilinear in (log2 M, log2 N, log2 K); exact
    at the grid points."""
    (im, fm), (jn, fn), (ik, fk) = _pos(m), _pos(n), _pos(k)
    g = len(GRID)
    e = 0.0
    for dk, wk in ((0, 1.0 - fk), (1, fk)):
        for dm, wm in ((0, 1.0 - fm), (1, fm)):
            for dn, wn in ((0, 1.0 - fn), (1, fn)):
                w = wk * wm * wn
                if w > 0.0:
                    e += w * SM90_BF16_TFLOPS[((ik + dk) * g + im + dm) * g + jn + dn]
    return e / REFERENCE_PEAK_TFLOPS


@lru_cache(maxsize=65536)
def table_efficiency(m: float, n: float, k: float) -> float:
    """Achieved fraction of the BF16 peak of one M×N×K GEMM on an sm_90 GPU by the measured table. Inside the
    grid: interpolated (``_interp``). M or N above 4,096: the same number of output tiles (M·N) looked up with the
    larger side at 4,096 and the smaller one widened to match, up to 4,096 (the table is close to a function of
    M·N at fixed K: at K 1,024, 4096×1024 0.50 and 2048×2048 0.50 of peak; 4096×256 and 1024×1024 0.23, 0.26);
    past 4096×4096 (~4 waves of 128×256 tiles over 132 SMs) more tiles add waves, not per-tile speed (wave
    quantization is the caller's ``wave_efficiency``). K above 4,096: the fixed-plus-linear tile time
    (``K_FIT``). A dimension still below 256: the time of 256 (a tile is at least that wide and K that deep), so
    the fraction falls in proportion."""
    lo, hi = GRID[0], GRID[-1]
    mf, nf = float(m), float(n)
    if max(mf, nf) > hi:
        small = min(mf, nf) * max(mf, nf) / hi
        mf, nf = hi, min(small, hi)
    mc, nc, kc = (min(max(x, lo), hi) for x in (mf, nf, k))
    if k > hi:
        k1, k2 = K_FIT
        t1, t2 = k1 / _interp(mc, nc, k1), k2 / _interp(mc, nc, k2)
        slope = max((t2 - t1) / (k2 - k1), 0.0)
        fixed = max(t1 - k1 * slope, 0.0)
        eff = k / (fixed + slope * k) if slope > 0.0 else k2 / t2
    else:
        eff = _interp(mc, nc, kc)
    for x in (mf, nf, k):
        if x < lo:
            eff *= x / lo
    return eff
