"""A layer's ops as the per-op model counts them (issue 11 §1): its linear GEMMs by shape, the attention
core's FLOPs, the bytes of its memory-bound ops under the stack's kernels, the kernels it launches and its
parameter tensors. Plain data of (model, stack, configuration): ``planner.pricing`` prices them on a device."""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.specs import ModelSpec

if TYPE_CHECKING:
    from planner.workload.inputs import Inputs


def gemm_shapes(model: ModelSpec, kind: str, tokens: int, tp: int) -> list[tuple[int, int, int, int]]:
    """Forward linear-layer GEMMs (M, N, K, count) of one layer on one TP rank (the attention core is
    priced by its kernel: ``attention_time``)."""
    h, hd = model.hidden_size, model.head_dim
    if kind == "transformer_block":
        q, kv, f = model.num_attention_heads * hd // tp, model.num_kv_heads * hd // tp, model.ffn_hidden_size // tp
        out = [(tokens, q, h, 1), (tokens, kv, h, 2), (tokens, h, q, 1), (tokens, f, h, 1), (tokens, h, f, 1)]
        if model.activation == "swiglu":
            out.append((tokens, f, h, 1))
        return out
    if kind == "lm_head":
        vocab = model.vocab_size // tp if model.vocab_size % tp == 0 else model.vocab_size
        return [(tokens, vocab, h, 1)]
    return []


def op_bytes(ctx: Inputs) -> tuple[float, float, float]:
    """Forward HBM bytes per element of (norm, SwiGLU product per FFN element, RoPE per q/k element) under
    the stack's ``kernels``. ``fused`` (Transformer Engine / apex / Megatron kernels): each reads its input
    and writes its output once — norm 2e, SwiGLU 3e (read both halves, write one), RoPE 2e. ``eager``
    (one PyTorch kernel per op, each reading and writing its operands; runtime/models/transformer.py):
    composite RMSNorm (torchtitan's; the bundled runtime's RMSNorm is ``F.rms_norm``'s fused kernel, so its
    preset sets ``norm_kernel = "fused"``) = to-fp32 (e + 4), pow (8), mean (4), x·rstd (8), ·weight (8), cast back (4 + e) = 32 + 2e; SwiGLU = silu (2e) + product (3e) = 5e; RoPE = to-fp32 (e + 4), four
    products on halves (16), two sums on halves (12), stack (8), cast back (4 + e) = 44 + 2e. LayerNorm and
    GELU are single native kernels in both (2e). ``compiled`` (``torch.compile`` of each block, as
    torchtitan's ``training.compile``: Inductor fuses each chain of pointwise ops and reductions into one
    kernel that reads its inputs and writes its outputs once, torch/_inductor/scheduler.py): the fused
    figures, and each residual add fused into the norm that reads its result (``elementwise_bytes``).
    The stack's ``norm_kernel`` overrides the norm alone (e.g. torchtitan's Triton ``fused_rmsnorm``)."""
    e = ctx.elt
    st = ctx.stack
    eager_norm = 32.0 + 2 * e if ctx.model.norm == "rmsnorm" else 2.0 * e
    norm = 2.0 * e if st.norm_fused else eager_norm
    if st.kernels in ("fused", "compiled"):
        return norm, 3.0 * e, 2.0 * e
    # torchtitan's eager RoPE (``apply_rotary_emb``: to fp32 (e + 4), one complex product (4 + 4), cast
    # back (4 + e)) is 16 + 2e; the bundled runtime's rotate-half RoPE 44 + 2e (above)
    rope = 16.0 + 2 * e if st.activations == "titan" else 44.0 + 2 * e
    return norm, 5.0 * e, rope


def elementwise_bytes(ctx: Inputs, kind: str, mbs: int, tp: int, sp: bool) -> float:
    """HBM bytes moved by the memory-bound (non-GEMM) ops of one forward pass, attention excluded
    (per-element costs: ``op_bytes``)."""
    m, e = ctx.model, ctx.elt
    tokens = mbs * ctx.training.seq_len
    stream = tokens // tp if sp else tokens  # residual-stream tokens on this rank
    h = m.hidden_size
    norm, glu, rope = op_bytes(ctx)
    if kind == "embedding":
        return 2.0 * stream * h * e  # gather + write
    if kind == "lm_head":
        vocab = m.vocab_size // tp if m.vocab_size % tp == 0 else m.vocab_size
        return norm * stream * h + 3.0 * tokens * vocab * 4  # final norm; fp32 softmax cross-entropy
    f = m.ffn_hidden_size // tp
    b = 2 * norm * stream * h + 2 * 3 * stream * h * e  # two norms, two residual adds (read 2, write 1)
    if ctx.stack.kernels == "compiled":
        b -= stream * h * e  # the first add fused into the MLP norm: its sum is not read back
    b += (glu if m.activation == "swiglu" else 2 * e) * tokens * f
    if m.family == "llama":
        b += rope * tokens * (m.num_attention_heads + m.num_kv_heads) * m.head_dim // tp  # RoPE on q, k
    if ctx.stack.activations == "titan" and m.num_kv_heads < m.num_attention_heads:
        # torchtitan's repeat_kv (expand + reshape) copies K and V to the query heads before SDPA
        b += 2 * tokens * (m.num_kv_heads + m.num_attention_heads) * m.head_dim // tp * e
    if ctx.stack.dropout:
        # two hidden dropouts: fused with the residual add (apex/TE bias-dropout-add) they only write their
        # 1-byte masks; eager (``torch.nn.Dropout``, one kernel each) they also read and write the tensor
        b += 2 * stream * h * (1 if ctx.stack.kernels == "fused" else 2 * e + 1)
    return float(b)


def attention_core_flops(model: ModelSpec, mbs: int, seq: int, tp: int) -> float:
    return 4.0 * mbs * seq * seq * model.head_dim * model.num_attention_heads / tp


#: FlashAttention-2 kernels per call: forward 1; backward 3 (the dO·O row-sum preprocessing, the main
#: backward kernel and the dQ accumulator conversion: Dao-AILab/flash-attention
#: ``csrc/flash_attn/src/flash_bwd_launch_template.h``).
FLASH_KERNELS = (1, 3)


def op_kernels(ctx: Inputs) -> tuple[int, int, int]:
    """Forward kernels of (a norm, the activation of one FFN, RoPE on one tensor) under the stack's
    ``kernels``, from the op list ``op_bytes`` prices: fused kernels (``fused``: TE/apex; any other
    non-eager kind, e.g. compiled chains) one each; ``eager`` composite RMSNorm 6 (to-fp32, pow, mean,
    x·rstd, ·weight, cast back), SwiGLU 2 (silu, product), RoPE 9 (to-fp32, four products, two sums,
    stack, cast back; a complex-product RoPE as torchtitan's 3: to-fp32, product, cast back); LayerNorm and
    GELU are one native kernel in both. A stack whose norms are fused on their own (``norm_fused``) counts
    one per norm."""
    m, st = ctx.model, ctx.stack
    fused = st.kernels != "eager"
    norm = 1 if bool(getattr(st, "norm_fused", fused)) or m.norm != "rmsnorm" else 6
    act = 1 if fused or m.activation != "swiglu" else 2
    rope = 1 if fused else (3 if getattr(st, "activations", None) == "titan" else 9)
    return norm, act, rope


def kernel_counts(ctx: Inputs, kind: str, tp: int) -> tuple[int, int]:
    """(forward, backward) kernels one layer of ``kind`` issues per micro-batch, counted from the ops the
    per-op model prices: each linear GEMM call (``gemm_shapes``; backward: data and weight gradient), the
    attention core by the stack's kernel (flash: ``FLASH_KERNELS``; unfused: QKᵀ, softmax, [dropout], PV
    forward, four batched GEMMs and the softmax [and dropout] backward), and the memory-bound ops of
    ``elementwise_bytes`` (``op_kernels``; two residual adds with the dropout fused into them — one when
    compiled chains fuse an add into the next norm —, a K/V repeat copy each for K and V where the stack
    repeats them (torchtitan's ``repeat_kv``), embedding gather, fp32 cross-entropy in 3 kernels), whose
    backward issues twice the forward's kernels as it moves twice their bytes. Communication kernels are
    priced by ``planner.pricing.comm``, not here."""
    m, st = ctx.model, ctx.stack
    gemms = sum(c for *_, c in gemm_shapes(m, kind, 1, tp))
    norm, act, rope = op_kernels(ctx)
    att_f = att_b = 0
    if kind == "transformer_block":
        adds = 1 if str(st.kernels) == "compiled" else 2
        repeat = 2 if getattr(st, "activations", None) == "titan" and m.num_kv_heads < m.num_attention_heads else 0
        elem = 2 * norm + adds + act + (2 * rope if m.family == "llama" else 0) + repeat
        if st.attention == "flash":
            att_f, att_b = FLASH_KERNELS
        else:
            drop = 1 if st.dropout else 0
            att_f, att_b = 3 + drop, 5 + drop
    elif kind == "embedding":
        elem = 1
    elif kind == "lm_head":
        elem = norm + 3
    else:
        elem = 0
    return gemms + att_f + elem, 2 * gemms + att_b + 2 * elem


def block_linears(model: ModelSpec) -> int:
    """The ``nn.Linear`` modules of one transformer block of the bundled runtime (``runtime.models``):
    wq, wk, wv, wo, w1, w2 (+ w3 for SwiGLU) — each a ColwiseParallel/RowwiseParallel DTensor linear under TP."""
    return 7 if model.activation == "swiglu" else 6


def param_tensors(model: ModelSpec, kind: str) -> tuple[int, int]:
    """(parameter tensors, of which in TP-sharded linears) of one layer of ``kind`` in the bundled runtime:
    a block's two norms (weight, + bias for LayerNorm) and its linears (weight, + bias: every linear of a
    GPT, Q/K/V of a ``qkv_bias`` model); the embedding's token (+ GPT's position) table; the LM head's
    final norm and weight. The optimizer steps each tensor with its own ops (AdamW's per-tensor loop)."""
    norm = 2 if model.norm == "layernorm" else 1
    if kind == "transformer_block":
        lin = block_linears(model)
        bias = lin if model.family == "gpt" else (3 if model.qkv_bias else 0)
        return 2 * norm + lin + bias, lin + bias
    if kind == "embedding":
        return (2 if model.family == "gpt" else 1), 0
    if kind == "lm_head":
        return norm + 1, 0
    return 0, 0
