"""Compute time of one layer (one micro-batch, one GPU) and the planner's ``Context``.

Compute per layer and micro-batch, per op (see ``docs/planner.md`` for every constant):
  time = Σ linear GEMMs (forward; data and weight gradients), each max(FLOPs ÷ (peak × ``GEMM_EFFICIENCY``
         × wave/tile efficiency over the SMs), bytes ÷ achieved HBM bandwidth)
       + attention core by the stack's kernel (``attention_time``: flash at published rates; unfused:
         batched GEMMs + the s×s scores through HBM)
       + memory-bound ops (norms, activation, RoPE, residual adds, dropout) at achieved HBM bandwidth;
measured ``fwd_time_s``/``bwd_time_s`` from a ``Profile`` replace the formula when present.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from planner import comm as comm_mod
from planner.specs import (
    BYTES_PER_ELEMENT,
    ClusterSpec,
    GpuSpec,
    LayerProfile,
    ModelSpec,
    NetworkProfile,
    Profile,
    TrainingSpec,
)
from planner.stacks import Stack
from planner.stacks import resolve as resolve_stack

#: Fraction of the dense datasheet peak a large GEMM reaches (cuBLAS, "maximum achievable matmul
#: FLOPS" microbenchmarks: stas00/ml-engineering ``compute/accelerator`` table, mamf-finder:
#: A100 SXM bf16 ≈ 268 of 312 TFLOPS, H100 SXM bf16 ≈ 792 of 989). Used for every GPU without a
#: measured profile; shapes below the roofline ridge are charged by their bytes instead.
GEMM_EFFICIENCY = {"a100": 0.86, "h100": 0.80, "h200": 0.80, "b200": 0.80}
DEFAULT_GEMM_EFFICIENCY = 0.80


LayerFn = Callable[[str, int, int, bool], LayerProfile]


@dataclass
class Context:
    """Everything fixed across candidates: model, hardware, training setup, measurements."""

    model: ModelSpec
    gpu: GpuSpec
    cluster: ClusterSpec
    training: TrainingSpec
    profile: Profile | None = None
    network: NetworkProfile | None = None
    #: (kind, micro_batch_size, tp, sequence_parallel) -> LayerProfile; default: profile, else analytic.
    layer_fn: LayerFn | None = None
    #: Fraction of the GPU's memory a plan leaves unused (``SearchOptions.memory_headroom``; 0 here: the
    #: request's default is applied by ``planner.api.context``).
    memory_headroom: float = 0.0
    #: Values derived once per context (layer profiles and times, shared terms, class costs), by key.
    memo: dict[Any, Any] = field(default_factory=dict, repr=False)

    @cached_property
    def comm(self) -> comm_mod.CommModel:
        return comm_mod.CommModel.for_cluster(self.cluster, self.gpu, self.network)

    @cached_property
    def usable_bytes(self) -> int:
        """Tensor bytes per GPU a plan may use (``memory.usable_bytes`` with this context's headroom)."""
        from planner.memory import usable_bytes

        return usable_bytes(self.gpu.memory_gib, self.memory_headroom)

    @property
    def num_gpus(self) -> int:
        return self.cluster.num_gpus

    @property
    def elt(self) -> int:
        return BYTES_PER_ELEMENT[self.training.precision]

    @cached_property
    def peak(self) -> float:
        return self.gpu.peak_flops(self.training.precision)

    @cached_property
    def stack(self) -> Stack:
        """The training stack the plan is priced for (``planner.stacks``)."""
        return resolve_stack(self.training.stack)

    @cached_property
    def sm_count(self) -> int | None:
        from planner.catalog import sm_count

        return sm_count(self.gpu.id)

    @cached_property
    def gemm_efficiency(self) -> float:
        gid = self.gpu.id.lower()
        for prefix, eff in GEMM_EFFICIENCY.items():
            if gid.startswith(prefix):
                return eff
        return DEFAULT_GEMM_EFFICIENCY

    def layer(self, kind: str, mbs: int, tp: int, sp: bool) -> LayerProfile:
        key = ("layer", kind, mbs, tp, sp)
        lp = self.memo.get(key)
        if lp is None:
            lp = self.memo[key] = self._find_layer(kind, mbs, tp, sp)
        return lp

    def _find_layer(self, kind: str, mbs: int, tp: int, sp: bool) -> LayerProfile:
        lp = None
        if self.profile is not None:
            lp = self._profile_index.get((kind, mbs, self.training.seq_len, tp, sp))
        if lp is None and self.layer_fn is not None:
            lp = self.layer_fn(kind, mbs, tp, sp)
        if lp is None:
            from planner.analytic import layer_profile

            lp = layer_profile(
                self.model,
                kind,
                micro_batch_size=mbs,
                seq_len=self.training.seq_len,
                tp=tp,
                sequence_parallel=sp,
                precision=self.training.precision,
            )
        return lp

    # --- what the request's profile covers (a point it lacks is never priced silently as other hardware)

    @cached_property
    def _profile_index(self) -> dict[tuple, LayerProfile]:
        assert self.profile is not None
        return {
            (lp.kind, lp.micro_batch_size, lp.seq_len, lp.tp, lp.sequence_parallel): lp
            for lp in reversed(self.profile.layers)
        }

    @cached_property
    def profile_kinds(self) -> frozenset[str]:
        return frozenset(lp.kind for lp in self.profile.layers) if self.profile is not None else frozenset()

    def covers(self, mbs: int, tp: int, sp: bool) -> bool:
        """Whether the profile measured every layer kind it holds at (mbs, the request's seq_len, tp, sp);
        True without a profile."""
        if self.profile is None:
            return True
        key = ("covers", mbs, tp, sp)
        hit = self.memo.get(key)
        if hit is None:
            seq = self.training.seq_len
            hit = self.memo[key] = all((k, mbs, seq, tp, sp) in self._profile_index for k in self.profile_kinds)
        return hit

    @cached_property
    def profile_points(self) -> str:
        """The (mbs, tp, SP) points the profile covers at the request's seq_len, for notes."""
        assert self.profile is not None
        seq = self.training.seq_len
        pts = sorted(
            {(lp.micro_batch_size, lp.tp, lp.sequence_parallel) for lp in self.profile.layers if lp.seq_len == seq}
        )
        pts = [p for p in pts if self.covers(*p)]
        if not pts:
            return f"no point at seq_len {seq} (it has {sorted({lp.seq_len for lp in self.profile.layers})})"
        return ", ".join(f"mbs {b} tp {t}{' SP' if s else ''}" for b, t, s in pts)

    def time_ratio(self, kind: str) -> tuple[float, float, int] | None:
        """(forward, backward, points): the profile's measured time ÷ this model's analytic time, summed over
        its covered points of ``kind`` that have times (at the request's seq_len); None if it has none."""
        key = ("ratio", kind)
        if key not in self.memo:
            mf = mb = af = ab = 0.0
            k = 0
            for lp in self.profile.layers if self.profile is not None else []:
                if (
                    lp.kind != kind
                    or lp.seq_len != self.training.seq_len
                    or lp.fwd_time_s is None
                    or lp.bwd_time_s is None
                ):
                    continue
                f, b = analytic_time(self, lp, kind, lp.micro_batch_size, lp.tp, lp.sequence_parallel)
                mf, mb, af, ab, k = mf + lp.fwd_time_s, mb + lp.bwd_time_s, af + f, ab + b, k + 1
            self.memo[key] = (mf / af, mb / ab, k) if k and af > 0 and ab > 0 else None
        return self.memo[key]

    def gap_note(self, mbs: int, tp: int, sp: bool) -> str | None:
        """How a point the profile lacks was priced (None when it is covered or there is no profile)."""
        if self.covers(mbs, tp, sp):
            return None
        point = f"mbs {mbs}, tp {tp}{', SP' if sp else ''}, seq_len {self.training.seq_len}"
        scaled = []
        for kind in sorted(self.profile_kinds):
            r = self.time_ratio(kind)
            if r is not None:
                scaled.append(f"{kind} × {r[0]:.3g} fwd / {r[1]:.3g} bwd ({r[2]} points)")
        how = (
            (
                "analytic FLOPs and memory for this model; times analytic scaled by the profile's measured ÷ analytic "
                "ratio at its covered points: " + "; ".join(scaled)
            )
            if scaled
            else "analytic costs (the profile has no measured times to scale them by)"
        )
        return f"the profile does not cover {point} (it covers {self.profile_points}): extrapolated — {how}"


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
#: ``assets/flash2_a100_fwd_bwd_benchmark.png`` (head dim 64 and 128) and
#: ``assets/flash2_h100_fwd_bwd_benchmark.png`` (head dim 128), by GPU family and head dim.
FLASH_CAUSAL_TFLOPS: dict[tuple[str, int], tuple[tuple[int, float], ...]] = {
    ("a100", 64): ((512, 88), (1024, 119), (2048, 140), (4096, 156), (8192, 165), (16384, 171)),
    ("a100", 128): ((512, 99), (1024, 133), (2048, 155), (4096, 173), (8192, 182), (16384, 189)),
    ("h100", 128): ((512, 163), (1024, 221), (2048, 265), (4096, 294), (8192, 308), (16384, 328)),
}
#: H200 has H100's SMs and clocks (catalog): it uses H100's attention rates.
FLASH_FAMILY = {"a100": "a100", "h100": "h100", "h200": "h100"}
#: Backward ÷ forward FLOPs of a fused attention kernel (FlashAttention-2 Alg. 2: 5 s×s matmuls vs 2).
FLASH_BWD_RATIO = 2.5


def hbm_efficiency(nbytes: float) -> float:
    return next(eff for lo, eff in HBM_EFFICIENCY if nbytes >= lo)


def hbm_time(ctx: Context, nbytes: float) -> float:
    """Seconds to move ``nbytes`` in one kernel at the achieved HBM bandwidth for that size."""
    return nbytes / (ctx.gpu.hbm_bandwidth_GBps * 1e9 * hbm_efficiency(nbytes)) if nbytes > 0 else 0.0


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


def gemm_time(ctx: Context, m: int, n: int, k: int, count: int = 1, batched: bool = False) -> float:
    """Seconds of ``count`` M×N×K GEMMs (one batched kernel when ``batched``): the larger of their FLOPs at
    the large-GEMM ceiling × the wave/tile efficiency, and their operand and result bytes at achieved HBM."""
    sms = ctx.sm_count
    if batched:
        eff, calls = wave_efficiency(m, n, sms, count), 1
    else:
        eff, calls = wave_efficiency(m, n, sms), count
    fl = 2.0 * m * n * k * count
    by = (m * k + k * n + m * n) * ctx.elt * count
    return max(fl / (ctx.peak * ctx.gemm_efficiency * eff), calls * hbm_time(ctx, by / calls))


def gemm_shapes(model: ModelSpec, kind: str, tokens: int, tp: int) -> list[tuple[int, int, int, int]]:
    """Forward linear-layer GEMMs (M, N, K, count) of one layer on one TP rank (the attention core is
    priced by its kernel: ``attention_time``)."""
    h, hd = model.hidden_size, model.head_dim
    if kind == "transformer_block":
        q, kv, f = model.num_attention_heads * hd // tp, model.num_kv_heads * hd // tp, model.ffn_hidden_size // tp
        out = [(tokens, q, h, 1), (tokens, kv, h, 2), (tokens, h, q, 1), (tokens, f, h, 1), (tokens, h, f, 1)]
        if model.activation == "swiglu":
            out.append((tokens, f, h, 1))
        return out
    if kind == "lm_head":
        vocab = model.vocab_size // tp if model.vocab_size % tp == 0 else model.vocab_size
        return [(tokens, vocab, h, 1)]
    return []


def linear_times(ctx: Context, kind: str, tokens: int, tp: int) -> tuple[float, float, float]:
    """(forward s, backward s, forward FLOPs) of the layer's linear GEMMs: forward Y = X·W (M×N×K);
    backward the data gradient (M×K×N) and the weight gradient (K×N×M, reduced over the tokens)."""
    f = b = flops = 0.0
    for m, n, k, c in gemm_shapes(ctx.model, kind, tokens, tp):
        f += gemm_time(ctx, m, n, k, c)
        b += gemm_time(ctx, m, k, n, c) + gemm_time(ctx, k, n, m, c)
        flops += 2.0 * m * n * k * c
    return f, b, flops


def elementwise_bytes(ctx: Context, kind: str, mbs: int, tp: int, sp: bool) -> float:
    """HBM bytes moved by the memory-bound (non-GEMM) ops of one forward pass, attention excluded."""
    m, e = ctx.model, ctx.elt
    tokens = mbs * ctx.training.seq_len
    stream = tokens // tp if sp else tokens  # residual-stream tokens on this rank
    h = m.hidden_size
    if kind == "embedding":
        return 2.0 * stream * h * e  # gather + write
    if kind == "lm_head":
        vocab = m.vocab_size // tp if m.vocab_size % tp == 0 else m.vocab_size
        return 2.0 * stream * h * e + 3.0 * tokens * vocab * 4  # final norm; fp32 softmax cross-entropy
    f = m.ffn_hidden_size // tp
    b = 2 * 2 * stream * h * e + 2 * 3 * stream * h * e  # two norms, two residual adds
    b += (3 if m.activation == "swiglu" else 2) * tokens * f * e
    if m.family == "llama":
        b += 2 * tokens * (m.num_attention_heads + m.num_kv_heads) * m.head_dim // tp * e  # RoPE on q, k
    if ctx.stack.dropout:
        b += 2 * stream * h  # two hidden dropouts (fused with the residual add): 1-byte masks written
    return float(b)


def elementwise_time(ctx: Context, kind: str, mbs: int, tp: int, sp: bool) -> float:
    """Forward seconds of the memory-bound ops, each kernel moving about one residual-stream tensor in and out."""
    nbytes = elementwise_bytes(ctx, kind, mbs, tp, sp)
    stream = mbs * ctx.training.seq_len // (tp if sp else 1)
    return nbytes / (ctx.gpu.hbm_bandwidth_GBps * 1e9 * hbm_efficiency(2 * stream * ctx.model.hidden_size * ctx.elt))


def attention_core_flops(model: ModelSpec, mbs: int, seq: int, tp: int) -> float:
    return 4.0 * mbs * seq * seq * model.head_dim * model.num_attention_heads / tp


def flash_rate(ctx: Context, head_dim: int, seq: int) -> float | None:
    """FlashAttention-2 causal fwd+bwd TFLOP/s (FA's causal count) on this GPU, interpolated in log(seq)
    and clamped to the table; None when no published table covers the GPU."""
    fam = FLASH_FAMILY.get(ctx.gpu.id.lower()[:4])
    if fam is None or ctx.training.precision == "fp32":
        return None
    dims = sorted(d for f, d in FLASH_CAUSAL_TFLOPS if f == fam)
    d = next((x for x in dims if x >= head_dim), dims[-1])
    table = FLASH_CAUSAL_TFLOPS[(fam, d)]
    if seq <= table[0][0]:
        return table[0][1] * seq / table[0][0]  # below the table: shorter kernels, proportionally slower
    for (s0, r0), (s1, r1) in zip(table, table[1:]):
        if seq <= s1:
            import math

            w = math.log(seq / s0) / math.log(s1 / s0)
            return r0 + w * (r1 - r0)
    return table[-1][1]


def attention_time(ctx: Context, mbs: int, tp: int) -> tuple[float, float]:
    """(forward, backward) seconds of the attention core (QKᵀ, softmax, dropout, PV) of one block on one
    TP rank, by the stack's kernel (``planner.stacks``):

    * flash: the model's full-square FLOPs (4·b·s²·d·a/t forward, 2.5× backward) at the published
      FlashAttention-2 causal rate for (GPU, head dim, s) — which counts half the square, so the time is
      (FLOPs ÷ 2) ÷ rate; GPUs without a published table fall back to the two GEMMs at the GEMM ceiling;
    * unfused: the two batched GEMMs per direction (QKᵀ, PV forward; four in backward) on their rooflines,
      plus the b·(a/t)·s² scores read and written in HBM by the softmax (forward: read + write; backward:
      read probabilities and gradient, write gradient) and, with dropout, by the dropout (read, write, and a
      1-byte mask; backward: read gradient and mask, write)."""
    m, seq = ctx.model, ctx.training.seq_len
    d, heads = m.head_dim, mbs * m.num_attention_heads // tp
    if heads == 0:
        return 0.0, 0.0
    flops = attention_core_flops(m, mbs, seq, tp)
    if ctx.stack.attention == "flash":
        rate = flash_rate(ctx, d, seq)
        if rate is not None:
            total = (1 + FLASH_BWD_RATIO) * flops / 2 / (rate * 1e12)
            return total / (1 + FLASH_BWD_RATIO), total * FLASH_BWD_RATIO / (1 + FLASH_BWD_RATIO)
        fwd = gemm_time(ctx, seq, seq, d, heads, True) + gemm_time(ctx, seq, d, seq, heads, True)
        return fwd, FLASH_BWD_RATIO * fwd
    fwd = gemm_time(ctx, seq, seq, d, heads, True) + gemm_time(ctx, seq, d, seq, heads, True)
    bwd = gemm_time(ctx, seq, seq, d, heads, True) + 3 * gemm_time(ctx, seq, d, seq, heads, True)
    scores = heads * seq * seq
    e = ctx.elt
    fwd += hbm_time(ctx, 2 * scores * e)
    bwd += hbm_time(ctx, 3 * scores * e)
    if ctx.stack.dropout:
        fwd += hbm_time(ctx, 2 * scores * e + scores)
        bwd += hbm_time(ctx, 2 * scores * e + scores)
    return fwd, bwd


@dataclass(frozen=True)
class LayerTimes:
    fwd: float
    bwd: float  # including recomputation
    flops_fwd: float
    flops_bwd: float


def layer_times(ctx: Context, kind: str, mbs: int, tp: int, sp: bool, recompute: str) -> LayerTimes:
    key = ("times", kind, mbs, tp, sp, recompute)
    t = ctx.memo.get(key)
    if t is None:
        t = ctx.memo[key] = _layer_times(ctx, kind, mbs, tp, sp, recompute)
    return t


def analytic_parts(
    ctx: Context, lp: LayerProfile, kind: str, mbs: int, tp: int, sp: bool
) -> tuple[float, float, float, float]:
    """(forward, backward, attention-core forward, attention-core backward) seconds of ``lp``: its linear
    FLOPs at the per-shape GEMM times (``linear_times``, scaled to ``lp``'s FLOPs), its attention core by
    the stack's kernel (``attention_time``) and its memory-bound ops at achieved HBM bandwidth (backward
    moves twice the forward's bytes)."""
    seq = ctx.training.seq_len
    af = ab = 0.0
    if kind == "transformer_block":
        af, ab = attention_time(ctx, mbs, tp)
    att_flops = attention_core_flops(ctx.model, mbs, seq, tp) if kind == "transformer_block" else 0.0
    lf, lb, lin_flops = linear_times(ctx, kind, mbs * seq, tp)
    elem = elementwise_time(ctx, kind, mbs, tp, sp)
    scale_f = max(0.0, lp.fwd_flops - att_flops) / lin_flops if lin_flops > 0 else 0.0
    scale_b = max(0.0, lp.bwd_flops - FLASH_BWD_RATIO * att_flops) / (2 * lin_flops) if lin_flops > 0 else 0.0
    return lf * scale_f + af + elem, lb * scale_b + ab + 2 * elem, af, ab


def analytic_time(ctx: Context, lp: LayerProfile, kind: str, mbs: int, tp: int, sp: bool) -> tuple[float, float]:
    """Forward and backward seconds of ``lp`` by the per-op model (``analytic_parts``)."""
    f, b, _, _ = analytic_parts(ctx, lp, kind, mbs, tp, sp)
    return f, b


def _layer_times(ctx: Context, kind: str, mbs: int, tp: int, sp: bool, recompute: str) -> LayerTimes:
    lp = ctx.layer(kind, mbs, tp, sp)
    seq = ctx.training.seq_len
    if lp.fwd_time_s is not None and lp.bwd_time_s is not None:
        fwd, bwd = lp.fwd_time_s, lp.bwd_time_s
        att_share = min(1.0, attention_core_flops(ctx.model, mbs, seq, tp) / lp.fwd_flops) if lp.fwd_flops else 0.0
    else:
        fwd, bwd, af, _ = analytic_parts(ctx, lp, kind, mbs, tp, sp)
        att_share = af / fwd if fwd > 0 else 0.0
        ratio = ctx.time_ratio(kind) if ctx.profile is not None and not ctx.covers(mbs, tp, sp) else None
        if ratio is not None:  # a point the profile lacks: scaled to the profile's hardware (``Context.gap_note``)
            fwd, bwd = fwd * ratio[0], bwd * ratio[1]
    extra = 0.0
    if kind == "transformer_block" and recompute == "full":
        extra = fwd
    elif kind == "transformer_block" and recompute == "selective":
        extra = fwd * att_share  # the attention core's forward, rerun in backward
    flops_extra = lp.fwd_flops * (extra / fwd) if fwd > 0 else 0.0
    return LayerTimes(fwd, bwd + extra, lp.fwd_flops, lp.bwd_flops + flops_extra)
