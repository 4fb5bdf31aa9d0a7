"""The op lists of the blocks a dense GPT/Llama block does not cover (``planner.workload.ops.linears`` asks here):
multi-head latent attention (``ModelSpec.mla``) and mixture-of-experts MLPs (``ModelSpec.moe``, layer kind
``MOE_BLOCK``). Parameters (total and active), FLOPs and GEMM shapes of these blocks are read off these lists like
every other block's.

Latent attention (DeepSeek-V2/V3, arXiv 2405.04434 §2.1; HF ``modeling_deepseek_v3``): ``wq_a`` (h → q_lora_rank)
and ``wkv_a`` (h → kv_lora_rank + qk_rope_head_dim, the shared latent and the rotary key) are replicated under TP,
as Megatron-core's down projections; ``wq_b`` (q_lora_rank → heads·(nope + rope)), ``wkv_b`` (kv_lora_rank →
heads·(nope + v)) are column-parallel and ``wo`` (heads·v → h) row-parallel. Without ``q_lora_rank`` the query is
one column-parallel ``wq`` (h → heads·(nope + rope)).

A MoE MLP: the ``router`` (h → E, replicated), the routed experts as three grouped linears (``experts_w1``,
``experts_w3``: h → f; ``experts_w2``: f → h; each E weights of which a token passes through its top-k) and the
shared experts as one SwiGLU MLP of shared_experts × their width (as DeepSeek-V3's ``DeepseekV3MLP`` of
``moe_intermediate_size × n_shared_experts``). Expert and shared widths are split by TP here (expert tensor
parallelism = TP, Megatron-core's default); expert parallelism is not modelled yet.
"""

from __future__ import annotations

from dataclasses import replace

from planner.specs import ModelSpec
from planner.workload.ops import MOE_BLOCK, Linear, MemOp, dense_block_linears


def mla_linears(model: ModelSpec, tp: int) -> tuple[Linear, ...]:
    """A latent-attention block's attention linears on one TP rank, in call order."""
    mla = model.mla
    if mla is None:
        return ()
    h, heads = model.hidden_size, model.num_attention_heads // tp
    out = []
    if mla.q_lora_rank is not None:
        out.append(Linear("wq_a", mla.q_lora_rank, h, 0, "wq_a", 0, sharded=False))
        out.append(Linear("wq_b", heads * mla.qk_head_dim, mla.q_lora_rank, 0, "wq_b", 1))
    else:
        out.append(Linear("wq", heads * mla.qk_head_dim, h, 0, "wq", 0))
    c = len(out)
    out.append(Linear("wkv_a", mla.kv_lora_rank + mla.qk_rope_head_dim, h, 0, "wkv_a", c, sharded=False))
    out.append(Linear("wkv_b", heads * (mla.qk_nope_head_dim + mla.v_head_dim), mla.kv_lora_rank, 0, "wkv_b", c + 1))
    out.append(Linear("wo", h, heads * mla.v_head_dim, 0, "wo", c + 2))
    return tuple(out)


def moe_linears(model: ModelSpec, tp: int, call: int = 0) -> tuple[Linear, ...]:
    """A MoE MLP's linears on one TP rank, in call order from ``call``: the router, the routed experts (grouped)
    and the shared experts."""
    moe = model.moe
    if moe is None:
        return ()
    h, e, k = model.hidden_size, moe.num_experts, moe.top_k
    f = moe.expert_ffn_hidden_size // tp

    def eb(size: int) -> int:
        return size if moe.expert_bias else 0

    out = [
        Linear("router", e, h, e if moe.router_bias else 0, "router", call, sharded=False),
        Linear("experts_w1", f, h, eb(f), "experts_w1", call + 1, experts=e, routed=k),
        Linear("experts_w3", f, h, eb(f), "experts_w3", call + 2, experts=e, routed=k),
        Linear("experts_w2", h, f, eb(h), "experts_w2", call + 3, experts=e, routed=k),
    ]
    if moe.shared_experts:
        fs = moe.shared_experts * moe.shared_ffn // tp
        out += [
            Linear("shared_w1", fs, h, 0, "shared_w1", call + 4),
            Linear("shared_w3", fs, h, 0, "shared_w3", call + 5),
            Linear("shared_w2", h, fs, 0, "shared_w2", call + 6),
        ]
    return tuple(out)


def block_linears_of(model: ModelSpec, kind: str, tp: int) -> tuple[Linear, ...]:
    """The linears of a block with latent attention or MoE MLPs (``kind``: ``"transformer_block"`` for a dense
    MLP, ``MOE_BLOCK``): its attention (latent, else ``dense_block_linears``' first four) then its MLP."""
    dense = dense_block_linears(model, tp)
    attention = mla_linears(model, tp) if model.mla is not None else dense[:4]
    if kind == MOE_BLOCK:
        return attention + moe_linears(model, tp, len(attention))
    shift = len(attention) - 4  # the dense MLP's calls follow the attention's
    return attention + tuple(replace(lin, call=lin.call + shift) for lin in dense[4:])


def attention_other_params(model: ModelSpec, tp: int = 1) -> tuple[int, ...]:
    """A block's attention parameter tensors outside its linears on one TP rank: latent attention's norms of the
    query and key/value latents and per-head query and key RMSNorms (Qwen3: head_dim each, shared by the heads),
    replicated; query and key RMSNorms over the projection (OLMoE: heads·d and kv_heads·d) and a sink logit per head
    (gpt-oss), split with their heads (runtime.parallelize.apply_attention_tp; Megatron-core's softmax_offset too)."""
    out: list[int] = []
    if model.mla is not None:
        if model.mla.q_lora_rank is not None:
            out.append(model.mla.q_lora_rank)
        out.append(model.mla.kv_lora_rank)
    if model.qk_norm == "head":
        out += [model.head_dim, model.head_dim]
    elif model.qk_norm == "projection":
        out += [model.num_attention_heads * model.head_dim // tp, model.num_kv_heads * model.head_dim // tp]
    if model.attention_sinks:
        out.append(model.num_attention_heads // tp)
    return tuple(out)


def mla_memory_ops(
    model: ModelSpec,
    tokens: int,
    tp: int,
    e: int,
    per: tuple[float, float],
    kernels: tuple[int, int],
    pad_v: bool = False,
) -> list[MemOp]:
    """Latent attention's memory-bound ops of one forward pass on one TP rank (Megatron-core
    ``MLASelfAttention``, megatron/core/transformer/multi_latent_attention.py): the query and key/value latents'
    RMSNorms (q_lora_rank and kv_lora_rank wide, on every rank: the down projections are not split), RoPE on the
    query's rope part (heads/t · rope dim) and on the one rotary key shared by the heads, and the concatenation of
    each query and key from its no-rope and rope parts (the rotary key copied to every head): read + write of
    heads/t · qk head dim per token each. ``per``: bytes per element of (a norm, RoPE) (``ops.op_bytes``),
    ``kernels``: their kernels (``ops.op_kernels``). ``pad_v`` (``Stack.mla_pad_v``, the bundled runtime's
    ``runtime.models.mla``) with v narrower than q/k: ``F.pad`` of v to the q/k width (ATen's ``constant_pad_nd``:
    a fill of the padded tensor, then v copied in: 2 kernels) and the sliced kernel output copied contiguous for
    ``wo`` (read + write at v's width: 1 kernel)."""
    mla = model.mla
    if mla is None:
        return []
    (norm, rope), (k_norm, k_rope) = per, kernels
    heads = model.num_attention_heads // tp
    latents = (mla.q_lora_rank or 0) + mla.kv_lora_rank
    ops = [
        MemOp("norm", norm * tokens * latents, k_norm * (2 if mla.q_lora_rank else 1)),
        MemOp("rope", rope * tokens * (heads + 1) * mla.qk_rope_head_dim, 2 * k_rope),
        MemOp("concat", 2 * 2 * tokens * heads * mla.qk_head_dim * e, 2),
    ]
    if pad_v and mla.v_head_dim < mla.qk_head_dim:
        ops.append(MemOp("pad_v", tokens * heads * (mla.qk_head_dim + 2 * mla.v_head_dim) * e, 2))
        ops.append(MemOp("slice_out", 2 * tokens * heads * mla.v_head_dim * e, 1))
    return ops


def mla_saved_terms(model: ModelSpec, b: int, s: int, tp: int, sequence_parallel: bool, e: int) -> dict[str, float]:
    """Bytes latent attention keeps for backward on one TP rank without recomputation, in place of multi-head
    attention's ``qkv_input``/``q_k_v``/``attn_output``/``attn_logsumexp`` (Megatron-core ``MLASelfAttention``
    with Transformer Engine: ``activations="te"``): the down projections' shared input (sequence-sharded with SP:
    they run on the local tokens before the latents are gathered); each latent's fused norm-linear up projection
    its input, normalised output and fp32 1/rms (q_lora_rank and kv_lora_rank wide, whole sequence); the rotary
    key's input; the flash kernel's q, k (qk head dim) and v (v head dim) per local head, its output (v head dim)
    and fp32 log-sum-exp."""
    mla = model.mla
    if mla is None:
        return {}
    T, heads = b * s, model.num_attention_heads / tp
    sp = tp if sequence_parallel else 1
    latents = (mla.q_lora_rank or 0) + mla.kv_lora_rank
    return {
        "qkv_input": T / sp * model.hidden_size * e,
        "latents": T * (2 * latents * e + 4 * (2 if mla.q_lora_rank else 1)) + T * mla.qk_rope_head_dim * e,
        "q_k_v": T * heads * (2 * mla.qk_head_dim + mla.v_head_dim) * e,
        "attn_output": T * heads * mla.v_head_dim * e,
        "attn_logsumexp": T * heads * 4,
    }


def mla_zoo_saved_terms(model: ModelSpec, b: int, s: int, tp: int, e: int) -> dict[str, float]:
    """Bytes the bundled runtime's latent attention (``runtime.models.mla.LatentAttention``) keeps for backward on one
    TP rank without recomputation, in place of multi-head attention's terms of ``activations.block_saved_terms``
    (measured on the meta device by tests/test_analytic_agreement.py). Everything runs on the whole sequence (with
    SP the block's input is gathered first): the down projections' shared input; the query latent's RMSNorm input
    and fp32 1/rms and its output (``wq_b``'s input); the key/value norm's input, a view of ``wkv_a``'s whole output
    (latent and rotary key: the storage is kept), its 1/rms and output; the RoPE tables (cos, sin) of the query's and
    the key's rope parts; the attention kernel's q and k (heads × qk head dim), v — padded to the qk head dim when
    narrower (else a view of ``wkv_b``'s whole output: k_nope and v) —, its output and fp32 log-sum-exp; with padding
    the kernel's output is the padded one and ``wo`` keeps its own copy of the sliced output (``attn_padded_output``
    is dropped with the core under selective recomputation, like the log-sum-exp)."""
    mla = model.mla
    if mla is None:
        return {}
    T, heads, qk, v = b * s, model.num_attention_heads / tp, mla.qk_head_dim, mla.v_head_dim
    padded = v < qk
    q_latent = T * (2 * mla.q_lora_rank * e + 4) if mla.q_lora_rank is not None else 0.0
    return {
        "qkv_input": T * model.hidden_size * e,
        "latents": q_latent + T * ((2 * mla.kv_lora_rank + mla.qk_rope_head_dim) * e + 4),
        "q_k_v": T * heads * (2 * qk + (qk if padded else mla.qk_nope_head_dim + v)) * e,
        "rope_tables": 2 * 2 * s * (mla.qk_rope_head_dim // 2) * 4,
        "attn_output": T * heads * v * e,
        "attn_padded_output": T * heads * qk * e if padded else 0.0,
        "attn_logsumexp": T * heads * 4,
    }
