"""A layer's ops — one list per layer kind — as the per-op model counts them (issue 11 §1): its linears (the
GEMMs, by shape, and their parameters), the attention core, its other parameter tensors (norms, tables) and its
memory-bound ops with their bytes and kernels under the stack's kernels. Plain data of (model, stack,
configuration): FLOPs, parameter counts, parameter tensors, GEMM shapes, memory-bound bytes and kernel counts
are all read off these lists (``planner.workload.analytic``), and ``planner.pricing`` prices them on a device."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

from planner.specs import ModelSpec
from planner.specs.vocab import local_vocab

if TYPE_CHECKING:
    from planner.workload.inputs import Inputs


@dataclass(frozen=True, slots=True)
class Linear:
    """One linear of a layer on one TP rank, Y = X·W: ``n`` output and ``k`` input features here, so its forward
    is a tokens × n × k GEMM and its weight holds n·k parameters (+ ``bias``). Linears of one ``gemm`` are one
    priced GEMM of that many calls (K and V); ``call`` is its place in the forward's call order; ``sharded``: a
    TP-sharded linear of the bundled runtime (a DTensor under TP)."""

    name: str
    n: int
    k: int
    bias: int
    gemm: str
    call: int
    sharded: bool = True
    #: A grouped linear (a MoE layer's routed experts): ``experts`` weights of n × k, of which each token passes
    #: through ``routed`` (its top-k). 1 and 1 for every other linear.
    experts: int = 1
    routed: int = 1
    #: Whether its three GEMMs (output, input gradient, weight gradient) run in FP8 (``planner.workload.fp8``:
    #: a block's linears under ``training.precision: "fp8"``); False in the op lists of ``linears``.
    fp8: bool = False

    @property
    def params(self) -> int:
        """Parameters held: every expert's weight and bias."""
        return (self.n * self.k + self.bias) * self.experts

    @property
    def active_params(self) -> int:
        """Parameters one token uses: the experts it is routed to."""
        return (self.n * self.k + self.bias) * self.routed


@dataclass(frozen=True, slots=True)
class MemOp:
    """A memory-bound op of one forward pass: the HBM bytes it moves and the kernels it launches."""

    name: str
    nbytes: float
    kernels: int


#: The layer kind of a block whose MLP is a mixture of experts (``planner.workload.moe``); dense blocks are
#: ``"transformer_block"``. ``block_kinds(model)`` is the sequence of a model's blocks.
MOE_BLOCK = "moe_block"


def block_kinds(model: ModelSpec) -> tuple[str, ...]:
    """The kind of each of the model's blocks, first to last: ``"transformer_block"`` for every block of a dense
    model; a MoE model's dense leading layers and every ``moe_layer_freq``-th layer after them (``MOE_BLOCK``)."""
    if model.moe is None:
        return ("transformer_block",) * model.num_layers
    return tuple(MOE_BLOCK if model.is_moe_layer(i) else "transformer_block" for i in range(model.num_layers))


#: ``linears`` by model (its id, with a weak reference to tell a new model at a reused id), then (kind, tp): the
#: search asks it thousands of times per request for a handful of answers (DeepSeek-V3 on 2,048 H100: 8,442 calls).
_LINEARS: dict[int, tuple[weakref.ref[ModelSpec], dict[tuple[str, int], tuple[Linear, ...]]]] = {}
_LINEARS_MODELS = 16  # models remembered at most (then forgotten all at once)


def linears(model: ModelSpec, kind: str, tp: int) -> tuple[Linear, ...]:
    """``model_linears``, memoised per model (a ``ModelSpec`` is frozen: changed copies are new objects)."""
    entry = _LINEARS.get(id(model))
    if entry is None or entry[0]() is not model:
        if len(_LINEARS) >= _LINEARS_MODELS:
            _LINEARS.clear()
        entry = _LINEARS[id(model)] = (weakref.ref(model), {})
    got = entry[1].get((kind, tp))
    if got is None:
        got = entry[1][(kind, tp)] = model_linears(model, kind, tp)
    return got


def model_linears(model: ModelSpec, kind: str, tp: int) -> tuple[Linear, ...]:
    """The linears of one layer of ``kind`` on one TP rank: a block's wq, wk, wv (column-parallel), wo
    (row-parallel), w1 (+ w3 for SwiGLU; column-parallel) and w2 (row-parallel) — with biases on every linear of
    a GPT (column-parallel biases split t ways, row-parallel ones replicated) and on Q/K/V of a ``qkv_bias``
    model; the LM head's output projection (vocabulary-parallel when t divides V). A block of latent attention
    (``model.mla``) or of a ``moe_block`` takes its attention or its MLP from ``planner.workload.moe``."""
    h = model.hidden_size
    if kind == "lm_head":
        return (Linear("output", local_vocab(model, tp), h, 0, "output", 0, sharded=False),)
    if kind == MOE_BLOCK or (kind == "transformer_block" and model.mla is not None):
        from planner.workload.moe import block_linears_of

        return block_linears_of(model, kind, tp)
    if kind != "transformer_block":
        return ()
    return dense_block_linears(model, tp)


def dense_block_linears(model: ModelSpec, tp: int) -> tuple[Linear, ...]:
    """A block's multi-head / grouped-query attention (wq, wk, wv, wo: the first four) and dense MLP linears on
    one TP rank (``linears``); wo has a bias on a GPT and with ``attention_out_bias``."""
    h, hd = model.hidden_size, model.head_dim
    q, kv, f = model.num_attention_heads * hd // tp, model.num_kv_heads * hd // tp, model.ffn_hidden_size // tp
    gpt = model.family == "gpt"
    qkv = gpt or model.qkv_bias

    def b(size: int, on: bool) -> int:
        return size if on else 0

    out = [
        Linear("wq", q, h, b(q, qkv), "wq", 0),
        Linear("wk", kv, h, b(kv, qkv), "kv", 1),
        Linear("wv", kv, h, b(kv, qkv), "kv", 2),
        Linear("wo", h, q, b(h, gpt or model.attention_out_bias), "wo", 3),
        Linear("w1", f, h, b(f, gpt), "w1", 4),
    ]
    if model.activation == "swiglu":  # w2(silu(w1(x)) · w3(x)): w3 called before w2
        return (*out, Linear("w2", h, f, b(h, gpt), "w2", 6), Linear("w3", f, h, b(f, gpt), "w3", 5))
    return (*out, Linear("w2", h, f, b(h, gpt), "w2", 5))


def other_params(model: ModelSpec, kind: str, tp: int) -> tuple[int, ...]:
    """The sizes of a layer's parameter tensors outside its linears: a block's two norms and the LM head's final
    norm (weight, + bias for LayerNorm); the embedding's token table (vocabulary-parallel when t > 1 divides V)
    and a GPT's learned positions (replicated)."""
    h = model.hidden_size
    norm = (h, h) if model.norm == "layernorm" else (h,)
    if kind in ("transformer_block", MOE_BLOCK):
        if model.mla is not None or model.qk_norm is not None or model.attention_sinks:
            from planner.workload.moe import attention_other_params

            return norm + norm + attention_other_params(model, tp)
        return norm + norm
    if kind == "lm_head":
        return norm
    if kind == "embedding":
        vocab = local_vocab(model, tp)
        return (vocab * h, model.max_seq_len * h) if model.family == "gpt" else (vocab * h,)
    return ()


def gemm_shapes(model: ModelSpec, kind: str, tokens: int, tp: int) -> list[tuple[int, int, int, int]]:
    """Forward linear-layer GEMMs (M, N, K, count) of one layer on one TP rank (``linears``, one per ``gemm``;
    the attention core is priced by its kernel: ``attention_time``)."""
    out: dict[str, list[int]] = {}
    for lin in linears(model, kind, tp):
        if lin.gemm in out:
            out[lin.gemm][3] += lin.experts
        else:  # a grouped linear: one GEMM per expert of its average share of the routed tokens
            out[lin.gemm] = [tokens * lin.routed // lin.experts, lin.n, lin.k, lin.experts]
    return [(m, n, k, c) for m, n, k, c in out.values()]


def linear_flops(model: ModelSpec, kind: str, tokens: int, tp: int) -> int:
    """Forward FLOPs of a layer's linears on one TP rank: 2·tokens·n·k each (× the experts a token is routed to)."""
    return sum(2 * tokens * lin.n * lin.k * lin.routed for lin in linears(model, kind, tp))


def params(model: ModelSpec, kind: str, tp: int = 1) -> int:
    """Parameters of one layer of ``kind`` held by one TP rank: its linears' weights and biases and its other
    tensors (``linears``, ``other_params``)."""
    return sum(lin.params for lin in linears(model, kind, tp)) + sum(other_params(model, kind, tp))


def active_params(model: ModelSpec, kind: str) -> int:
    """Parameters of one layer of ``kind`` that one token uses: ``params`` with each grouped linear counted for
    the experts a token is routed to (its top-k) instead of all of them."""
    return sum(lin.active_params for lin in linears(model, kind, 1)) + sum(other_params(model, kind, 1))


def param_tensors(model: ModelSpec, kind: str) -> tuple[int, int]:
    """(parameter tensors, of which in TP-sharded linears) of one layer of ``kind`` in the bundled runtime
    (``linears``: a weight, + a bias; ``other_params``). The optimizer steps each tensor with its own ops (AdamW's
    per-tensor loop)."""
    lins = linears(model, kind, 1)
    sharded = sum(1 + (lin.bias > 0) for lin in lins if lin.sharded)
    return len(other_params(model, kind, 1)) + sum(1 + (lin.bias > 0) for lin in lins), sharded


def block_linears(model: ModelSpec) -> int:
    """The ``nn.Linear`` modules of one transformer block of the bundled runtime (``runtime.models``): each a
    ColwiseParallel/RowwiseParallel DTensor linear under TP."""
    return len(linears(model, "transformer_block", 1))


def rerun_linears(model: ModelSpec, tp: int) -> tuple[Linear, ...]:
    """The linears torchtitan's op-level selective checkpointing reruns in backward: the even ``aten.mm`` calls
    of a block in call order (wk, wo, w3; a GELU MLP's fc2), whose outputs its policy does not keep."""
    return tuple(sorted(linears(model, "transformer_block", tp), key=lambda lin: lin.call)[1::2])


def attention_core_flops(
    model: ModelSpec, mbs: int, seq: int, tp: int, share: float = 1.0, pad_v: bool = False
) -> float:
    """Forward FLOPs of the attention core (QKᵀ and PV: 2 matmuls of 2·b·s²·d per local head; with latent
    attention QKᵀ over the query/key head width and PV over the value head width, or over the query/key width
    where the stack pads v to it for a one-width kernel: ``pad_v``, ``Stack.mla_pad_v``). ``share``: a windowed
    layer's part of the causal pairs (``window_share``), which scales the square."""
    if model.mla is not None:
        dqk, dv = model.mla.qk_head_dim, model.mla.v_head_dim
        widths = dqk + (max(dqk, dv) if pad_v else dv)
        return 2.0 * mbs * seq * seq * widths * model.num_attention_heads / tp * share
    return 4.0 * mbs * seq * seq * model.head_dim * model.num_attention_heads / tp * share


def causal_pairs(seq: int, window: int | None = None) -> int:
    """(query, key) pairs a causal attention over ``seq`` tokens computes: query i attends min(i + 1, w) keys (a
    ``window`` w; transformers' ``sliding_window_overlay``: key j with i − w < j ≤ i), all i + 1 without one. In
    closed form: w(w + 1)/2 for the first w queries, then w each (tests/test_sliding_window.py counts them)."""
    if window is None or window >= seq:
        return seq * (seq + 1) // 2
    return window * (window + 1) // 2 + (seq - window) * window


def uniform_window(model: ModelSpec, seq: int) -> int | None:
    """The window every block of ``model`` attends over at sequences of ``seq`` tokens (the whole sequence, not a
    CP rank's part); None when some block attends fully (a model of windowed and full layers is priced per kind:
    ``compose.blocks.block_sequence``) or the window spans the sequence."""
    w = model.window_at(seq)
    return w if w is not None and model.window_layers() == model.num_layers else None


def window_share(seq: int, window: int | None) -> float:
    """The part of a causal layer's attention work a windowed one does at sequences of ``seq`` tokens:
    ``causal_pairs`` with the window ÷ without. A windowed layer's attention FLOPs are the model's full-square
    count (Megatron's, no causal discount) × this share, so they meet the full layer's as the window reaches s."""
    return causal_pairs(seq, window) / causal_pairs(seq) if window is not None else 1.0


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


def memory_ops(ctx: Inputs, kind: str, mbs: int, tp: int, sp: bool) -> tuple[MemOp, ...]:
    """The memory-bound (non-GEMM) ops of one forward pass of a layer, attention excluded, with their bytes
    (per element: ``op_bytes``) and kernels (``op_kernels``): a block's two norms, two residual adds (read 2,
    write 1; compiled chains fuse the first into the MLP norm, whose sum is then not read back), the MLP's
    activation, RoPE on q and k (Llama family), torchtitan's repeat_kv copies of K and V to the query heads
    before SDPA, and two hidden dropouts (fused with the residual add — apex/TE bias-dropout-add — they only
    write their 1-byte masks; eager, ``torch.nn.Dropout``, they also read and write the tensor; kernels fused
    into the adds either way); the embedding's gather; the LM head's final norm and fp32 softmax cross-entropy
    (3 kernels). Tokens of the residual stream are split by TP under sequence parallelism."""
    m, e, st = ctx.model, ctx.elt, ctx.stack
    tokens = mbs * ctx.training.seq_len
    stream = tokens // tp if sp else tokens  # residual-stream tokens on this rank
    h = m.hidden_size
    norm, glu, rope = op_bytes(ctx)
    k_norm, k_act, k_rope = op_kernels(ctx)
    if kind == "embedding":
        return (MemOp("gather", 2.0 * stream * h * e, 1),)
    if kind == "lm_head":
        vocab = local_vocab(m, tp)
        if st.loss == "fused":  # one kernel reading the 16-bit logits (its backward writes their gradient)
            return (MemOp("norm", norm * stream * h, k_norm), MemOp("cross_entropy", 1.0 * tokens * vocab * e, 1))
        return (MemOp("norm", norm * stream * h, k_norm), MemOp("cross_entropy", 3.0 * tokens * vocab * 4, 3))
    if kind != "transformer_block":
        return ()
    f = m.ffn_hidden_size // tp
    compiled = st.kernels == "compiled"
    ops = [
        MemOp("norm", norm * stream * h, k_norm),
        MemOp("norm", norm * stream * h, k_norm),
        MemOp("add", 3 * stream * h * e - (stream * h * e if compiled else 0), 0 if compiled else 1),
        MemOp("add", 3 * stream * h * e, 1),
        MemOp("activation", (glu if m.activation == "swiglu" else 2 * e) * tokens * f, k_act),
    ]
    heads = m.num_attention_heads + m.num_kv_heads
    if m.mla is not None:  # latent attention (``workload.moe.mla_memory_ops``): its own RoPE, latent norms, concats
        from planner.workload.moe import mla_memory_ops

        ops += mla_memory_ops(m, tokens, tp, e, (norm, rope), (k_norm, k_rope), st.mla_pad_v)
    elif m.family == "llama":
        from planner.workload.rope import megatron_rope_op, runs_megatron_rope  # YaRN on Megatron-core: unfused

        plain = MemOp("rope", rope * tokens * heads * m.head_dim // tp, 2 * k_rope)
        ops.append(megatron_rope_op(ctx, tokens, tp) if runs_megatron_rope(ctx) else plain)
    if st.activations == "titan" and m.num_kv_heads < m.num_attention_heads:
        ops.append(MemOp("repeat_kv", 2 * tokens * heads * m.head_dim // tp * e, 2))
    if st.dropout:
        ops.append(MemOp("dropout", 2 * stream * h * (1 if st.kernels == "fused" else 2 * e + 1), 0))
    return tuple(ops)


def elementwise_bytes(ctx: Inputs, kind: str, mbs: int, tp: int, sp: bool) -> float:
    """HBM bytes moved by the memory-bound ops of one forward pass (``memory_ops``)."""
    return float(sum(op.nbytes for op in memory_ops(ctx, kind, mbs, tp, sp)))


def attention_kernels(ctx: Inputs) -> tuple[int, int]:
    """(forward, backward) kernels of a block's attention core by the stack's kernel: flash ``FLASH_KERNELS``;
    unfused QKᵀ, softmax, [dropout], PV forward, four batched GEMMs and the softmax [and dropout] backward."""
    if ctx.stack.attention == "flash":
        return FLASH_KERNELS
    drop = 1 if ctx.stack.dropout else 0
    return 3 + drop, 5 + drop


def kernel_counts(ctx: Inputs, kind: str, tp: int) -> tuple[int, int]:
    """(forward, backward) kernels one layer of ``kind`` issues per micro-batch, read off its ops: each linear
    (backward: data and weight gradient), the attention core (``attention_kernels``) and the memory-bound ops
    (``memory_ops``), whose backward issues twice the forward's kernels as it moves twice their bytes.
    Communication kernels are priced by ``planner.pricing.comm``, not here."""
    gemms = len(linears(ctx.model, kind, tp))
    att_f, att_b = attention_kernels(ctx) if kind == "transformer_block" else (0, 0)
    elem = sum(op.kernels for op in memory_ops(ctx, kind, 1, tp, False))
    return gemms + att_f + elem, 2 * gemms + att_b + 2 * elem


def metric_bytes(ctx: Inputs, mbs: int, tp: int) -> tuple[float, ...]:
    """HBM bytes of each kernel of the trainer's metrics over one micro-batch's logits (``Stack.train_metrics``),
    after its backward, forward-only. Composer (v0.14.1 ``trainer.py:2347``, v0.16.4 ``:2473-2475``, v0.17.2
    ``:2488``) runs ``_eval_train_metrics`` after every micro-batch's backward, under ``torch.no_grad()`` and the
    run's precision context (``torch.autocast`` for ``amp_bf16``: v0.16.4 ``:2162-2175``), and llm-foundry's MPT
    keeps ``LanguageCrossEntropy`` and ``LanguagePerplexity`` as train metrics (``modeling_mpt.py:698-700`` at
    b2a43a147, ``:955-957`` at 5e85bd62d; ``mosaic_gpt.py:487-489`` at 300cc5c58), each of whose ``update`` is a
    ``torch.nn.CrossEntropyLoss(reduction='sum')`` over the whole [tokens, vocab] logits (composer
    ``metrics/nlp.py:100,121``). ``cross_entropy`` is on autocast's fp32 list, so each metric casts the 16-bit logits
    to a new fp32 tensor (read e, write 4; autocast caches casts of leaf weights only) and runs ``log_softmax`` in
    fp32 (read 4, write 4); ``nll_loss``'s gather of one value per token is left out."""
    n = ctx.stack.train_metrics
    if n == 0:
        return ()
    logits = mbs * ctx.training.seq_len * local_vocab(ctx.model, tp)
    e = ctx.elt
    per_metric = ((logits * (e + 4.0),) if e != 4 else ()) + (logits * 8.0,)
    return per_metric * n
