"""A host device (a CPU "GPU": ``runtime.report.host_spec``) and its measured dispatch by class
(``GpuSpec.host_dispatch``, measured by ``meshplan run``: ``runtime.host_dispatch``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.specs import HostDispatch
from planner.workload.ops import kernel_counts, param_tensors

if TYPE_CHECKING:
    from planner.pricing.device import Device


#: Devices whose host runs the ops itself (no asynchronous launch queue): a GpuSpec id starting with one
#: of these (``runtime.report.host_spec`` names the host ``cpu``).
HOST_DEVICES = ("cpu",)


def runs_on_host(ctx: Device) -> bool:
    """Whether the "GPU" is the host's processor: every kernel's launch overhead then adds to its time."""
    return ctx.gpu.id.lower().startswith(HOST_DEVICES)


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
