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
from planner.kernels import (
    FLASH_BWD_RATIO,
    attention_core_flops,
    attention_time,
    elementwise_time,
    gemm_time,
    host_layer_dispatch,
    kernel_counts,
    linear_times,
    with_launches,
)
from planner.specs import (
    BYTES_PER_ELEMENT,
    Calibration,
    ClusterSpec,
    GpuSpec,
    LayerProfile,
    ModelSpec,
    NetworkProfile,
    Profile,
    Residuals,
    TrainingSpec,
)
from planner.stacks import Stack
from planner.stacks import resolve as resolve_stack

#: Fraction of the dense datasheet peak a large GEMM reaches (cuBLAS, "maximum achievable matmul
#: FLOPS" microbenchmarks: stas00/ml-engineering ``compute/accelerator`` table, mamf-finder:
#: A100 SXM bf16 ≈ 268 of 312 TFLOPS, H100 SXM bf16 ≈ 792 of 989; V100 fp16 tensor cores: cuBLAS
#: ``volta_h884gemm_128x128`` at 8192³ ≈ 101 of the 112 TFLOPS of a V100 PCIe, 90 %, NVIDIA developer
#: forums topic 79781, 2019). Used for every GPU without a measured profile; shapes below the roofline
#: ridge are charged by their bytes instead.
GEMM_EFFICIENCY = {"a100": 0.86, "h100": 0.80, "h200": 0.80, "b200": 0.80, "v100": 0.90}
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
    #: The user's calibration (``PlanRequest.calibration``): its residuals replace the built-in ones.
    calibration: Calibration | None = None
    #: Values derived once per context (layer profiles and times, shared terms, class costs), by key.
    memo: dict[Any, Any] = field(default_factory=dict, repr=False)

    @cached_property
    def comm(self) -> comm_mod.CommModel:
        return comm_mod.CommModel.for_cluster(self.cluster, self.gpu, self.network, scale=self.residuals.comm_scale)

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
    def residuals(self) -> Residuals:
        """The residual constants this context prices with (``planner.specs.calibration``): the user's
        calibration when given, else the built-in row for (stack, GPU generation) fitted on published runs
        (``planner.residuals.builtin_residuals``), else identity."""
        if self.calibration is not None:
            return self.calibration.residuals
        from planner.residuals import builtin_residuals

        return builtin_residuals(self.stack.id, self.gpu.id)

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
                stack=self.stack,
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
    # The residuals (``Context.residuals``), each on its own term: × GEMMs and attention core, × memory-bound
    # ops, + launch overhead per kernel (``kernels.with_launches``). Identity residuals change nothing.
    r = ctx.residuals
    cs, ms = r.compute_scale, r.memory_scale
    kf, kb = kernel_counts(ctx, kind, tp)
    # + a host device's measured dispatch per op (``kernels.host_layer_dispatch``; zero on a GPU), × the
    # compute residual: on a host the same processor dispatches and computes
    hf, hb = (cs * x for x in host_layer_dispatch(ctx, kind, tp))
    fwd = with_launches(ctx, cs * (lf * scale_f + af) + ms * elem, kf) + hf
    bwd = with_launches(ctx, cs * (lb * scale_b + ab) + ms * (2 * elem), kb) + hb
    return fwd, bwd, cs * af, cs * ab


def analytic_time(ctx: Context, lp: LayerProfile, kind: str, mbs: int, tp: int, sp: bool) -> tuple[float, float]:
    """Forward and backward seconds of ``lp`` by the per-op model (``analytic_parts``)."""
    f, b, _, _ = analytic_parts(ctx, lp, kind, mbs, tp, sp)
    return f, b


def selective_share(ctx: Context, mbs: int, tp: int, sp: bool, att_share: float) -> float:
    """Fraction of a block's forward that ``recompute: selective`` reruns in backward, by the stack:

    * torchtitan activations (``Stack.activations == "titan"``), op-level policy (``selective_ac = "op"``):
      every op whose output the policy does not keep (``activations.titan_sac_op_terms``) — the even
      ``aten.mm`` calls (wk, wo, w3; a GELU MLP's fc2) and all memory-bound ops (norms, RoPE, K/V repeat,
      silu, products, residual adds); not the flash attention nor the odd mms;
    * torchtitan per-layer (``selective_ac = k``): every k-th block's whole forward, 1/k on average;
    * other stacks (Megatron's selective recompute): the attention core's forward (``att_share``)."""
    st = ctx.stack
    if st.activations != "titan":
        return att_share
    if st.selective_ac != "op":
        return 1.0 / int(st.selective_ac)
    key = ("sac_share", mbs, tp, sp)
    hit = ctx.memo.get(key)
    if hit is None:
        lp = ctx.layer("transformer_block", mbs, tp, sp)
        f, _, _, _ = analytic_parts(ctx, lp, "transformer_block", mbs, tp, sp)
        m, tokens = ctx.model, mbs * ctx.training.seq_len
        q, kv, ffn = (
            m.num_attention_heads * m.head_dim // tp,
            m.num_kv_heads * m.head_dim // tp,
            m.ffn_hidden_size // tp,
        )
        h = m.hidden_size
        even = gemm_time(ctx, tokens, kv, h) + gemm_time(ctx, tokens, h, q)
        even += gemm_time(ctx, tokens, ffn, h) if m.activation == "swiglu" else gemm_time(ctx, tokens, h, ffn)
        r = ctx.residuals  # the same residuals as the forward it is a share of
        rerun = r.compute_scale * even + r.memory_scale * elementwise_time(ctx, "transformer_block", mbs, tp, sp)
        hit = ctx.memo[key] = min(1.0, rerun / f) if f > 0 else 0.0
    return float(hit)


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
        extra = fwd * selective_share(ctx, mbs, tp, sp, att_share)
    flops_extra = lp.fwd_flops * (extra / fwd) if fwd > 0 else 0.0
    return LayerTimes(fwd, bwd + extra, lp.fwd_flops, lp.bwd_flops + flops_extra)
