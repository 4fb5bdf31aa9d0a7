"""Forward/backward wall time and peak memory of one layer on a real device.

Times are medians over ``repeats`` runs after ``warmup`` runs. On CUDA they are measured with CUDA
events around the forward and around the backward (the GPU's own clock, no host overhead between
kernels); on CPU with ``time.perf_counter``.

Peak memory is the most bytes live during one forward + backward of the layer, its parameters,
gradients, input and activations included:
- CUDA: ``torch.cuda.max_memory_allocated`` (the caching allocator's own count).
- CPU: an approximation from tracked allocations, ``torch.distributed._tools.mem_tracker.MemTracker``
  (it records every tensor storage created and freed under a dispatch mode; it does not see the
  allocator's fragmentation or memory a kernel uses internally). ``None`` if the tracker is missing.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from torch import nn


def time_fwd_bwd(
    layer: nn.Module,
    make_input: Callable[[], torch.Tensor],
    device: torch.device,
    *,
    warmup: int = 2,
    repeats: int = 5,
) -> tuple[float, float]:
    """Median (forward, backward) seconds of ``layer(make_input())`` and its backward."""
    cuda = device.type == "cuda"
    fwd, bwd = [], []
    for i in range(warmup + repeats):
        x = make_input()
        if cuda:
            start, mid, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            torch.cuda.synchronize(device)
            start.record()
            out = layer(x)
            mid.record()
            out.backward(torch.ones_like(out))
            end.record()
            torch.cuda.synchronize(device)
            f, b = start.elapsed_time(mid) / 1e3, mid.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            out = layer(x)
            t1 = time.perf_counter()
            out.backward(torch.ones_like(out))
            t2 = time.perf_counter()
            f, b = t1 - t0, t2 - t1
        layer.zero_grad(set_to_none=True)
        del out, x
        if i >= warmup:
            fwd.append(f)
            bwd.append(b)
    return statistics.median(fwd), statistics.median(bwd)


def peak_memory(layer: nn.Module, make_input: Callable[[], torch.Tensor], device: torch.device) -> int | None:
    """Peak bytes live during one forward + backward (see the module docstring)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        x = make_input()
        out = layer(x)
        out.backward(torch.ones_like(out))
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device)
        layer.zero_grad(set_to_none=True)
        return int(peak)
    try:
        from torch.distributed._tools.mem_tracker import MemTracker
    except ImportError:  # a private tool: absent in some builds
        return None
    x = make_input()
    tracker = MemTracker()
    tracker.track_external(layer, x)
    with tracker:
        out = layer(x)
        out.backward(torch.ones_like(out))
    layer.zero_grad(set_to_none=True)
    snapshot = tracker.get_tracker_snapshot("peak")
    return int(sum(dev.get("Total", 0) for dev in snapshot.values()))
