"""Kernels a host launches one after another (``chain``), and the small kernels DeepSpeed v0.5.0's ZeRO-3 and
PyTorch's list collectives issue around each parameter's all-gather and gradient reduce-scatter (``Kernels``), priced
with the device's launch cost (``launch_seconds``: ``gpu.GPU_LAUNCH_US`` + the ``kernel_overhead_us`` residual) and
achieved HBM bandwidth by size (``gpu.hbm_time``). Read at microsoft/DeepSpeed v0.5.0 (f28432441b; ``pp`` =
deepspeed/runtime/zero/partition_parameters.py, ``stage3`` = deepspeed/runtime/zero/stage3.py) and PyTorch's
``ProcessGroupNCCL`` of the v1.9 era (torch/lib/c10d/ProcessGroupNCCL.cpp, stored at 00f5dfd570 — the file's place up
to v1.9; it moved to torch/csrc/distributed/c10d for v1.10 — not read at the v1.9.0 tag here):

* a list all-gather (``dist.all_gather(tensor_list, tensor)``, what ``_allgather_param`` calls per parameter,
  pp:863-866) is ``ProcessGroupNCCL::allgather``: ``flatten_for_scatter_gather`` allocates a flat output, NCCL gathers
  into it, and the post-hook copies each of the world size's slices out, one ``outputTensors[i][j].copy_(
  outputFlattened[i][j], true)`` per rank on the NCCL stream (the ``collective(..., post)`` lambda) — ``ranks``
  copies of n / ranks elements after each gather (``gather_copy``), each its own launch;
* a list reduce-scatter (``dist.reduce_scatter(output, input_list)``, ``_reduce_scatter_gradient``, pp:965-1003:
  the inputs are views of the gradient) is ``ProcessGroupNCCL::reduce_scatter``: the pre-hook copies each input into
  the flat input, one ``inputFlattened[i][j].copy_(inputTensors[i][j], true)`` per rank on the NCCL stream, before
  NCCL's kernel (``scatter_copy``);
* ``_allgather_param`` first zero-fills the gathered buffer (``torch.zeros(aligned_param_size)``, pp:838-840:
  ``fill``), synchronizes the device (pp:845) and copies its own shard in (pp:861: ``shard``), all on DeepSpeed's
  ``comm_stream`` (``_all_gather`` under ``torch.cuda.stream(self.comm_stream)``, stage3:521-525);
* ``average_tensor`` divides each gradient of a bucket by the dp size before reducing it (``tensor.div_``,
  stage3:1985-1986: ``div``) on the reduction stream;
* ``fetch_sub_module`` formats every parameter of the fetched module with its norm into a debug message whatever the
  log level (``print_rank_0(f"... norm={param.norm()}", force=False)``, stage3:452-457: the f-string is built before
  the call, stage3:38-41), and a 0-dim tensor formats through ``self.item()`` (PyTorch ``Tensor.__format__``,
  torch/_tensor.py): a norm kernel over the gathered parameter (``norm``) and a copy to the host that waits for
  the compute stream, at every fetch (forward, recompute, backward) of every module with parameters.

A kernel cannot start before the host has launched it: after the host waits for the device (a synchronize, an
``.item()``) the device idles for the first launch, and a host that launches ``ranks`` copies per collective spends
``ranks`` launches doing so (``chain``). Not priced: the Python of DeepSpeed's per-rank ``narrow`` loops (pp:857-861,
973-995) and the zero-filled pads of a last partial slice (pp:981-993).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from planner.pricing.device import Device
from planner.pricing.gpu import GPU_LAUNCH_US, hbm_time


def launch_seconds(ctx: Device) -> float:
    """Seconds of one kernel launch from eager PyTorch on a GPU: ``GPU_LAUNCH_US`` + the ``kernel_overhead_us``
    residual (as ``gpu.with_launches`` charges each kernel)."""
    return (GPU_LAUNCH_US + ctx.residuals.kernel_overhead_us) * 1e-6


def chain(free: float, host: float, count: int, launch: float, each: float) -> float:
    """When the last of ``count`` kernels of ``each`` seconds ends on a stream free at ``free``, the host launching
    them one after another from ``host``, ``launch`` seconds apiece, each starting no earlier than its launch's end:
    end_k = max(end_{k−1}, host + k·launch) + each, end_0 = free — whose unrolled maximum is linear in k, so at
    k = 1 or k = count."""
    if count <= 0:
        return free
    return max(free + count * each, host + launch + count * each, host + count * launch + each)


@dataclass(frozen=True, slots=True)
class Kernels:
    """The launch cost, the dp ``ranks``, the bytes per element of the gathered parameters (``elt``) and of the
    reduced gradients (``grad_elt``), and ``hbm(nbytes)``: seconds of one memory-bound kernel moving nbytes."""

    launch: float
    ranks: int
    elt: float
    grad_elt: float
    hbm: Callable[[float], float]

    def part(self, n: int) -> int:
        """Elements per rank of an n-element parameter (DeepSpeed pads it to a multiple of the ranks, pp:823-829)."""
        return math.ceil(n / self.ranks)

    def fill(self, n: int) -> float:
        return self.hbm(self.part(n) * self.ranks * self.elt)

    def shard(self, n: int) -> float:
        return self.hbm(2 * self.part(n) * self.elt)

    def gather_copy(self, n: int) -> float:
        return self.hbm(2 * self.part(n) * self.elt)

    def scatter_copy(self, n: int) -> float:
        return self.hbm(2 * self.part(n) * self.grad_elt)

    def div(self, n: int) -> float:
        return self.hbm(2 * n * self.grad_elt)

    def norm(self, n: int) -> float:
        return self.hbm(n * self.elt)


def zero3_kernels(ctx: Device, ranks: int, elt: float, grad_elt: float) -> Kernels:
    """``Kernels`` on this GPU (``launch_seconds``, ``gpu.hbm_time``; a handful of sizes, each priced once)."""

    @cache
    def hbm(nbytes: float) -> float:
        return hbm_time(ctx, nbytes)

    return Kernels(launch_seconds(ctx), ranks, elt, grad_elt, hbm)
