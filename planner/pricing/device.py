"""The device a plan is priced on (``Device``: the request's ``Inputs`` and what follows from the GPU — its
peak, GEMM ceiling, SMs, the collective model, the residuals, the memory a plan may use), and the memory a
device keeps from tensors."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from planner.pricing import comm as comm_mod
from planner.pricing.residuals import builtin_residuals
from planner.specs import Residuals
from planner.specs.catalog import sm_count
from planner.workload.inputs import Inputs

if TYPE_CHECKING:
    from planner.pricing.layer_times import LayerTimes

#: Fraction of the dense datasheet peak a large GEMM reaches (cuBLAS, "maximum achievable matmul
#: FLOPS" microbenchmarks: stas00/ml-engineering ``compute/accelerator`` table, mamf-finder:
#: A100 SXM bf16 ≈ 268 of 312 TFLOPS, H100 SXM bf16 ≈ 792 of 989; V100 fp16 tensor cores: cuBLAS
#: ``volta_h884gemm_128x128`` at 8192³ ≈ 101 of the 112 TFLOPS of a V100 PCIe, 90 %, NVIDIA developer
#: forums topic 79781, 2019). Used for every GPU without a measured profile; shapes below the roofline
#: ridge are charged by their bytes instead.
GEMM_EFFICIENCY = {"a100": 0.86, "h100": 0.80, "h200": 0.80, "b200": 0.80, "v100": 0.90}


DEFAULT_GEMM_EFFICIENCY = 0.80


GIB = 1024**3


#: Fixed device memory not available to tensors: CUDA context, NCCL and cuBLAS workspaces.
FIXED_RESERVE_BYTES = 1 * GIB


#: Caching-allocator fragmentation allowance, as a fraction of the tensor bytes.
FRAGMENTATION = 0.05


#: Default fraction of the GPU's memory left unused by a plan (``SearchOptions.memory_headroom``): what the
#: model does not count — caching-allocator spikes beyond the average fragmentation, NCCL buffers that grow
#: with more communicators, library workspaces, and the error of the activation estimate. 5 % (4 GiB of
#: 80) keeps plans below 95 % of HBM unless asked; 0 plans to the byte.
DEFAULT_MEMORY_HEADROOM = 0.05


def usable_bytes(gpu_memory_gib: float, headroom: float = 0.0) -> int:
    """Tensor bytes a GPU holds once the headroom (a fraction of its memory) and the reserve are taken:
    the largest t with t + reserve(t) ≤ (1 − headroom) · memory. The one place that says what fits."""
    return int(((1.0 - headroom) * gpu_memory_gib * GIB - FIXED_RESERVE_BYTES) / (1 + FRAGMENTATION))


def reserve_bytes(tensor_bytes: float) -> float:
    return FIXED_RESERVE_BYTES + FRAGMENTATION * tensor_bytes


def with_reserve_gib(tensor_bytes: float) -> float:
    """GiB a GPU needs for ``tensor_bytes`` of tensors, the reserve included."""
    return (tensor_bytes + reserve_bytes(tensor_bytes)) / GIB


#: A layer's times at one point: (kind, micro-batch size, tp, sequence parallel, recompute).
TimesKey = tuple[str, int, int, bool, str]


@dataclass
class Device(Inputs):
    """The request's inputs with the device's figures derived from them, and the layer times priced so far."""

    times_cache: dict[TimesKey, LayerTimes] = field(default_factory=dict, init=False, repr=False, compare=False)
    #: ``layer_times.analytic_parts`` of the layer's profile at (kind, micro-batch size, tp, sequence parallel): a
    #: block's recompute modes and selective recomputation's share read the same (``layer_times.parts``)
    parts_cache: dict[tuple[str, int, int, bool], tuple[float, float, float, float]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    #: Selective recomputation's share of a block's forward, by (micro-batch size, tp, sequence parallel).
    sac_cache: dict[tuple[int, int, bool], float] = field(default_factory=dict, init=False, repr=False, compare=False)
    #: The profile's measured ÷ analytic time ratio, by layer kind (``time_ratio``).
    ratio_cache: dict[str, tuple[float, float, int] | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    #: GEMM seconds by (m, n, k, count, batched, fp8, split accumulator) (``gpu.gemm_time``: a MoE model's search
    #: prices the same expert shapes for many layouts)
    gemm_cache: dict[tuple[int, int, int, int, bool, bool, bool], float] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    #: ``grad_add.grad_add_seconds`` by its arguments (every shared key of a MoE model asks it of the same layers)
    grad_add_cache: dict[tuple, tuple[tuple[float, ...], tuple[float, ...]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @cached_property
    def comm(self) -> comm_mod.CommModel:
        return comm_mod.CommModel.for_cluster(
            self.cluster, self.gpu, self.network, scale=self.residuals.comm_scale, nccl_era=self.stack.nccl
        )

    @cached_property
    def usable_bytes(self) -> int:
        """Tensor bytes per GPU a plan may use (``memory.usable_bytes`` with this context's headroom)."""
        return usable_bytes(self.gpu.memory_gib, self.memory_headroom)

    @cached_property
    def peak(self) -> float:
        """Peak FLOP/s of the 16-bit (or fp32) work; FP8 GEMMs use ``fp8_peak``."""
        return self.gpu.peak_flops(self.compute_precision)

    @cached_property
    def fp8_peak(self) -> float:
        """Peak FLOP/s of an FP8 GEMM (the datasheet's dense FP8 rate; ``check_fp8`` refused a GPU without)."""
        return self.gpu.peak_flops("fp8")

    @cached_property
    def residuals(self) -> Residuals:
        """The residual constants this context prices with (``planner.specs.calibration``): the user's
        calibration when given, else the built-in row for (stack, GPU generation) fitted on published runs
        (``planner.pricing.residuals.builtin_residuals``), else identity."""
        if self.calibration is not None:
            return self.calibration.residuals
        return builtin_residuals(self.stack.id, self.gpu.id)

    @cached_property
    def sm_count(self) -> int | None:
        return sm_count(self.gpu.id)

    @cached_property
    def gemm_efficiency(self) -> float:
        gid = self.gpu.id.lower()
        for prefix, eff in GEMM_EFFICIENCY.items():
            if gid.startswith(prefix):
                return eff
        return DEFAULT_GEMM_EFFICIENCY

    def time_ratio(self, kind: str) -> tuple[float, float, int] | None:
        """(forward, backward, points): the profile's measured time ÷ this model's analytic time, summed over
        its covered points of ``kind`` that have times (at the request's seq_len); None if it has none."""
        from planner.pricing.layer_times import analytic_time

        if kind not in self.ratio_cache:
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
            self.ratio_cache[kind] = (mf / af, mb / ab, k) if k and af > 0 and ab > 0 else None
        return self.ratio_cache[kind]

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
