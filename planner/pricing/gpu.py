"""Per-op kernel times of one layer (issue 11 §1): GEMMs by shape (wave and tile quantization over the
GPU's SMs, on a cited large-GEMM ceiling), the attention core by the stack's kernel, memory-bound ops at
achieved HBM bandwidth by transfer size, kernel launches. ``planner.pricing.layer_times`` sums them per
layer; every constant is listed with its source in ``docs/planner.md``."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING

from planner.pricing.fp8_accum import split_accum_slowdown
from planner.pricing.gemm_table import IN_STEP_SLOWDOWN, table_efficiency
from planner.pricing.host import host_slowdown, runs_on_host
from planner.workload.analytic import FLASH_BWD_RATIO
from planner.workload.fp8 import cast_ops, fp8_gemm_shapes
from planner.workload.ops import MemOp, attention_core_flops, elementwise_bytes

if TYPE_CHECKING:
    from planner.pricing.device import Device


#: Output tile of a BF16/FP16 tensor-core GEMM kernel (CUTLASS/cuBLAS Ampere and Hopper kernels use
#: 128×128 and 128×256 CTA tiles; NVIDIA "Matrix Multiplication Background User's Guide", §§2-3): the
#: tiles ⌈M/128⌉·⌈N/128⌉ run in waves over the SMs (``catalog.SM_COUNT``, one CTA per SM), and a
#: partial last wave or a padded edge tile does no useful work.
TILE = (128, 128)


#: Achieved fraction of the datasheet HBM bandwidth by bytes moved per kernel (Calculon,
#: calculon-ai/calculon systems/a100_80g.json and h100_80g_nvl8.json ``mem1.MB_efficiency``):
#: (lower bound in bytes, efficiency), largest first.
HBM_EFFICIENCY = ((100e6, 0.90), (10e6, 0.75), (1e6, 0.60), (0.0, 0.30))


#: FlashAttention-2 forward+backward, causal, BF16, TFLOP/s by sequence length (batch·seq = 16k,
#: hidden 2048), with FlashAttention's causal FLOP count (half the square): Dao-AILab/flash-attention
#: ``assets/flash2_a100_fwd_bwd_benchmark.png`` and ``assets/flash2_h100_fwd_bwd_benchmark.png`` (panels (c)
#: "with causal mask, head dimension 64" and (d) "... 128"; read at 0251105a), by GPU family and head dim.
FLASH_CAUSAL_TFLOPS: dict[tuple[str, int], tuple[tuple[int, float], ...]] = {
    ("a100", 64): ((512, 88), (1024, 119), (2048, 140), (4096, 156), (8192, 165), (16384, 171)),
    ("a100", 128): ((512, 99), (1024, 133), (2048, 155), (4096, 173), (8192, 182), (16384, 189)),
    ("h100", 64): ((512, 141), (1024, 192), (2048, 232), (4096, 257), (8192, 273), (16384, 284)),
    ("h100", 128): ((512, 163), (1024, 221), (2048, 265), (4096, 294), (8192, 308), (16384, 328)),
}


#: FlashAttention in Triton (the 2022 kernel: flash-attention's ``flash_attn/flash_attn_triton.py``, which
#: llm-foundry vendored as ``attn_impl: triton``, its benchmarks' default until 2024-04), causal fwd+bwd, same
#: axes and count: the "FlashAttention Triton" bars of ``assets/flash2_a100_fwd_bwd_benchmark.png`` (FA2 paper,
#: arXiv 2307.08691, Fig. 4). The H100 figure has no Triton bars; there the FlashAttention (v1) bars of
#: ``flash2_h100_fwd_bwd_benchmark.png`` stand in: on A100 the two are within 7 % at head dim 128 (68 vs 69
#: TFLOP/s at 2K) and 18 % at head dim 64 (Triton the slower from 4K) at every length of the figure.
FLASH_TRITON_CAUSAL_TFLOPS: dict[tuple[str, int], tuple[tuple[int, float], ...]] = {
    ("a100", 64): ((512, 59), (1024, 75), (2048, 79), (4096, 76), (8192, 79), (16384, 80)),
    ("a100", 128): ((512, 50), (1024, 61), (2048, 68), (4096, 74), (8192, 78), (16384, 80)),
    ("h100", 64): ((512, 104), (1024, 123), (2048, 136), (4096, 138), (8192, 149), (16384, 156)),
    ("h100", 128): ((512, 98), (1024, 109), (2048, 108), (4096, 126), (8192, 135), (16384, 137)),
}

#: The published tables by the stack's ``flash_kernel``.
FLASH_TABLES = {"fa2": FLASH_CAUSAL_TFLOPS, "triton": FLASH_TRITON_CAUSAL_TFLOPS}


#: FlashAttention-2 forward+backward WITHOUT the causal mask, same figures and axes (panels (a) "without causal mask,
#: head dimension 64" and (b) "... 128"; the whole square counted). Each query block visits every key block and none
#: is masked, so it runs faster than the causal kernel, whose diagonal blocks are computed whole and masked
#: (``flash_fwd_kernel.h``: ``n_masking_steps``): 338 against 328 at 16K on H100, 294 against 221 at 1K. The A100
#: head-dim-128 labels at 512 and 1K and the head-dim-64 one at 1K are hidden by the legend: not listed (``flash_rate``
#: interpolates, and never prices a full square below the causal rate).
FLASH_FULL_TFLOPS: dict[tuple[str, int], tuple[tuple[int, float], ...]] = {
    ("a100", 64): ((512, 132), (2048, 162), (4096, 171), (8192, 175), (16384, 176)),
    ("a100", 128): ((2048, 187), (4096, 196), (8192, 201), (16384, 203)),
    ("h100", 64): ((512, 215), (1024, 254), (2048, 274), (4096, 288), (8192, 294), (16384, 296)),
    ("h100", 128): ((512, 248), (1024, 294), (2048, 320), (4096, 326), (8192, 335), (16384, 338)),
}

#: The full-square tables by the stack's ``flash_kernel`` (the Triton kernel has none published: causal only).
FLASH_FULL_TABLES = {"fa2": FLASH_FULL_TFLOPS}


#: H200 has H100's SMs and clocks (catalog): it uses H100's attention rates.
FLASH_FAMILY = {"a100": "a100", "h100": "h100", "h200": "h100"}


#: Dense BF16 peak (TFLOP/s) of the part each ``FLASH_CAUSAL_TFLOPS`` table was measured on (A100 SXM4,
#: H100 SXM5 datasheets): a GPU of the family with another tensor clock (e.g. a power-capped part,
#: ``catalog``) gets the table × its peak ÷ this.
FLASH_REFERENCE_PEAK = {"a100": 312.0, "h100": 989.4}


@lru_cache(maxsize=4096)
def hbm_efficiency(nbytes: float) -> float:
    return next(eff for lo, eff in HBM_EFFICIENCY if nbytes >= lo)


def hbm_time(ctx: Device, nbytes: float) -> float:
    """Seconds to move ``nbytes`` in one kernel at the achieved HBM bandwidth for that size. A host device's
    bandwidth is already an achieved rate (``runtime.report.host_spec``: a 64 MiB copy; smaller transfers
    stay in its caches), so no GPU size curve applies to it."""
    eff = 1.0 if runs_on_host(ctx) else hbm_efficiency(nbytes)
    return nbytes / (ctx.gpu.hbm_bandwidth_GBps * 1e9 * eff) if nbytes > 0 else 0.0


def wave_efficiency(m: int, n: int, sms: int | None, batch: int = 1) -> float:
    """Useful fraction of the tensor-core work of an M×N output (``batch`` of them in one kernel) tiled
    by ``TILE`` and scheduled in waves over ``sms`` SMs: (M·N ÷ padded tiles' area) × (tiles ÷ waves·SMs).
    1.0 when the SM count is unknown."""
    tm, tn = TILE
    gm, gn = -(-m // tm), -(-n // tn)
    pad = (m * n) / (gm * tm * gn * tn)
    if sms is None:
        return pad
    tiles = gm * gn * batch
    waves = -(-tiles // sms)
    return pad * tiles / (waves * sms)


#: Fraction of the dense FP8 datasheet peak a large FP8 GEMM reaches (``torch._scaled_mm``, mamf-finder's
#: best-shape search: stas00/ml-engineering ``compute/accelerator`` README: H100 SXM FP8 1,402.6 of 1,979
#: TFLOPS = 0.709, H200 1,453.4 = 0.734, against BF16 794.5 of 989 = 0.803: an FP8 GEMM is 1.77× a BF16 one
#: at its best shape, not 2×). Blackwell: no published measurement; taken as H100's.
FP8_GEMM_EFFICIENCY = {"h100": 0.709, "h200": 0.734}
DEFAULT_FP8_GEMM_EFFICIENCY = 0.709


def fp8_gemm_efficiency(ctx: Device) -> float:
    gid = ctx.gpu.id.lower()
    return next((eff for fam, eff in FP8_GEMM_EFFICIENCY.items() if gid.startswith(fam)), DEFAULT_FP8_GEMM_EFFICIENCY)


def gemm_time(
    ctx: Device,
    m: int,
    n: int,
    k: int,
    count: int = 1,
    batched: bool = False,
    fp8: bool = False,
    backward: bool = False,
) -> float:
    """Seconds of ``count`` M×N×K GEMMs (one batched kernel when ``batched``): the larger of their FLOPs at
    the large-GEMM ceiling × the wave/tile efficiency, and their operand and result bytes at achieved HBM.
    ``fp8``: FP8 operands (1 byte each) and a 16-bit result, at the FP8 peak × ``FP8_GEMM_EFFICIENCY``;
    ``backward``: a backward (input- or weight-gradient) FP8 GEMM, whose split accumulator slows its compute on
    sm_90 (``planner.pricing.fp8_accum``). Memoised on the device (``Device.gemm_cache``)."""
    key = (m, n, k, count, batched, fp8, fp8 and backward)
    t = ctx.gemm_cache.get(key)
    if t is None:
        t = ctx.gemm_cache[key] = _gemm_time(ctx, m, n, k, count, batched, fp8, backward)
    return t


def _gemm_time(ctx: Device, m: int, n: int, k: int, count: int, batched: bool, fp8: bool, backward: bool) -> float:
    if fp8 and not runs_on_host(ctx):
        fl = 2.0 * m * n * k * count
        by = (m * k + k * n + 2 * m * n) * count
        eff = wave_efficiency(m, n, ctx.sm_count)
        t = fl / (ctx.fp8_peak * fp8_gemm_efficiency(ctx) * eff)
        sm90 = measured_fp8_table(ctx)
        if sm90:  # no faster than the 16-bit GEMM of half the depth (``fp8_table_seconds``), at a step's clock
            t = max(t, fp8_table_seconds(ctx, m, n, k, count)) * IN_STEP_SLOWDOWN
        t *= split_accum_slowdown(sm90, backward)  # the backward GEMMs' split accumulator (``fp8_accum``)
        return max(t, count * hbm_time(ctx, by / count))
    sms = ctx.sm_count
    if batched:
        eff, calls = wave_efficiency(m, n, sms, count), 1
    else:
        eff, calls = wave_efficiency(m, n, sms), count
    if runs_on_host(ctx):  # the host's rate is an achieved matmul rate (host_spec), not tensor-core tiles
        eff = 1.0 / ctx.gemm_efficiency
    rate = ctx.gemm_efficiency * eff
    if measured_table(ctx):  # the lower of the two bounds: tile schedule on the ceiling, and the measured shape
        rate = min(rate, table_efficiency(m * count if batched else m, n, k)) / IN_STEP_SLOWDOWN
    fl = 2.0 * m * n * k * count
    by = (m * k + k * n + m * n) * ctx.elt * count
    return max(fl / (ctx.peak * rate), calls * hbm_time(ctx, by / calls))


#: GPUs priced by XLA's measured sm_90 table (``planner.pricing.gemm_table``): H100 and H200 share the sm_90 die,
#: SMs and tensor clocks (catalog); the table's rates are fractions of the H100 SXM peak, scaled by the part's own.
MEASURED_TABLE_GPUS = ("h100", "h200")


def measured_table(ctx: Device) -> bool:
    """Whether a 16-bit GEMM on this device is priced by the measured sm_90 table (not on a host stand-in)."""
    return (
        ctx.gpu.id.lower().startswith(MEASURED_TABLE_GPUS)
        and ctx.compute_precision in ("bf16", "fp16")
        and not runs_on_host(ctx)
    )


def measured_fp8_table(ctx: Device) -> bool:
    """Whether an FP8 GEMM on this device is bounded by the measured sm_90 table (``fp8_table_seconds``)."""
    return ctx.gpu.id.lower().startswith(MEASURED_TABLE_GPUS) and not runs_on_host(ctx)


def fp8_table_seconds(ctx: Device, m: int, n: int, k: int, count: int = 1) -> float:
    """Seconds of ``count`` M×N×K FP8 GEMMs as the 16-bit GEMM of depth K/2 on the same tiles (sm_90).

    On Hopper an FP8 warpgroup MMA covers twice the depth of a 16-bit one in the same instruction (PTX ISA
    ``wgmma.mma_async`` shapes: ``.bf16``/``.f16`` m64nNk16, ``.e4m3``/``.e5m2`` m64nNk32; the dense FP8 peak is
    twice the 16-bit one on the H100 datasheet), a K step of FP8 operands loads the bytes of half as deep a 16-bit
    step, and the epilogue writes the same 16-bit M×N output: an M×N×K FP8 GEMM does the tile work of an
    M×N×(K/2) 16-bit one. So it takes at least that GEMM's measured time (``gemm_table.table_efficiency`` at
    K/2, on the part's 16-bit peak): 2·M·N·(K/2) ÷ (peak × efficiency). At large shapes the FP8 ceiling
    (``FP8_GEMM_EFFICIENCY``, below twice the 16-bit fraction) is the slower bound and this one does not bind;
    at small K (TP-sharded ``wo``/``w2`` inputs, backward data gradients of narrow layers) the fixed per-tile
    prologue and epilogue, not the halved K loop, set the time."""
    return 2.0 * m * n * (k / 2.0) * count / (ctx.peak * table_efficiency(m, n, k / 2.0))


def linear_times(ctx: Device, kind: str, tokens: int, tp: int) -> tuple[float, float, float]:
    """(forward s, backward s, forward FLOPs) of the layer's linear GEMMs: forward Y = X·W (M×N×K);
    backward the data gradient (M×K×N) and the weight gradient (K×N×M, reduced over the tokens)."""
    f = b = flops = 0.0
    for m, n, k, c, fp8 in fp8_gemm_shapes(ctx, kind, tokens, tp):  # ``fp8``: the linear runs in FP8
        f += gemm_time(ctx, m, n, k, c, fp8=fp8)
        b += gemm_time(ctx, m, k, n, c, fp8=fp8, backward=True) + gemm_time(ctx, k, n, m, c, fp8=fp8, backward=True)
        flops += 2.0 * m * n * k * c
    return f, b, flops


def ops_time(ctx: Device, ops: tuple[MemOp, ...]) -> float:
    """Seconds of memory-bound ops, each kernel's bytes at the achieved HBM bandwidth for its size."""
    return sum(hbm_time(ctx, op.nbytes / op.kernels) * op.kernels for op in ops if op.kernels)


def cast_times(ctx: Device, kind: str, mbs: int, tp: int, sp: bool = False) -> tuple[float, float, int, int]:
    """(forward s, backward s, forward kernels, backward kernels) of a layer's FP8 casts, transposes and amax
    reductions (``planner.workload.fp8.cast_ops``); zero without FP8."""
    f, b = cast_ops(ctx, kind, mbs, tp, sp)
    return ops_time(ctx, f), ops_time(ctx, b), sum(op.kernels for op in f), sum(op.kernels for op in b)


def elementwise_time(ctx: Device, kind: str, mbs: int, tp: int, sp: bool) -> float:
    """Forward seconds of the memory-bound ops, each kernel moving about one residual-stream tensor in and out."""
    nbytes = elementwise_bytes(ctx, kind, mbs, tp, sp)
    stream = mbs * ctx.training.seq_len // (tp if sp else 1)
    return nbytes / (ctx.gpu.hbm_bandwidth_GBps * 1e9 * hbm_efficiency(2 * stream * ctx.model.hidden_size * ctx.elt))


def flash_rate(ctx: Device, head_dim: int, seq: int, causal: bool = True) -> float | None:
    """The stack's flash kernel's fwd+bwd TFLOP/s on this GPU (``FLASH_TABLES``, FA's causal count; ``causal`` False:
    a full square of side ``seq``, ``FLASH_FULL_TABLES``, never below the causal rate), interpolated in log(seq); None
    when no published table covers the GPU (or, full, the kernel). Below a table: proportionally slower (shorter
    kernels). Above it, a full square stays at the table's last rate and a causal one gains as its diagonal shrinks:
    a causal square of side L is full key blocks at the full rate plus L/128 masked diagonal blocks
    (``flash_fwd_kernel.h`` ``n_masking_steps``), so 1/R_causal(L) − 1/R_full(L) falls as 1/L (``causal_tail``)."""
    fam = FLASH_FAMILY.get(ctx.gpu.id.lower()[:4])
    if fam is None or ctx.training.precision == "fp32":
        return None
    tables = FLASH_TABLES[ctx.stack.flash_kernel]
    full = FLASH_FULL_TABLES.get(ctx.stack.flash_kernel, {})
    dims = sorted(d for f, d in tables if f == fam)
    d = next((x for x in dims if x >= head_dim), dims[-1])
    clock = ctx.gpu.peak_flops("bf16") / 1e12 / FLASH_REFERENCE_PEAK[fam]
    rate = _table_rate(tables[(fam, d)], seq)
    if (fam, d) not in full:
        return clock * rate if causal else None
    if causal:
        return clock * causal_tail(tables[(fam, d)], full[(fam, d)], seq)
    return clock * max(rate, _table_rate(full[(fam, d)], seq))


def _table_rate(table: tuple[tuple[int, float], ...], seq: int) -> float:
    if seq <= table[0][0]:
        return table[0][1] * seq / table[0][0]  # below the table: shorter kernels, proportionally slower
    for (s0, r0), (s1, r1) in zip(table, table[1:]):
        if seq <= s1:
            w = math.log(seq / s0) / math.log(s1 / s0)
            return r0 + w * (r1 - r0)
    return table[-1][1]


def causal_tail(causal: tuple[tuple[int, float], ...], full: tuple[tuple[int, float], ...], seq: int) -> float:
    """The causal rate at ``seq``: the table's inside it; beyond its last length L₀ the diagonal's share of the
    time shrinks as L₀/seq: 1/R = 1/F + (1/C₀ − 1/F)·L₀/seq (C₀, F: the causal and full rates at L₀)."""
    l0, c0 = causal[-1]
    if seq <= l0:
        return _table_rate(causal, seq)
    f = _table_rate(full, l0)
    return 1.0 / (1.0 / f + (1.0 / c0 - 1.0 / f) * l0 / seq)


def attention_time(ctx: Device, mbs: int, tp: int) -> tuple[float, float]:
    """The attention core under context parallelism (a view whose seq_len is each rank's s / cp tokens): a rank's
    queries attend over all s keys, causal and load-balanced (rank i holds chunks i and 2·cp − 1 − i of c = s / 2cp
    tokens), 1/cp of the whole square in cp kernel calls (Megatron/TE ``context_parallel.py``, torch
    ``_templated_ring_attention``: one flash call per KV block). The first is the local causal square
    (``local_attention_time``); each of the other cp − 1 is a 2c × c or c × 2c rectangle with no mask (torch
    ``_is_causal_behavior``: ``NOT_IS_CAUSAL`` for every block after the first under load balancing; TE
    ``AttnFuncWithCPAndKVP2P``: ``causal=False`` on half the KV or half the queries), as many FLOPs as the local
    square's causal half at the full-square rate of side c (``flash_rate(causal=False)``; its shorter loop):
    ``cp_block_ratio``. Unfused attention, windows and GPUs without a full-square table: cp local squares."""
    f, b = local_attention_time(ctx, mbs, tp)
    k = 1.0 + (ctx.cp - 1) * cp_block_ratio(ctx) if ctx.cp > 1 else 1.0
    return f * k, b * k


def cp_block_ratio(ctx: Device) -> float:
    """Seconds of one unmasked CP block ÷ the local causal square's (``attention_time``): R_causal(s/cp) ÷
    R_full(s/2cp); 1 where the local square is not priced by a flash table."""
    m, seq = ctx.model, ctx.training.seq_len
    if ctx.stack.attention != "flash" or ctx.attention_window is not None or seq < 2:
        return 1.0
    d = m.mla.qk_head_dim if m.mla is not None else m.head_dim
    causal, full = flash_rate(ctx, d, seq), flash_rate(ctx, d, seq // 2, causal=False)
    return 1.0 if causal is None or full is None else causal / full


def local_attention_time(ctx: Device, mbs: int, tp: int) -> tuple[float, float]:
    """(forward, backward) seconds of the attention core (QKᵀ, softmax, dropout, PV) of one block on one
    TP rank, by the stack's kernel (``planner.specs.stacks``):

    * flash: the model's full-square FLOPs (4·b·s²·d·a/t forward, 2.5× backward) at the published
      FlashAttention-2 causal rate for (GPU, head dim, s) — which counts half the square, so the time is
      (FLOPs ÷ 2) ÷ rate; GPUs without a published table fall back to the two GEMMs at the GEMM ceiling. A
      model whose every block has a sliding window w < s (``Inputs.attention_window``; a model of windowed
      and full blocks prices each kind in its own view, ``compose.blocks``) runs FlashAttention-2's banded
      kernel (``flash_attn_func(..., window_size=(w − 1, 0))``: ``csrc/flash_attn/src/flash_fwd_kernel.h``
      starts each query block's key loop at ``n_block_min`` from ``window_size_left``, so the key blocks outside
      the band are skipped): its FLOPs × ``Inputs.attention_share`` (the band's pairs), at the causal rate of
      a sequence of 2·w — each query block then visits about w/128 key blocks with one partly masked block in
      two, as a causal kernel does at 2·w — or of s when shorter (under CP the share is the whole sequence's);
    * unfused: the two batched GEMMs per direction (QKᵀ, PV forward; four in backward) on their rooflines
      (the whole square, window or not: a masked softmax computes every score and discards the band's outside),
      plus the b·(a/t)·s² scores read and written in HBM by the softmax (forward: read + write; backward:
      read probabilities and gradient, write gradient) and, with dropout, by the dropout (read, write, and a
      1-byte mask; backward: read gradient and mask, write); with ``eager`` kernels the causal mask is its
      own pass over the scores (``masked_fill_``: read + write, both ways; Megatron-LM 2020
      ``gpt2_attention_mask_func``) instead of part of a fused scale-mask-softmax; and the context is copied
      back from [b, a, s, d] to [b, s, a·d] (``permute(...).contiguous()``: read + write, both ways)."""
    m, seq = ctx.model, ctx.training.seq_len
    d, heads = m.head_dim, mbs * m.num_attention_heads // tp
    dv = d  # latent attention: QKᵀ over the query/key head width, PV over the value head width
    pad = ctx.stack.mla_pad_v  # ... or over v padded to the query/key width (``Stack.mla_pad_v``: the bundled runtime)
    if m.mla is not None:
        d, dv = m.mla.qk_head_dim, max(m.mla.qk_head_dim, m.mla.v_head_dim) if pad else m.mla.v_head_dim
    if heads == 0:
        return 0.0, 0.0
    share, w = ctx.attention_share, ctx.attention_window
    flops = attention_core_flops(m, mbs, seq, tp, share, pad)
    if ctx.stack.attention == "flash":
        rate = flash_rate(ctx, d, seq if w is None else min(seq, 2 * w))
        if rate is not None:
            total = (1 + FLASH_BWD_RATIO) * flops / 2 / (rate * 1e12)
            return total / (1 + FLASH_BWD_RATIO), total * FLASH_BWD_RATIO / (1 + FLASH_BWD_RATIO)
        fwd = share * (gemm_time(ctx, seq, seq, d, heads, True) + gemm_time(ctx, seq, dv, seq, heads, True))
        return fwd, FLASH_BWD_RATIO * fwd
    fwd = gemm_time(ctx, seq, seq, d, heads, True) + gemm_time(ctx, seq, dv, seq, heads, True)
    bwd = gemm_time(ctx, seq, seq, d, heads, True) + 3 * gemm_time(ctx, seq, dv, seq, heads, True)
    scores = heads * seq * seq
    e = ctx.elt
    fwd += hbm_time(ctx, 2 * scores * e)
    bwd += hbm_time(ctx, 3 * scores * e)
    if ctx.stack.kernels == "eager":  # the causal mask by its own kernel over the scores (masked_fill_), both ways
        fwd += hbm_time(ctx, 2 * scores * e)
        bwd += hbm_time(ctx, 2 * scores * e)
    context = heads * seq * dv * e  # the context [b, a, s, d] permuted back to [b, s, a·d] (a contiguous copy)
    fwd += hbm_time(ctx, 2 * context)
    bwd += hbm_time(ctx, 2 * context)
    if ctx.stack.dropout:
        fwd += hbm_time(ctx, 2 * scores * e + scores)
        bwd += hbm_time(ctx, 2 * scores * e + scores)
    return fwd, bwd


#: Host CPU time to launch one CUDA kernel from eager PyTorch: about 4–6 µs (susun-blog.com, "pegainfer
#: (3)": kernels shorter than that leave the GPU idle unless CUDA graphs are used); the low end, as a
#: floor. Not charged on a host device, whose per-op cost is the ``kernel_overhead_us`` residual alone.
GPU_LAUNCH_US = 4.0


def with_launches(ctx: Device, device_s: float, kernels: int) -> float:
    """Seconds of ``kernels`` kernels that keep the device busy ``device_s``, with ``GPU_LAUNCH_US`` (GPUs)
    plus the ``kernel_overhead_us`` residual per kernel: on a GPU launches are asynchronous, so the host's
    launches overlap the device's work and the span is max(device, kernels × overhead) (host-bound when the
    kernels are small); on a host device (``runs_on_host``) the processor that launches an op also runs it,
    so they add."""
    on_host = runs_on_host(ctx)
    host = kernels * ((0.0 if on_host else GPU_LAUNCH_US) + ctx.residuals.kernel_overhead_us) * 1e-6
    return device_s + host * host_slowdown(ctx) if on_host else max(device_s, host)


def optimizer_step_times(ctx: Device, params: tuple[int, int, int], shard: int, step_bytes: float) -> list[float]:
    """Seconds of one optimizer step over each layer's (block, embedding, LM head) parameters, sharded ``shard``
    ways, touching ``step_bytes`` of HBM per parameter: memory-bound multi-tensor kernels at the achieved HBM
    bandwidth of a block's transfer."""
    hbm = ctx.gpu.hbm_bandwidth_GBps * 1e9 * hbm_efficiency(params[0] / shard * step_bytes)
    return [p / shard * step_bytes / hbm for p in params]
