"""Compute time of one layer (one micro-batch, one GPU) and the planner's ``Context``.

Compute per layer and micro-batch (see ``docs/planner.md`` for every constant):
  time = FLOPs / (peak × efficiency(shapes)) + elementwise bytes / HBM bandwidth,
  efficiency = Σ GEMM FLOPs / Σ roofline time of each GEMM at ``GEMM_EFFICIENCY`` of the peak;
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


def gemm_shapes(
    model: ModelSpec, kind: str, tokens: int, seq: int, mbs: int, tp: int
) -> list[tuple[int, int, int, int]]:
    """Forward GEMMs (M, N, K, count) of one layer on one TP rank."""
    h, hd = model.hidden_size, model.head_dim
    if kind == "transformer_block":
        q, kv, f = model.num_attention_heads * hd // tp, model.num_kv_heads * hd // tp, model.ffn_hidden_size // tp
        heads = mbs * model.num_attention_heads // tp
        out = [
            (tokens, q, h, 1),
            (tokens, kv, h, 2),
            (tokens, h, q, 1),
            (tokens, f, h, 1),
            (tokens, h, f, 1),
            (seq, seq, hd, heads),
            (seq, hd, seq, heads),
        ]
        if model.activation == "swiglu":
            out.append((tokens, f, h, 1))
        return out
    if kind == "lm_head":
        vocab = model.vocab_size // tp if model.vocab_size % tp == 0 else model.vocab_size
        return [(tokens, vocab, h, 1)]
    return []


def gemm_efficiency(ctx: Context, shapes: list[tuple[int, int, int, int]]) -> float:
    """Achieved fraction of peak over a list of GEMMs, each on its roofline."""
    flops = time = 0.0
    for mm, nn, kk, count in shapes:
        fl = 2.0 * mm * nn * kk * count
        by = (mm * kk + kk * nn + mm * nn) * ctx.elt * count
        flops += fl
        time += max(fl / (ctx.peak * ctx.gemm_efficiency), by / (ctx.gpu.hbm_bandwidth_GBps * 1e9))
    return flops / time / ctx.peak if time > 0 else ctx.gemm_efficiency


def elementwise_bytes(ctx: Context, kind: str, mbs: int, tp: int, sp: bool) -> float:
    """HBM bytes moved by the memory-bound (non-GEMM) ops of one forward pass."""
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
    return float(b)


def attention_core_flops(model: ModelSpec, mbs: int, seq: int, tp: int) -> float:
    return 4.0 * mbs * seq * seq * model.head_dim * model.num_attention_heads / tp


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


def analytic_time(ctx: Context, lp: LayerProfile, kind: str, mbs: int, tp: int, sp: bool) -> tuple[float, float]:
    """Forward and backward seconds of ``lp``'s FLOPs on the GEMM rooflines plus its elementwise bytes."""
    seq = ctx.training.seq_len
    hbm = ctx.gpu.hbm_bandwidth_GBps * 1e9
    eff = gemm_efficiency(ctx, gemm_shapes(ctx.model, kind, mbs * seq, seq, mbs, tp))
    elem = elementwise_bytes(ctx, kind, mbs, tp, sp)
    return lp.fwd_flops / (ctx.peak * eff) + elem / hbm, lp.bwd_flops / (ctx.peak * eff) + 2 * elem / hbm


def _layer_times(ctx: Context, kind: str, mbs: int, tp: int, sp: bool, recompute: str) -> LayerTimes:
    lp = ctx.layer(kind, mbs, tp, sp)
    seq = ctx.training.seq_len
    if lp.fwd_time_s is not None and lp.bwd_time_s is not None:
        fwd, bwd = lp.fwd_time_s, lp.bwd_time_s
    else:
        fwd, bwd = analytic_time(ctx, lp, kind, mbs, tp, sp)
        ratio = ctx.time_ratio(kind) if ctx.profile is not None and not ctx.covers(mbs, tp, sp) else None
        if ratio is not None:  # a point the profile lacks: scaled to the profile's hardware (``Context.gap_note``)
            fwd, bwd = fwd * ratio[0], bwd * ratio[1]
    extra = 0.0
    if kind == "transformer_block" and recompute == "full":
        extra = fwd
    elif kind == "transformer_block" and recompute == "selective" and lp.fwd_flops > 0:
        extra = fwd * min(1.0, attention_core_flops(ctx.model, mbs, seq, tp) / lp.fwd_flops)
    flops_extra = lp.fwd_flops * (extra / fwd) if fwd > 0 else 0.0
    return LayerTimes(fwd, bwd + extra, lp.fwd_flops, lp.bwd_flops + flops_extra)
