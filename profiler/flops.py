"""FLOP counting with ``torch.utils.flop_counter.FlopCounterMode``.

Use whole-layer totals only: forward FLOPs as counted at the end of the forward, backward FLOPs as
the total after the backward minus the forward (per-leaf attribution of backward ops is unreliable in
PyTorch 2.13, see docs/profiler.md; whole-module totals are exact).

PyTorch's registry has no formula for the fused CPU attention kernel
(``aten._scaled_dot_product_flash_attention_for_cpu`` and its backward), which FakeTensorMode and real
CPU tensors dispatch to, so it would count 0; ``SDPA_CPU_MAPPING`` gives it the registry's own
formulas for the CUDA flash kernel (``sdpa_flop_count``, ``sdpa_backward_flop_count``: forward 2 s×s
matmuls, backward 5, i.e. 2.5× forward).
"""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

aten = torch.ops.aten


def _cpu_flash_fwd(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_flash_bwd(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


SDPA_CPU_MAPPING = {
    aten._scaled_dot_product_flash_attention_for_cpu: _cpu_flash_fwd,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_flash_bwd,
}


def flop_counter() -> FlopCounterMode:
    """A silent counter that also counts the fused CPU attention kernel."""
    return FlopCounterMode(display=False, depth=None, custom_mapping=SDPA_CPU_MAPPING)
