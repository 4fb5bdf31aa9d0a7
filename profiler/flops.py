"""FLOP counting with ``torch.utils.flop_counter.FlopCounterMode``.

Use whole-layer totals only: forward FLOPs as counted at the end of the forward, backward FLOPs as
the total after the backward minus the forward (per-leaf attribution of backward ops is unreliable in
PyTorch 2.13, see docs/profiler.md; whole-module totals are exact).

PyTorch's registry has no formula for the fused CPU attention kernel
(``aten._scaled_dot_product_flash_attention_for_cpu`` and its backward), which FakeTensorMode and real
CPU tensors dispatch to, so it would count 0; ``SDPA_CPU_MAPPING`` gives it the registry's own
formulas for the CUDA flash kernel (``sdpa_flop_count``, ``sdpa_backward_flop_count``: forward 2 s×s
matmuls, backward 5, i.e. 2.5× forward). The same formulas are given to every fused SDPA kernel with
grouped-query attention's K/V heads counted as repeated (``_gqa``): PyTorch 2.11's own assert equal heads.
"""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

aten = torch.ops.aten


def _gqa(query_shape, key_shape, value_shape):
    """Key and value shapes with the query's heads: under grouped-query attention (``enable_gqa``) each
    query head attends its group's K/V head, so the FLOPs are those of K/V repeated to the query's heads
    (PyTorch 2.11's formulas assert equal heads; 2.13's accept either)."""
    heads = query_shape[1]
    return (*key_shape[:1], heads, *key_shape[2:]), (*value_shape[:1], heads, *value_shape[2:])


def _sdpa_fwd(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, *_gqa(query_shape, key_shape, value_shape))


def _sdpa_bwd(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_backward_flop_count(grad_out_shape, query_shape, *_gqa(query_shape, key_shape, value_shape))


#: Every fused attention kernel SDPA dispatches to (those this PyTorch has), forward and backward.
_SDPA_OPS = (
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
)
SDPA_CPU_MAPPING = {
    getattr(aten, op + suffix): fn
    for op in _SDPA_OPS
    for suffix, fn in (("", _sdpa_fwd), ("_backward", _sdpa_bwd))
    if hasattr(aten, op + suffix)
}


def flop_counter() -> FlopCounterMode:
    """A silent counter that also counts the fused CPU attention kernel."""
    return FlopCounterMode(display=False, depth=None, custom_mapping=SDPA_CPU_MAPPING)
