"""A host device (a CPU "GPU": ``runtime.report.host_spec``) and its measured dispatch by class
(``GpuSpec.host_dispatch``, measured by ``meshplan run``: ``runtime.host_dispatch``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.specs import HostDispatch
from planner.workload.ops import kernel_counts, param_tensors

if TYPE_CHECKING:
    from planner.pricing.device import Device


def runs_on_host(ctx: Device) -> bool:
    """Whether the "GPU" is the host's processor (``GpuSpec.kind``): every kernel's launch overhead then adds to
    its time (no asynchronous launch queue)."""
    return ctx.gpu.on_host


def host_slowdown(ctx: Device) -> float:
    """How much longer a rank's host work takes than alone on a core: 1/``HostDispatch.cpu_share`` on a host
    device whose ranks share its cores (more single-thread ranks than cores: the scheduler time-slices them
    fairly), else 1. The measured inputs of such a run arrive already scaled (``runtime.report``); this
    scales the residuals fitted per rank alone (``kernel_overhead_us``, ``step_overhead_s``)."""
    hd = host_dispatch(ctx)
    return 1.0 / hd.cpu_share if hd is not None and hd.cpu_share else 1.0


def host_dispatch(ctx: Device) -> HostDispatch | None:
    """The host's measured dispatch costs when the "GPU" is the host's processor (``runs_on_host``) and
    ``meshplan run`` measured them (``runtime.host_dispatch``); None otherwise (every GPU: identity)."""
    return ctx.gpu.host_dispatch if runs_on_host(ctx) else None


def host_fsdp_hooks(ctx: Device, kind: str) -> tuple[float, float]:
    """(forward, backward) seconds of the FSDP2 hooks (``replicate``/``fully_shard``) of one layer of ``kind``
    per micro-batch on a host: the bundled runtime wraps every block and the chunk (whose own tensors are the
    embedding's and the LM head's; its module part is counted with the embedding), each wrapped module
    costing its part plus a part per parameter tensor it holds (``param_tensors``; measured). Zero without a
    measurement; older measurements without the per-tensor part priced per module alone."""
    hd = host_dispatch(ctx)
    if hd is None:
        return 0.0, 0.0
    n = param_tensors(ctx.model, kind)[0]
    module = 0 if kind == "lm_head" else 1
    per_f, per_b = hd.fsdp_param_fwd_us or 0.0, hd.fsdp_param_bwd_us or 0.0
    return (module * hd.fsdp_module_fwd_us + n * per_f) * 1e-6, (module * hd.fsdp_module_bwd_us + n * per_b) * 1e-6


def host_layer_dispatch(ctx: Device, kind: str, tp: int) -> tuple[float, float]:
    """(forward, backward) seconds of host dispatch one layer of ``kind`` adds per micro-batch beyond its
    ops' compute: every op the per-op model counts (``kernel_counts`` forward ops, each with autograd and
    a backward) at the measured plain-op cost. Zero without a measurement (``host_dispatch``)."""
    hd = host_dispatch(ctx)
    if hd is None:
        return 0.0, 0.0
    ops, _ = kernel_counts(ctx, kind, tp)
    return ops * hd.op_fwd_us * 1e-6, ops * hd.op_bwd_us * 1e-6


def host_step_dispatch(ctx: Device, tp: int, sp: bool, dp: int) -> list[float]:
    """Seconds per layer kind (block, embedding, LM head) of a host's AdamW and gradient-clip dispatch at the end
    of a step, per parameter tensor: DTensors under the FSDP2 wrappers (dp > 1) and in TP-sharded modules (with SP
    the block's norms too: ``SequenceParallel``), plain tensors otherwise; × the compute residual. Zeros on a GPU."""
    hd = host_dispatch(ctx)
    per_kind = [0.0, 0.0, 0.0]
    if hd is None:
        return per_kind
    for i, kind in enumerate(("transformer_block", "embedding", "lm_head")):
        n, sharded = param_tensors(ctx.model, kind)
        dt = n if dp > 1 or (tp > 1 and sp and kind == "transformer_block") else (sharded if tp > 1 else 0)
        us = dt * hd.adam_dtensor_us + (n - dt) * hd.adam_plain_us
        us += dt * (hd.clip_dtensor_us or 0.0) + (n - dt) * (hd.clip_plain_us or 0.0)  # the gradient clip
        per_kind[i] = ctx.residuals.compute_scale * us * 1e-6
    return per_kind


def dtensor_linear_dispatch(ctx: Device, linears: int, recompute: str) -> tuple[float, float]:
    """(forward, backward) seconds a host adds per block for its ``linears`` DTensor linears (TP-sharded) beyond
    plain ones (``HostDispatch.tp_linear_*_us``), again in backward under full recomputation, × the compute
    residual (the processor that computes also dispatches). Zeros on a GPU."""
    hd = host_dispatch(ctx)
    if hd is None:
        return 0.0, 0.0
    cs = ctx.residuals.compute_scale
    again = hd.tp_linear_fwd_us if recompute == "full" else 0.0
    return cs * linears * hd.tp_linear_fwd_us * 1e-6, cs * linears * (hd.tp_linear_bwd_us + again) * 1e-6


def hooks_measured(ctx: Device) -> bool:
    """Whether the work around each block's compute — FSDP2's copy-out/copy-in, the gradient-accumulation pass — is
    inside the device's measured per-block hooks (a host: ``HostDispatch``, ``fsdp_hook_times``) rather than priced
    kernel by kernel (a GPU)."""
    return host_dispatch(ctx) is not None


def prefetch_overlaps(ctx: Device) -> bool:
    """Whether ZeRO-3's per-layer gathers and reduce-scatters run beside the layer's compute (a GPU: prefetched
    on a side stream) or add to it (a host: FSDP2 calls gloo's collectives synchronously, the processor waits)."""
    return host_dispatch(ctx) is None


def fsdp_hook_times(ctx: Device, dp: int) -> tuple[list[float], list[float]] | None:
    """(forward, backward) seconds per layer (block, embedding, LM head) and micro-batch of a host's FSDP2 hooks:
    the bundled runtime wraps every block and the chunk (``replicate``/``fully_shard``, any ZeRO stage) when
    dp > 1 (``host_fsdp_hooks``), × the compute residual. None on a GPU (or dp = 1)."""
    if host_dispatch(ctx) is None or dp <= 1:
        return None
    cs = ctx.residuals.compute_scale  # on a host the processor that computes also dispatches
    hooks = [host_fsdp_hooks(ctx, kind) for kind in ("transformer_block", "embedding", "lm_head")]
    return [cs * f for f, _ in hooks], [cs * b for _, b in hooks]
