"""Saved activation bytes per layer, per GPU, by training stack (``planner.specs.stacks``): the bundled
runtime's PyTorch tensors (``block_saved_terms``: fused RMSNorm, GQA attention on unrepeated K/V; the table in ``planner.workload.analytic``'s docstring,
measured by tests/test_analytic_agreement.py) and Megatron-core + Transformer Engine's fused kernels
(``te_block_saved_terms``), torchtitan's Llama block in eager PyTorch (``titan_block_saved_terms``; its
op-level selective checkpointing keeps ``titan_sac_op_terms``), with the unfused-attention and dropout terms
of Korthikanti et al. (MLSys'23, §4.1) where the stack has them."""

from __future__ import annotations

import typing

from planner.specs import BYTES_PER_ELEMENT, ActivationBytes, LayerKind, ModelSpec
from planner.specs.errors import MeshplanError
from planner.specs.stacks import Stack

LAYER_KINDS: tuple[str, ...] = typing.get_args(LayerKind)
#: Bytes of the fp32 log-sum-exp a fused attention kernel keeps per (query, head).
LSE_BYTES = 4
#: Head-dimension columns the bundled runtime's attention-sink path adds to q, k, v (runtime.models.transformer
#: SINK_PAD: the sink's column and zeros to a multiple of 8; tests/test_analytic_agreement.py holds them equal).
SINK_PAD = 8


def _norm_saved(model: ModelSpec, tokens: float, e: int) -> float:
    """Bytes a norm keeps for backward besides its output (see ``planner.workload.analytic``'s table): LayerNorm
    (``nn.LayerNorm``) its input and mean, 1/σ in the activation dtype; RMSNorm (``runtime.models.RMSNorm``:
    PyTorch's fused kernel, or the same saved set where there is none) its input in the activation dtype and
    the fp32 1/rms."""
    h = model.hidden_size
    if model.norm == "layernorm":
        return tokens * (h + 2) * e
    return tokens * (h * e + 4)


def block_saved_terms(
    model: ModelSpec,
    micro_batch_size: int,
    seq_len: int,
    tp: int = 1,
    sequence_parallel: bool = False,
    precision: str = "bf16",
) -> dict[str, float]:
    """Bytes saved for backward by one block with no recomputation, by tensor (see the module table)."""
    e = BYTES_PER_ELEMENT[precision]
    b, s, h, f = micro_batch_size, seq_len, model.hidden_size, model.ffn_hidden_size
    T = b * s
    sp = tp if sequence_parallel else 1
    q = model.num_attention_heads * model.head_dim / tp  # local query width
    kv = model.num_kv_heads * model.head_dim / tp  # local K/V width: GQA kernels take K, V unrepeated
    mlp_tensors = 4 if model.activation == "swiglu" else 2
    rope = 2 * 2 * s * (model.head_dim // 2) * 4 if model.family == "llama" else 0
    terms = {
        "attn_norm_input": _norm_saved(model, T / sp, e),
        "qkv_input": T * h * e,
        "q_k_v": T * (q + 2 * kv) * e,
        "rope_tables": rope,
        "attn_output": T * q * e,
        "attn_logsumexp": b * s * (model.num_attention_heads / tp) * LSE_BYTES,
        "mlp_norm_input": _norm_saved(model, T / sp, e),
        "mlp_input": T * h * e,
        "mlp_hidden": mlp_tensors * T * f / tp * e,
    }
    if model.mla is not None:  # latent attention's tensors in place of multi-head attention's
        from planner.workload.moe import mla_zoo_saved_terms

        terms.update(mla_zoo_saved_terms(model, b, s, tp, e))
    return terms | zoo_attention_part_terms(model, b, s, tp, e)


def zoo_attention_part_terms(model: ModelSpec, b: int, s: int, tp: int, e: int) -> dict[str, float]:
    """What the bundled runtime's attention variants keep beyond ``block_saved_terms``' tensors (SelfAttention;
    measured on the meta device by tests/test_analytic_agreement.py), on one TP rank (the heads' q and k run on the
    whole sequence, so sequence parallelism does not shard them):

    * QK-norm (``qk_norm``): each RMSNorm's input (the projection's output, before the norm) in the activation
      dtype and its fp32 1/rms — per head and token with ``"head"`` (Qwen3), per token with ``"projection"``
      (OLMoE; the fused kernel's set, which the runtime's norm with an all-reduced sum of squares keeps too at
      tp > 1: ``runtime.models.transformer._ShardedRMSNorm``).
    * Sinks (``attention_sinks``, ``with_sink_key``): the kernel runs on T + 1 tokens at head_dim + SINK_PAD, so it
      keeps q, k, v and its output at that size (and the log-sum-exp on T + 1) instead of q, k, v and the
      log-sum-exp; the output projection then keeps its own contiguous input (``attn_output``). Recomputed with the
      attention core under ``selective`` recomputation, like the log-sum-exp."""
    T, d = b * s, model.head_dim
    a, g = model.num_attention_heads / tp, model.num_kv_heads / tp
    out: dict[str, float] = {}
    if model.qk_norm is not None:
        stats = (a + g) if model.qk_norm == "head" else 2
        out["qk_norm_inputs"] = T * (a + g) * d * e + T * stats * 4
    if model.attention_sinks:
        t1, d1 = b * (s + 1), d + SINK_PAD
        out["attn_sink_copies"] = (
            t1 * (2 * a + 2 * g) * d1 * e + t1 * a * LSE_BYTES - T * (a + 2 * g) * d * e - T * a * LSE_BYTES
        )
    return out


def saved_activation_bytes(
    model: ModelSpec,
    kind: str,
    micro_batch_size: int,
    seq_len: int,
    tp: int = 1,
    sequence_parallel: bool = False,
    precision: str = "bf16",
    stack: Stack | None = None,
) -> ActivationBytes:
    """Saved bytes per recompute mode under ``stack`` (``planner.specs.stacks``; None: the bundled runtime's)."""
    formula, attention, dropout = (
        (stack.activations, stack.attention, stack.dropout) if stack else ("zoo", "flash", False)
    )
    e = BYTES_PER_ELEMENT[precision]
    b, s, h = micro_batch_size, seq_len, model.hidden_size
    T = b * s
    sp = tp if sequence_parallel else 1
    if kind == "embedding":
        # embedding backward keeps the int64 token ids; GPT's positional lookup keeps its s position ids.
        ids = T * 8 + (s * 8 if model.family == "gpt" else 0)
        return ActivationBytes(none=ids, selective=ids, full=ids)
    if kind == "lm_head":
        # final norm input (sequence-sharded with SP) + the head's (gathered) input.
        if formula == "te":
            norm = T / sp * (h * e + 8)
        elif formula == "titan":
            norm = T / sp * titan_norm_bytes(h, e, "fused" if stack is not None and stack.norm_fused else "eager")
        else:
            norm = _norm_saved(model, T / sp, e)
        saved = int(norm + T * h * e)
        return ActivationBytes(none=saved, selective=saved, full=saved)
    if kind == "transformer_block" and formula == "titan":
        terms = titan_block_saved_terms(
            model,
            b,
            s,
            tp,
            sequence_parallel,
            precision,
            "fused" if stack is not None and stack.norm_fused else "eager",
        )
        if attention != "flash" or dropout:
            terms = attention_extra_terms(
                model, terms, b, s, tp, sequence_parallel, e, attention=attention, dropout=dropout
            )
        none = sum(terms.values())
        full = T / sp * h * e
        op = sum(titan_sac_op_terms(model, b, s, tp, sequence_parallel, precision).values())
        k = stack.selective_ac if stack is not None else "op"
        # per-layer selective AC: every k-th block keeps only its input, the others everything
        selective = op if k == "op" else (full + (int(k) - 1) * none) / int(k)
        return ActivationBytes(none=int(none), selective=int(selective), full=int(full))
    if kind == "transformer_block":
        saved_terms = te_block_saved_terms if formula == "te" else block_saved_terms
        terms = saved_terms(model, b, s, tp, sequence_parallel, precision)
        if attention != "flash" or dropout:
            terms = attention_extra_terms(
                model, terms, b, s, tp, sequence_parallel, e, attention=attention, dropout=dropout
            )
        none = sum(terms.values())
        return ActivationBytes(
            none=int(none),
            selective=int(
                none
                - terms["attn_logsumexp"]
                - terms.get("attn_scores", 0.0)
                - terms.get("attn_sink_copies", 0.0)
                - terms.get("attn_padded_output", 0.0)
            ),
            full=int(T / sp * h * e),
        )
    raise MeshplanError("kind", f"unknown layer kind {kind!r}", f"use one of {', '.join(LAYER_KINDS)}")


def output_activation_bytes(
    model: ModelSpec,
    kind: str,
    micro_batch_size: int,
    seq_len: int,
    tp: int = 1,
    sequence_parallel: bool = False,
    precision: str = "bf16",
) -> int:
    """Bytes of the layer's output (what a pipeline stage boundary sends): hidden states [b, s/sp, h]
    or, for the LM head, logits [b, s, V/t]."""
    e = BYTES_PER_ELEMENT[precision]
    T = micro_batch_size * seq_len
    if kind == "lm_head":
        from planner.workload.analytic import local_vocab

        return int(T * local_vocab(model, tp) * e)
    sp = tp if sequence_parallel else 1
    return int(T * model.hidden_size * e / sp)


def te_block_saved_terms(
    model: ModelSpec,
    micro_batch_size: int,
    seq_len: int,
    tp: int = 1,
    sequence_parallel: bool = False,
    precision: str = "bf16",
) -> dict[str, float]:
    """Bytes one block saves under Megatron-core + Transformer Engine (stack ``activations="te"``): fused
    LayerNorm/RMSNorm keeps its input in the activation dtype and fp32 statistics (μ and 1/σ; RMSNorm 1/rms
    only), and its output — sequence-sharded with SP (re-gathered in backward, TE layernorm_linear.py),
    whole without; Q at a/t heads, K and V at g/t heads (GQA-aware kernels); the attention output; the
    fc1 output and the activation output (GeLU 2·T·f/t, SwiGLU 3·T·f/t: TE layernorm_mlp.py). For a GPT
    block (g = a, f = 4h) with flash attention and no dropout this is (s·b·h/t)·32 with SP, i.e.
    Korthikanti et al.'s 34 without the two dropout masks (``attention_extra_terms`` adds them).

    Under FP8 (cost model 40) TE keeps each FP8 linear's input quantized, one usage at 1 byte an element: the norm
    outputs of ``LayerNormLinear`` (TE v2.9 layernorm_linear.py:186-193, 404-414: rowwise only to be re-gathered
    with SP, else columnwise only; saved at :448-458) and the inputs of ``Linear`` (linear.py:370-390, the proj's
    and fc2's), so the activation output fc2 reads is kept at 1 byte and the proj's input adds a 1-byte copy beside
    the attention output the attention core keeps for its own backward (16-bit); fc1's output, which the
    activation's backward reads, stays 16-bit. MXFP8's per-32 E8M0 scales (1/32 byte) are not counted."""
    e = BYTES_PER_ELEMENT[precision]
    q = 1 if precision == "fp8" else e  # a saved FP8 linear input (``e`` otherwise: the same 16-bit tensor)
    b, s, h, f, d = micro_batch_size, seq_len, model.hidden_size, model.ffn_hidden_size, model.head_dim
    T = b * s
    sp = tp if sequence_parallel else 1
    stats = 8 if model.norm == "layernorm" else 4
    norm = T / sp * (h * e + stats)
    out = {
        "attn_norm_input": norm,
        "qkv_input": T / sp * h * q,
        "q_k_v": T * (model.num_attention_heads + 2 * model.num_kv_heads) * d / tp * e,
        "attn_output": T * model.num_attention_heads * d / tp * (e + (q if q != e else 0)),
        "attn_logsumexp": b * s * (model.num_attention_heads / tp) * LSE_BYTES,
        "mlp_norm_input": norm,
        "mlp_input": T / sp * h * q,
        "mlp_hidden": ((2 if model.activation == "swiglu" else 1) * e + q) * T * f / tp,
    }
    if model.mla is not None:  # latent attention's tensors in place of multi-head attention's
        from planner.workload.moe import mla_saved_terms

        out.update(mla_saved_terms(model, b, s, tp, sequence_parallel, e))
    return out


def attention_extra_terms(
    model: ModelSpec,
    terms: dict[str, float],
    micro_batch_size: int,
    seq_len: int,
    tp: int,
    sp: bool,
    e: int,
    *,
    attention: str,
    dropout: bool,
) -> dict[str, float]:
    """``terms`` for an unfused attention kernel and/or dropout (Korthikanti et al. §4.1): unfused keeps the
    softmax output b·(a/t)·s²·e instead of the log-sum-exp, and with dropout also the 1-byte mask and the
    dropout output (the 5·a·s²·b/t term); dropout keeps two 1-byte hidden masks (T·h, /t with SP)."""
    out = dict(terms)
    scores = micro_batch_size * model.num_attention_heads / tp * seq_len * seq_len
    if attention == "unfused":
        out["attn_logsumexp"] = 0.0
        out["attn_scores"] = scores * e + (scores * (1 + e) if dropout else 0.0)
    if dropout:
        out["dropout_masks"] = 2 * micro_batch_size * seq_len / (tp if sp else 1) * model.hidden_size
    return out


def titan_norm_bytes(h: int, e: int, norm_kernel: str = "eager") -> float:
    """Bytes per token one torchtitan RMSNorm keeps (``titan_block_saved_terms``): composite 4h + 4 + e·h
    (fp32 input, fp32 1/rms, normalised input), Triton fused e·h + 4 (input, fp32 1/rms)."""
    return e * h + 4 if norm_kernel == "fused" else 4 * h + 4 + e * h


def titan_block_saved_terms(
    model: ModelSpec,
    micro_batch_size: int,
    seq_len: int,
    tp: int = 1,
    sequence_parallel: bool = False,
    precision: str = "bf16",
    norm_kernel: str = "eager",
) -> dict[str, float]:
    """Bytes one torchtitan Llama block keeps for backward without recomputation (stack
    ``activations="titan"``), tensor by tensor, from its eager PyTorch code (pytorch/torchtitan
    torchtitan/models/llama/model.py and models/norms.py at 9dec370, the commit of its 2024-12 H100
    benchmarks; TP plan in parallelisms/parallelize_llama.py):

    * each norm, sequence-sharded under TP (``SequenceParallel``): composite ``RMSNorm``
      (``self._norm(x.float()).type_as(x) * self.weight``, ``norm_kernel="eager"``) keeps the fp32 input
      (pow, mul), the fp32 1/rms and the normalised input in the activation dtype (× weight); torchtitan's
      Triton ``fused_rmsnorm`` (``norm_kernel="fused"``) keeps its input and the fp32 1/rms
      (``ctx.save_for_backward(x, weight, rstd)``). The norm output is the next linears' input, all-gathered
      to the whole sequence under TP (``PrepareModuleInput``), kept once;
    * RoPE (complex product with ``freqs_cis``, which needs no gradient) keeps nothing of q and k;
    * ``repeat_kv`` copies K and V to the query heads before ``F.scaled_dot_product_attention``; the flash
      kernel keeps q, the repeated k and v, its output and the fp32 log-sum-exp; its output is returned as
      a transposed view of a [b, s, heads, d] tensor, so ``wo``'s ``transpose(1, 2).contiguous()`` input is
      that same tensor;
    * SwiGLU ``w2(silu(w1(x)) * w3(x))``: w1's output (silu), silu's output and w3's output (the product)
      and the product (w2's input), all at f/t.
    """
    e = BYTES_PER_ELEMENT[precision]
    b, s, h, f, d = micro_batch_size, seq_len, model.hidden_size, model.ffn_hidden_size, model.head_dim
    T = b * s
    sp = tp if sequence_parallel else 1
    q = model.num_attention_heads * d / tp
    norm = T / sp * (titan_norm_bytes(h, e, norm_kernel))
    return {
        "attn_norm_input": norm,
        "qkv_input": T * h * e,
        "sdpa_q_k_v_repeated": 3 * T * q * e,
        "attn_output": T * q * e,
        "attn_logsumexp": T * (model.num_attention_heads / tp) * LSE_BYTES,
        "mlp_norm_input": norm,
        "mlp_input": T * h * e,
        "mlp_hidden": (4 if model.activation == "swiglu" else 2) * T * f / tp * e,
    }


def titan_sac_op_terms(
    model: ModelSpec,
    micro_batch_size: int,
    seq_len: int,
    tp: int = 1,
    sequence_parallel: bool = False,
    precision: str = "bf16",
) -> dict[str, float]:
    """Bytes one torchtitan block keeps under op-level selective activation checkpointing
    (``selective_ac_option = "op"``; ``_save_list`` in torchtitan parallelisms/parallelize_llama.py at
    9dec370): the checkpoint wrapper keeps the block's input, the policy keeps the outputs of every
    *odd* ``aten.mm`` of the block (forward order wq, wk, wv, wo, w1, w3, w2: wq, wv, w1 and w2 — w2's
    is its whole local [T, h] product, before TP's reduce-scatter), of the flash SDPA (output and fp32
    log-sum-exp) and of TP's ``reduce_scatter_tensor`` (wo's and w2's, sequence-sharded); everything
    else (norms, RoPE, K/V repeat, silu, the even mms, TP's all-gathers) is recomputed in backward."""
    e = BYTES_PER_ELEMENT[precision]
    b, s, h, f, d = micro_batch_size, seq_len, model.hidden_size, model.ffn_hidden_size, model.head_dim
    T = b * s
    sp = tp if sequence_parallel else 1
    q, kv = model.num_attention_heads * d / tp, model.num_kv_heads * d / tp
    out = {
        "block_input": T / sp * h * e,
        "mm_wq": T * q * e,
        "mm_wv": T * kv * e,
        "sdpa_output": T * q * e,
        "sdpa_logsumexp": T * (model.num_attention_heads / tp) * LSE_BYTES,
        # SwiGLU's mms run w1, w3, w2 (w1 and w2 odd); a GELU MLP's fc1, fc2 (fc1 odd)
        "mm_w1": T * f / tp * e,
        "mm_w2": T * h * e if model.activation == "swiglu" else 0.0,
    }
    if tp > 1:
        out["reduce_scatter_outputs"] = 2 * T / tp * h * e
    return out
