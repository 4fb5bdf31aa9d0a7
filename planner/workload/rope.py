"""RoPE with YaRN's attention factor as Megatron-core applies it (gpt-oss on the megatron stack; issue 23).

YaRN scales RoPE's cos and sin by an attention ("concentration") factor, ``ModelSpec.rope_attention_factor``:
1 + 0.1·ln(factor) for a scaling factor > 1 (gpt-oss: 32 → 1.3466), the ratio of two such terms when the config
gives ``mscale`` and ``mscale_all_dim`` (DeepSeek-V3's equal pair: 1) — ``specs.rope.yarn_attention_factor``, Megatron-core
``megatron/core/models/common/embeddings/yarn_rotary_pos_embedding.py:223-242`` ``_yarn_get_mscale`` /
``_yarn_get_concentration_factor`` (NVIDIA/Megatron-LM 0d8e0714, the same at b0cc2706, 55ac7082, d7288711, 2edffadb:
the commits Megatron-Bridge v0.2.0 … v0.4.2 pin). Megatron-Bridge's gpt-oss provider builds the 120B with
``position_embedding_type="yarn"``, ``yarn_rotary_scaling_factor=32`` and no mscale pair
(``src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py:59-67`` at v0.2.0, v0.3.0, v0.3.1; ``gpt_oss_bridge.py:65,
94-100`` at v0.4.0).

Megatron-core's attention passes that factor to ``apply_rotary_pos_emb`` for the query and the key
(``transformer/attention.py:837-856`` at 0d8e0714), which runs TE's fused RoPE only when it is 1: ``mscale != 1.0``
warns "not supported by TE's fused RoPE. Using unfused implementation" (``rope_utils.py:279-284``; Megatron-Bridge
also turns ``apply_rope_fusion`` off for any non-"rope" position embedding: ``gpt_provider.py:199-200`` and
``utils/fusions.py:66-74`` at v0.2.0). The unfused ``_apply_rotary_pos_emb_bshd`` (``rope_utils.py:92-126``, with
``_rotate_half`` :73-84) is eager PyTorch on each of q and k, t of n elements at β bytes:

* ``cos_ = (torch.cos(freqs) * mscale).to(t.dtype)`` and the same for sin, on the fp32 ``freqs`` [s, 1, 1, d]:
  cos (read 4, write 4), the product (4, 4), the cast (4, 2) — 22 bytes a freqs element each, 6 kernels a call;
* ``t * cos_`` (read β, write β), ``_rotate_half``'s ``-x2`` on the half (β/2 + β/2) and ``torch.cat((-x2, x1))``
  (β, β), ``· sin_`` (β, β), the sum (2β, β) and the closing ``torch.cat((t, t_pass))`` (a copy: β, β): 12β an
  element in 6 kernels.

So a block's forward moves 12β·T·(a + g)·d/t + 2·44·s·d bytes in 24 kernels (``megatron_rope_op``) where TE's fused
kernel reads and writes each element once (``ops.op_bytes``: 2β, one kernel a tensor); its backward is priced as
every memory-bound op's (twice the forward's bytes and kernels). Other stacks apply their own RoPE (the factor
only changes the tables they precompute): unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.workload.ops import MemOp

if TYPE_CHECKING:
    from planner.workload.inputs import Inputs

#: Bytes of one fp32 freqs element through ``torch.cos`` (or sin), ``* mscale`` and ``.to(bf16/fp16)``: (4 + 4) +
#: (4 + 4) + (4 + 2) (``rope_utils.py:122-123``).
FREQS_BYTES = 22
#: Bytes an element of q or k per β: the product with cos, the neg and cat of rotate-half, the product with sin,
#: the sum and the closing cat (``rope_utils.py:84, 125-126``).
ELEMENT_BYTES_PER_BETA = 12
#: Kernels of one ``_apply_rotary_pos_emb_bshd`` call: 6 on freqs (cos, ·, cast; sin, ·, cast) + 6 on t.
CALL_KERNELS = 12


def runs_megatron_rope(ctx: Inputs) -> bool:
    """Whether the block's RoPE is Megatron-core's unfused one: a stack running Megatron-core's transformer layer
    (``Stack.moe_dispatch == "megatron"``: the megatron preset and those built on it) and a model whose YaRN factor
    is not 1, on multi-head (not latent) attention."""
    m = ctx.model
    return ctx.stack.moe_dispatch == "megatron" and m.rope_attention_factor != 1.0 and m.mla is None


def megatron_rope_op(ctx: Inputs, tokens: int, tp: int) -> MemOp:
    """The forward RoPE of one block on one TP rank as Megatron-core's ``_apply_rotary_pos_emb_bshd`` runs it on
    q (a/t heads) and k (g/t heads) of ``tokens`` tokens (module docstring): 12β an element, plus the two calls'
    cos/sin tables of s × d fp32 elements; 24 kernels."""
    m, e, s = ctx.model, ctx.elt, ctx.training.seq_len
    elements = tokens * (m.num_attention_heads + m.num_kv_heads) * m.head_dim // tp
    tables = 2 * 2 * FREQS_BYTES * s * m.head_dim  # two calls (q, k), cos and sin each
    return MemOp("rope", ELEMENT_BYTES_PER_BETA * e * elements + tables, 2 * CALL_KERNELS)
