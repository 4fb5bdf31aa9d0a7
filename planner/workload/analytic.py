"""Analytic per-layer costs of the model zoo: FLOPs, parameters and activation memory, per GPU
(activation formulas: ``planner.workload.activations``, this docstring's table for the zoo).

Pure Python (no PyTorch): the planner prices layers with these formulas when no measured profile is
given, and ``tests/test_analytic_agreement.py`` checks them against the profiler's meta/fake-device
measurement of ``runtime/models`` (FLOPs within 1 %, activation bytes within 5 %).

Notation: b micro-batch size, s sequence length, T = b·s tokens, h hidden size, a attention heads,
g KV heads, d = h/a head size, f FFN hidden size, V vocabulary, t tensor-parallel degree, e bytes per
element of the training precision. "Per GPU" means one tensor-parallel rank: heads, KV heads, FFN
columns and (when t divides it) the vocabulary are split t ways (Megatron-LM column/row parallel
linears, Shoeybi et al. 2019, §3); norms, biases of row-parallel linears and positional embeddings
are replicated. ``qkv_bias`` (Qwen2/2.5) adds biases to the Q, K and V projections only: parameters
grow by a·d/t + 2·g·d/t per block; FLOPs and saved activations do not change (the bias add is fused
into the linear, which keeps only its input, and matmul FLOPs count multiply-adds only).

FLOPs (matmuls only, 2 FLOPs per multiply-add; norms, activations, softmax and residual adds are
not counted, as in Megatron-LM's accounting and in ``torch.utils.flop_counter``):

* linear ``[T, n] @ [n, m]``: forward 2·T·n·m; backward 2× forward (input gradient + weight
  gradient), Narayanan et al. SC'21 §5.1.
* attention core (QKᵀ and PV, the full s×s square with no causal discount, as Megatron-LM and
  ``torch.utils.flop_counter.sdpa_flop_count`` count it): forward 4·b·s²·h/t. Backward of a
  *fused* (flash) kernel is 2.5× forward: it recomputes QKᵀ and runs four more s×s matmuls
  (Dao 2023, FlashAttention-2 Alg. 2; ``torch.utils.flop_counter.sdpa_backward_flop_count``).
  A block with a sliding window (``ModelSpec.sliding_window``) counts that square × its share of the causal
  pairs (``ops.window_share``: query i attends min(i + 1, w) keys), what a banded kernel (FlashAttention-2's
  ``window_size``) computes; ``torch.utils.flop_counter`` counts SDPA's full square whatever its mask.
* embedding lookup: 0. LM head: 2·T·h·V/t.

Activation memory: the tensors autograd keeps for backward, assuming a fused (flash) attention kernel
(no s×s score or probability matrix is kept, so Korthikanti et al.'s 5·a·s/h term vanishes) and no
dropout (the zoo has none, so Korthikanti's mask terms vanish too). Per transformer block, counting
every distinct tensor once (the QKV projections share their input; the attention output and the
output projection's input are one tensor):

=================================  ===========================  ===========================
tensor                              elements                      sharded by
=================================  ===========================  ===========================
attn_norm input and statistics      see below                     t only with sequence parallel
attn_norm output (QKV input)        T·h                           not sharded (gathered)
Q (after RoPE)                      T·a·d/t                       t
K (after RoPE); V: not repeated     T·g·d/t each                  t
RoPE cos/sin tables (Llama, fp32)   2 calls × 2 × s·d/2           not sharded
attention output (= wo input)       T·h/t                         t
softmax log-sum-exp (fp32)          b·s·a/t                       t
mlp_norm input and statistics       see below                     t only with sequence parallel
mlp_norm output (w1 input)          T·h                           not sharded (gathered)
GELU MLP: w1 output; w2 input       2·T·f/t                       t
SwiGLU: w1 out, silu out, w3 out,   4·T·f/t                       t
w2 input
QK-norm inputs (``qk_norm``)        T·(a + g)·d/t, + fp32 1/rms   t
Sinks: q, k, v, output at T + 1     see ``activations.zoo_        t
tokens × (d + 8), for Q, K, V       attention_part_terms``
=================================  ===========================  ===========================

Norms: ``nn.LayerNorm`` keeps its input and two per-token statistics (mean, 1/σ) in the activation
dtype: T·(h + 2)·e bytes. The zoo's ``RMSNorm`` (``runtime.models.transformer``) keeps what PyTorch's fused
kernel keeps (``F.rms_norm`` → ``aten._fused_rms_norm`` on CUDA; the same saved set through its own
autograd function where PyTorch has no fused kernel, e.g. CPU): its input in the activation dtype and the
fp32 1/rms, T·(h·e + 4) bytes (the composite ``nn.RMSNorm`` on CPU kept T·(2h + 1)·4). Attention calls
``F.scaled_dot_product_attention(..., enable_gqa=True)`` on K and V at the KV-head count (the flash
kernels on CUDA and CPU handle the grouping), so GQA saves K/V memory: (a + 2g)·d/t per token instead of
3·a·d/t.

This is Korthikanti et al. (MLSys'23, "Reducing Activation Recomputation in Large Transformer
Models", §4.1) redone for this block: their 34·s·b·h bytes are, without dropout masks (2·sbh) and with
flash attention, 32·s·b·h for the GPT block with f = 4h, which is the GPT row above at e = 2.
Sequence parallelism (Korthikanti §4.2.2) shards the norm inputs by t; the QKV and FFN inputs are
all-gathered and kept whole by the PyTorch DTensor runtime (torchtitan's layout), so they stay T·h.

Recomputation (Korthikanti §5): ``selective`` recomputes the attention core, so the core keeps its
inputs (Q, K, V) instead of its own saved tensors; with a fused kernel that only drops the log-sum-exp
(the output is still kept, as the output projection's input). ``full`` keeps only the block input
(T·h, /t with sequence parallelism). Embedding and LM head are never recomputed: all three modes are
equal for them.

The LM head layer is the final norm plus the output projection; the loss is not part of it (its
logits are ``output_activation_bytes``).
"""

from __future__ import annotations

from typing import cast

from planner.specs import (
    BYTES_PER_ELEMENT,
    LayerKind,
    LayerProfile,
    ModelSpec,
    Precision,
    Profile,
    rules,
)
from planner.specs.errors import MeshplanError
from planner.specs.stacks import Stack
from planner.specs.vocab import local_vocab as local_vocab  # re-exported (activations, tests)
from planner.specs.vocab import vocab_parallel as vocab_parallel
from planner.workload.activations import LAYER_KINDS, output_activation_bytes, saved_activation_bytes
from planner.workload.activations import LSE_BYTES as LSE_BYTES  # re-exported: the formulas' old home
from planner.workload.activations import block_saved_terms as block_saved_terms
from planner.workload.ops import (
    active_params,
    attention_core_flops,
    block_kinds,
    linear_flops,
    params,
    uniform_window,
    window_share,
)

#: Backward ÷ forward FLOPs of a fused attention core (FlashAttention-2 backward: 5 s×s matmuls vs 2).
FLASH_BWD_RATIO = 2.5


def check_tp(model: ModelSpec, tp: int, field: str = "tp") -> None:
    """Raise unless ``tp`` splits the model's heads, KV heads and FFN evenly (Megatron-LM's rule)."""
    if tp < 1:
        raise MeshplanError(field, f"tensor-parallel degree {tp} must be ≥ 1", "use a positive TP degree")
    err = rules.tp_divides_model(model, tp)
    if err is not None:
        raise rules.with_field(err, field)


def tp_degrees(model: ModelSpec, max_tp: int) -> list[int]:
    """The TP degrees ≤ ``max_tp`` that ``check_tp`` accepts (``planner.specs.rules.tp_divides_model``)."""
    return [t for t in range(1, max_tp + 1) if rules.tp_divides_model(model, t) is None]


# ``vocab_parallel(model, tp)``, ``local_vocab(model, tp)``: the embedding's and LM head's rows on a TP rank, the stack's
# padded vocabulary split over TP on Megatron-family stacks, else V / t when t divides V, else V (``planner.specs.vocab``)


# ------------------------------------------------------------------------------------------------
# Parameters


def block_params(model: ModelSpec, tp: int = 1) -> int:
    """Parameters of one transformer block held by one TP rank (its ops: ``ops.params``)."""
    return params(model, "transformer_block", tp)


def embedding_params(model: ModelSpec, tp: int = 1) -> int:
    """Token embedding (vocabulary-parallel when t divides V) + learned positions for GPT (replicated)."""
    return params(model, "embedding", tp)


def lm_head_params(model: ModelSpec, tp: int = 1) -> int:
    """Final norm + output projection (no bias). With tied embeddings the head still holds the matrix
    on its pipeline stage (Megatron-LM keeps a copy and all-reduces its gradient)."""
    return params(model, "lm_head", tp)


def num_parameters(model: ModelSpec) -> int:
    """Total parameters of the model (tied embedding/head weights counted once): embedding, each block of its
    kind (``ops.block_kinds``: a dense model's L identical blocks, a MoE model's dense and MoE blocks), LM head."""
    if model.moe is None:
        blocks = model.num_layers * block_params(model)
    else:
        blocks = sum(params(model, kind) for kind in block_kinds(model))
    total = embedding_params(model) + blocks + lm_head_params(model)
    if model.tie_embeddings:
        total -= local_vocab(model, 1) * model.hidden_size
    return total


def num_active_parameters(model: ModelSpec) -> int:
    """Parameters one token uses (``ops.active_params``): ``num_parameters`` with each MoE layer's routed experts
    counted for the top-k a token visits; embedding and LM head counted, as the published active counts do
    (Mixtral's 12.9B, DeepSeek-V3's 37B). A dense model's equal ``num_parameters``."""
    if model.moe is None:
        return num_parameters(model)
    blocks = sum(active_params(model, kind) for kind in block_kinds(model))
    total = embedding_params(model) + blocks + lm_head_params(model)
    if model.tie_embeddings:
        total -= local_vocab(model, 1) * model.hidden_size
    return total


# ------------------------------------------------------------------------------------------------
# FLOPs


def block_forward_flops(
    model: ModelSpec,
    micro_batch_size: int,
    seq_len: int,
    tp: int = 1,
    share: float | None = None,
    pad_v: bool = False,
) -> tuple[float, float]:
    """(linear, attention-core) forward FLOPs of one block on one TP rank (its ops: ``ops.linear_flops``,
    ``ops.attention_core_flops``). ``share``: the attention's part of the causal pairs (``ops.window_share``);
    default: a model whose every block has a window's (``ops.uniform_window``) at ``seq_len``, else 1. ``pad_v``:
    latent attention's P·V at v padded to the q/k width (``Stack.mla_pad_v``)."""
    tokens = micro_batch_size * seq_len
    linear = linear_flops(model, "transformer_block", tokens, tp)
    if share is None:
        share = window_share(seq_len, uniform_window(model, seq_len))
    return float(linear), attention_core_flops(model, micro_batch_size, seq_len, tp, share, pad_v)


def layer_flops(
    model: ModelSpec,
    kind: str,
    micro_batch_size: int,
    seq_len: int,
    tp: int = 1,
    share: float | None = None,
    pad_v: bool = False,
) -> tuple[float, float]:
    """(forward, backward) FLOPs of one layer kind on one TP rank (``share``, ``pad_v``: ``block_forward_flops``')."""
    tokens = micro_batch_size * seq_len
    if kind == "embedding":
        return 0.0, 0.0
    if kind == "lm_head":
        fwd = float(linear_flops(model, "lm_head", tokens, tp))
        return fwd, 2.0 * fwd
    if kind == "transformer_block":
        linear, core = block_forward_flops(model, micro_batch_size, seq_len, tp, share, pad_v)
        return linear + core, 2.0 * linear + FLASH_BWD_RATIO * core
    raise MeshplanError("kind", f"unknown layer kind {kind!r}", f"use one of {', '.join(LAYER_KINDS)}")


def model_flops_per_step(model: ModelSpec, tokens: int, seq_len: int) -> float:
    """Model FLOPs of one training step (forward + backward, no recomputation) over ``tokens`` tokens
    in sequences of ``seq_len``: the numerator of MFU.

    Megatron-LM accounting (Narayanan et al. SC'21 §5.1, generalised to GQA and gated MLPs):
    12·T·L·h²·[(1 + g/a + s/h)·(q/h) + (f/h)·γ + V/(2·L·h)] with q = a·d, γ = 3/2 for SwiGLU else 1,
    i.e. 3 × the forward matmul FLOPs, attention core counted as a full s×s square.
    """
    if model.moe is not None or model.mla is not None or model.window_at(seq_len) is not None:
        return _op_list_flops_per_step(model, tokens, seq_len)
    h, L, a, g = model.hidden_size, model.num_layers, model.num_attention_heads, model.num_kv_heads
    q = a * model.head_dim
    gamma = 1.5 if model.activation == "swiglu" else 1.0
    bracket = (1 + g / a + seq_len / h) * (q / h) + (model.ffn_hidden_size / h) * gamma + model.vocab_size / (2 * L * h)
    return 12.0 * tokens * L * h * h * bracket


def _op_list_flops_per_step(model: ModelSpec, tokens: int, seq_len: int) -> float:
    """``model_flops_per_step`` read off the op lists, for blocks the closed form does not cover (MoE, latent
    attention, sliding windows): 3 × the forward FLOPs of every block (its linears, routed experts at top-k, and the
    attention core as a full s×s square, a windowed block's × its ``ops.window_share``) and of the LM head. The same
    accounting as Megatron's (router included)."""
    sequences = tokens / seq_len
    fwd = float(linear_flops(model, "lm_head", tokens, 1))
    windowed = window_share(seq_len, model.window_at(seq_len))  # a windowed block's share of the pairs
    for i, kind in enumerate(block_kinds(model)):
        share = windowed if model.is_window_layer(i) else 1.0
        fwd += linear_flops(model, kind, tokens, 1) + sequences * attention_core_flops(model, 1, seq_len, 1, share)
    return 3.0 * fwd


# ------------------------------------------------------------------------------------------------
# Profiles


def layer_profile(
    model: ModelSpec,
    kind: LayerKind | str,
    *,
    micro_batch_size: int,
    seq_len: int,
    tp: int = 1,
    sequence_parallel: bool = False,
    precision: Precision = "bf16",
    stack: Stack | None = None,
    attention_share: float | None = None,
) -> LayerProfile:
    """Analytic costs of one layer kind at one (micro-batch, sequence, TP, SP) point, per GPU
    (``attention_share``: ``block_forward_flops``' share; a context-parallel rank's is its whole sequence's). Without a
    ``stack``, as the bundled runtime (the model zoo) runs it: its activations, latent attention's v padded."""
    if kind not in LAYER_KINDS:
        raise MeshplanError("kind", f"unknown layer kind {kind!r}", f"use one of {', '.join(LAYER_KINDS)}")
    if precision not in BYTES_PER_ELEMENT:
        raise MeshplanError(
            "precision", f"unknown precision {precision!r}", f"use one of {', '.join(BYTES_PER_ELEMENT)}"
        )
    if micro_batch_size < 1:
        raise MeshplanError(
            "micro_batch_size", f"must be ≥ 1, got {micro_batch_size}", "use a positive micro-batch size"
        )
    if seq_len < 1:
        raise MeshplanError("seq_len", f"must be ≥ 1, got {seq_len}", "use a positive sequence length")
    check_tp(model, tp)
    if sequence_parallel and tp == 1:
        raise MeshplanError("sequence_parallel", "sequence parallelism needs tp > 1", "set sequence_parallel to false")
    params = {"embedding": embedding_params, "transformer_block": block_params, "lm_head": lm_head_params}[kind](
        model, tp
    )
    pad_v = stack.mla_pad_v if stack is not None else True  # ``saved_activation_bytes``' default: the zoo's
    fwd, bwd = layer_flops(model, kind, micro_batch_size, seq_len, tp, attention_share, pad_v)
    return LayerProfile(
        kind=cast(LayerKind, kind),  # checked against LAYER_KINDS above
        micro_batch_size=micro_batch_size,
        seq_len=seq_len,
        tp=tp,
        sequence_parallel=sequence_parallel,
        fwd_flops=fwd,
        bwd_flops=bwd,
        param_count=params,
        param_bytes=params * BYTES_PER_ELEMENT[precision],
        saved_activation_bytes=saved_activation_bytes(
            model,
            kind,
            micro_batch_size,
            seq_len,
            tp,
            sequence_parallel,
            precision,
            stack,
        ),
        output_activation_bytes=output_activation_bytes(
            model, kind, micro_batch_size, seq_len, tp, sequence_parallel, precision
        ),
    )


def analytic_profile(
    model: ModelSpec,
    *,
    micro_batch_sizes: list[int] | tuple[int, ...],
    seq_len: int,
    tps: list[int] | tuple[int, ...] = (1,),
    precision: Precision = "bf16",
    sequence_parallel: bool | None = None,
) -> Profile:
    """A ``Profile`` (source ``"analytic"``) of every layer kind at every micro-batch size and TP degree.

    ``sequence_parallel``: ``None`` (default) records both settings for every t > 1; ``True``/``False``
    records only that one (t = 1 always without).
    """
    layers = []
    for tp in tps:
        sps = [False] if tp == 1 else ([False, True] if sequence_parallel is None else [sequence_parallel])
        for sp in sps:
            for mbs in micro_batch_sizes:
                for kind in LAYER_KINDS:
                    layers.append(
                        layer_profile(
                            model,
                            kind,
                            micro_batch_size=mbs,
                            seq_len=seq_len,
                            tp=tp,
                            sequence_parallel=sp,
                            precision=precision,
                        )
                    )
    return Profile(model=model, device="analytic", dtype=precision, source="analytic", layers=layers)
