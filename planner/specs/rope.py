"""YaRN's attention factor (``ModelSpec.rope_attention_factor``), as Megatron-core computes it from a YaRN config:
``megatron/core/models/common/embeddings/yarn_rotary_pos_embedding.py:223-242`` (``_yarn_get_mscale``,
``_yarn_get_concentration_factor``) at NVIDIA/Megatron-LM 0d8e0714. What it costs where it is not 1:
``planner.workload.rope``."""

from __future__ import annotations

import math


def yarn_attention_factor(factor: float, mscale: float | None = None, mscale_all_dim: float | None = None) -> float:
    """``get_mscale(factor)`` unless both ``mscale`` and ``mscale_all_dim`` are given, then their ratio;
    get_mscale(s, m) = 1 for s ≤ 1, else 0.1·m·ln(s) + 1 (gpt-oss: factor 32 → 1.3466; DeepSeek-V3's equal
    mscale pair → 1)."""

    def get_mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if mscale is None or mscale_all_dim is None:
        return get_mscale(factor)
    return get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
