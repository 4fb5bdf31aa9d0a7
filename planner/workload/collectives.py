"""The collectives a configuration issues, as data: per layer (block, embedding, LM head) and micro-batch
its blocking tensor-parallel ones, ZeRO-3's parameter gathers and gradient reduce-scatters, and per step
the data-parallel gradient sync and the small reductions at its end — each a ``Collective`` (axis, op,
bytes, count). What they cost on a device is ``planner.pricing.collectives``; where they overlap compute,
``planner.compose.terms``.

How many a layer issues is the software's, not the device's: the stack that runs the plan says how it issues
them (``planner.specs.stacks.Stack``: ``tp_collectives``, ``dp_collectives``, ``step_reductions``; ``issuing``):

* ``tp = "megatron"``: one collective per Megatron column/row pair and direction (QKV fused, the row-parallel
  output all-reduced; Megatron-LM ``megatron/core/tensor_parallel/mappings.py``), again in backward under
  full recomputation; with sequence parallelism an all-gather and a reduce-scatter in place of each
  all-reduce (``_gather_along_first_dim``, ``_reduce_scatter_along_first_dim``: two NCCL calls, each with
  its own latency). torchtitan's DTensor plan is this pattern too: with its sequence parallelism
  (``PrepareModuleInput``) the column-parallel linears' Partial input gradients add up before one reduction.
* ``tp = "per_linear"``: DTensor's ``ColwiseParallel`` on each column-parallel linear as its own module (the
  bundled runtime, ``runtime/parallelize.py``): the input gradient of every one of them (wq, wk, wv, w1
  (+ w3)) is all-reduced on its own in backward; with SP the row-parallel outputs' gradients all-gathered. Latent
  attention's are its up projections' at the latents' widths and its rotary key's (``per_linear_grads``).
* ``dp = "buckets"``: the gradient sync runs in buckets (Megatron-core DDP, DeepSpeed); ``"modules"``: one
  collective per FSDP2-wrapped module (the bundled runtime wraps every block and the chunk, whose own
  tensors are the embedding's and the LM head's: one collective shared by the two).
* ``step_reductions``: the bundled runtime's reductions at the step's end — the SP norms' gradients (Partial
  over TP) and the gradient clip's norm of sharded gradients (``runtime/job.py``); ``finalize_grads = "megatron"``:
  Megatron-core's ``finalize_model_grads`` after the DP sync (``megatron_finalize``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from planner.specs import ModelSpec
from planner.specs.stacks import Stack
from planner.specs.vocab import local_vocab, vocab_parallel
from planner.workload.ops import block_linears, linears

Axis = Literal["tp", "dp", "pp", "cp", "ep"]
Op = Literal["all_reduce", "all_gather", "reduce_scatter", "send_recv", "all_to_all"]

#: The layer kinds in the order every per-layer triple of the planner uses.
KINDS = ("transformer_block", "embedding", "lm_head")


@dataclass(frozen=True, slots=True)
class Collective:
    """``count`` collectives ``op`` over the ``axis`` group, each of ``nbytes`` (the full, unsharded buffer,
    as nccl-tests counts it)."""

    axis: Axis
    op: Op
    nbytes: float
    #: how many (a fraction: this layer's share of a collective it shares with another layer)
    count: float = 1
    #: issued in buckets of so many bytes: ``nbytes`` move at the rate of one bucket's collective
    bucket: float | None = None
    #: whether a host's per-collective in-step extra of older measurements applies (``HostDispatch.tp_collective_us``;
    #: the loss's three-float all-reduce was not among the collectives it was measured on)
    in_step_extra: bool = True


Comms = tuple[Collective, ...]


@dataclass(frozen=True, slots=True)
class Issuing:
    """How the software that runs a plan issues its collectives (module docstring)."""

    tp: Literal["megatron", "per_linear"]
    dp: Literal["buckets", "modules"]
    step_reductions: bool
    zero3_fetch: Literal["layer", "module", "param"] = "layer"
    zero3_reduce_bucket: int | None = None
    finalize_grads: Literal["none", "megatron"] = "none"


def issuing(stack: Stack) -> Issuing:
    """How ``stack`` issues its collectives."""
    return Issuing(
        stack.tp_collectives,
        stack.dp_collectives,
        stack.step_reductions,
        stack.zero3_fetch,
        stack.zero3_reduce_bucket,
        stack.finalize_grads,
    )


#: DeepSpeed ZeRO-3's ``stage3_param_persistence_threshold`` default: a module's parameters under this many elements
#: are never partitioned, so never gathered (deepspeed/runtime/zero/config.py).
PERSISTENCE_THRESHOLD = 100_000


def zero3_comms(
    model: ModelSpec, issuing: Issuing, tp: int, op: Op, params: tuple[int, int, int], nbytes_per_param: float
) -> tuple[Comms, Comms, Comms]:
    """ZeRO-3's per-layer parameter all-gather (``op = "all_gather"``) or gradient reduce-scatter of each layer kind,
    as the stack issues them: one per layer (``dp_layer_comms``), or (``zero3_fetch = "module"``, DeepSpeed) one
    gather per linear module whose parameters reach ``PERSISTENCE_THRESHOLD`` — each its own collective, with its own
    latency, at every fetch — and the gradients' reduce-scatters in buckets of ``zero3_reduce_bucket`` elements."""
    if issuing.zero3_fetch == "layer":
        return dp_layer_comms(issuing, op, params, nbytes_per_param)
    if op != "all_gather":
        bucket = None if issuing.zero3_reduce_bucket is None else issuing.zero3_reduce_bucket * nbytes_per_param
        return tuple((Collective("dp", op, p * nbytes_per_param, bucket=bucket),) for p in params)  # type: ignore[return-value]
    sizes = [lin.n * lin.k + lin.bias for lin in linears(model, "transformer_block", tp)]
    blk = tuple(Collective("dp", op, p * nbytes_per_param) for p in sizes if p >= PERSISTENCE_THRESHOLD)
    return (
        blk,
        (Collective("dp", op, params[1] * nbytes_per_param),),
        (Collective("dp", op, params[2] * nbytes_per_param),),
    )


@dataclass(frozen=True, slots=True)
class TpComms:
    """The blocking TP collectives per micro-batch of each layer kind (``KINDS`` order), forward and backward."""

    fwd: tuple[Comms, Comms, Comms]
    bwd: tuple[Comms, Comms, Comms]


def _pair(act: float, sp: bool, n: int, gather: float | None = None) -> Comms:
    """``n`` Megatron TP exchanges of the residual stream: all-reduces, or with SP an all-gather and a
    reduce-scatter each (``gather``: the all-gathers' bytes where they differ from ``act``)."""
    if sp and gather is not None and gather != act:
        return (Collective("tp", "reduce_scatter", act, n), Collective("tp", "reduce_scatter", gather, n))
    if sp:
        return (Collective("tp", "reduce_scatter", act, 2 * n),)  # an all-gather costs a reduce-scatter's time
    return (Collective("tp", "all_reduce", act, n),)


def tp_comms(
    model: ModelSpec,
    issuing: Issuing,
    act: float,
    tp: int,
    sp: bool,
    recompute: str,
    mbs_seq: int,
    gather: float | None = None,
    rerun_gathers: bool = False,
) -> TpComms:
    """The TP collectives of a block, the embedding and the LM head per micro-batch, ``act`` the bytes of one
    residual-stream tensor; none with ``tp = 1``. ``gather``: the bytes of each of a block's sequence-parallel
    all-gathers (its inputs' in forward, its row-parallel outputs' gradients in backward) where they are not
    ``act`` (FP8 all-gathers: ``planner.workload.fp8.fp8_tp_gather``); the embedding's and the LM head's stay
    ``act``. ``rerun_gathers``: the backward reruns the forward's two all-gathers (torchtitan's op-level selective
    checkpointing, ``rerun_sp_gathers``)."""
    if tp == 1:
        return TpComms(((), (), ()), ((), (), ()))
    full = recompute == "full"
    blk_b: Comms
    emb_f: Comms
    emb_b: Comms
    head_f: Comms
    head_b: Comms
    blk_f = _pair(act, sp, 2, gather)
    if issuing.tp == "per_linear":
        blk_b = per_linear_grads(model, act)
        if sp:  # the row-parallel outputs' gradients
            blk_b += (Collective("tp", "all_gather", act if gather is None else gather, 2),)
        if full:
            blk_b += blk_f
    else:
        blk_b = _pair(act, sp, 4 if full else 2, gather)
    if rerun_gathers and sp and not full:
        blk_b += (Collective("tp", "reduce_scatter", act if gather is None else gather, 2),)  # an all-gather's time
    rs, ag = Collective("tp", "reduce_scatter", act), Collective("tp", "all_gather", act)
    if vocab_parallel(model, tp) or tp == 1:  # vocab-parallel embedding and LM head (``planner.specs.vocab``)
        emb_f, emb_b = ((rs,), (ag,)) if sp else ((Collective("tp", "all_reduce", act),), ())
        head_f, head_b = ((ag,), (rs,)) if sp else ((), (Collective("tp", "all_reduce", act),))
        # the vocab-parallel cross-entropy's max, sum and target logit per token (fp32)
        head_f += (Collective("tp", "all_reduce", mbs_seq * 3 * 4, in_step_extra=False),)
    else:
        emb_f = emb_b = ()
        head_f, head_b = ((ag,), (rs,)) if sp else ((), ())
    return TpComms((blk_f, emb_f, head_f), (blk_b, emb_b, head_b))


def rerun_sp_gathers(stack: Stack, recompute: str) -> bool:
    """Whether a block's backward reruns its two forward sequence-parallel all-gathers: torchtitan's op-level
    selective checkpointing (``Stack.activations == "titan"``, ``selective_ac = "op"``) keeps the outputs of the ops
    in its ``_save_list`` alone (torchtitan ``models/llama3/parallelize_llama.py`` at 820504e:
    ``aten.mm``, the SDPA kernels, ``_c10d_functional.reduce_scatter_tensor``, ``aten.max``), so the gathered norm
    outputs, which the column-parallel linears' weight-gradient mms read, are recomputed: norm, then
    ``_c10d_functional.all_gather_into_tensor`` again (PREFER_RECOMPUTE, which torch.compile's partitioner treats as
    MUST_RECOMPUTE: ``torch/_functorch/partitioners.py`` ``must_recompute``). The memory side already drops them
    (``activations.titan_sac_op_terms``)."""
    return recompute == "selective" and stack.activations == "titan" and stack.selective_ac == "op"


#: The row-parallel linears of a block (``ops.linears``' names): every other TP-sharded linear is column-parallel.
ROW_PARALLEL = ("wo", "w2")


def per_linear_grads(model: ModelSpec, act: float) -> Comms:
    """The all-reduces over TP of a block's backward where each column-parallel linear is its own DTensor module
    (``Issuing.tp == "per_linear"``, the bundled runtime): each one's input gradient (Partial → Replicate), of
    tokens × its input width — ``act`` (a residual-stream tensor) for wq, wk, wv, w1, w3. Latent attention
    (``runtime.models.mla``, the ``layout.tp_plan`` rules): the up projections ``wq_b`` (or ``wq``) and ``wkv_b``
    are the column-parallel ones, at the query latent's (q_lora_rank) and the key/value latent's (kv_lora_rank)
    width — the down projections ``wq_a``/``wkv_a`` are replicated plain tensors, their gradients already whole —
    and the one rotary key read by every head has its gradient summed over TP (``LatentAttention.tp_mesh``):
    tokens × qk_rope_head_dim."""
    if model.mla is None:
        return (Collective("tp", "all_reduce", act, block_linears(model) - 2),)
    per_token = act / model.hidden_size  # bytes of one feature over the micro-batch's tokens
    widths: dict[int, int] = {}
    for lin in linears(model, "transformer_block", 1):
        if lin.sharded and lin.name not in ROW_PARALLEL:
            widths[lin.k] = widths.get(lin.k, 0) + 1
    widths[model.mla.qk_rope_head_dim] = widths.get(model.mla.qk_rope_head_dim, 0) + 1  # the rotary key
    return tuple(Collective("tp", "all_reduce", per_token * k, n) for k, n in widths.items())


def dp_layer_comms(
    issuing: Issuing, op: Op, params: tuple[int, int, int], nbytes_per_param: float, bucket_params: int | None = None
) -> tuple[Comms, Comms, Comms]:
    """A DP collective ``op`` over each layer kind's parameters at ``nbytes_per_param`` each: ZeRO-3's per-layer
    parameter gathers and gradient reduce-scatters (``bucket_params`` None) or the end-of-step gradient sync.
    Issued per FSDP2-wrapped module (``Issuing.dp == "modules"``): each block's, and the chunk's, which holds the
    embedding and the LM head — one collective of both, each layer its share by parameters. Else per layer, or
    at the end of the step in buckets of ``bucket_params`` parameters."""
    blk, emb, head = params
    if issuing.dp == "modules":
        root = (emb + head) * nbytes_per_param
        share = [(Collective("dp", op, root, p / (emb + head)),) if emb + head else () for p in (emb, head)]
        return (Collective("dp", op, blk * nbytes_per_param),), share[0], share[1]
    bucket = None if bucket_params is None else bucket_params * nbytes_per_param
    return tuple((Collective("dp", op, p * nbytes_per_param, bucket=bucket),) for p in params)  # type: ignore[return-value]


def grad_bucket_params(dp: int) -> int:
    """Parameters per data-parallel gradient bucket: Megatron-core's default max(40M, 1M·dp)
    (megatron/core/distributed/distributed_data_parallel_config.py ``bucket_size``); one collective each."""
    return max(40_000_000, 1_000_000 * dp)


def grad_bucket(stack: Stack, dp: int, total: int) -> int:
    """Parameters per end-of-step gradient collective as the stack buckets them: DeepSpeed's
    ``reduce_bucket_size`` (``Stack.zero3_reduce_bucket``, 5e8 elements, ZeRO 1–3); Megatron-core DDP one bucket
    of everything without ``overlap_grad_reduce`` (core_v0.16.1 distributed_data_parallel.py: "Set bucket_size
    to infinity if overlap_grad_reduce is False"), else ``grad_bucket_params``."""
    if stack.zero3_reduce_bucket is not None:
        return min(stack.zero3_reduce_bucket, total)
    if not stack.overlap_grad_reduce:
        return total
    return min(grad_bucket_params(dp), total)


def grad_bytes(stack: Stack, precision: str, elt: int) -> int:
    """Bytes per gradient element on the wire of the DP gradient collectives: fp32 where the stack reduces in fp32
    (FSDP2's ``MixedPrecisionPolicy(reduce_dtype=torch.float32)``: torchtitan, the bundled runtime; Megatron-core
    under bf16, ``accumulate_allreduce_grads_in_fp32``), else the training dtype's ``elt``.

    FP8 is bf16 mixed precision (``--bf16 --fp8-format``: the parameters and main grads of a bf16 run, only the
    linears' GEMM operands in FP8), so Megatron-core keeps fp32 main grads there too: core_v0.16.1
    ``megatron/training/arguments.py:711-724`` sets ``accumulate_allreduce_grads_in_fp32`` under ``--bf16`` unless
    ``--grad-reduce-in-bf16``, ``training.py:1295`` passes it as the DDP's ``grad_reduce_in_fp32``
    (``megatron/core/distributed/distributed_data_parallel_config.py:11``); Megatron-Bridge's FP8 mixed-precision
    recipes keep its default ``grad_reduce_in_fp32: True`` (``src/megatron/bridge/training/mixed_precision.py:47`` at
    067f987). A run with ``--grad-reduce-in-bf16`` is ``reduce_dtype: param`` (cost model 54)."""
    if stack.reduce_dtype == "fp32" or (stack.reduce_dtype == "fp32_bf16" and precision in ("bf16", "fp8")):
        return 4
    return elt


def dp_sync(zero_stage: int) -> tuple[Op | None, Op | None]:
    """The end-of-step DP collectives: (the gradient sync, the parameter all-gather after the optimizer step)."""
    if zero_stage == 0:
        return "all_reduce", None
    if zero_stage in (1, 2):
        return "reduce_scatter", "all_gather"
    return None, None


@dataclass(frozen=True, slots=True)
class StepReductions:
    """The bundled runtime's reductions at the end of a step: per layer kind (``KINDS``), once per rank, and one
    all-reduce whose bytes grow with the rank's blocks (``coalesced``: ``base`` bytes + ``per_block`` per block)."""

    per_kind: tuple[Comms, Comms, Comms]
    once: Comms
    coalesced: tuple[float, float] | None = None


NO_REDUCTIONS = StepReductions(((), (), ()), ())


def step_reductions(model: ModelSpec, elt: int, tp: int, sp: bool, dp: int, zero_stage: int) -> StepReductions:
    """The SP norms' gradients come out Partial(sum) over TP: with dp > 1 the FSDP2 wrappers reduce each
    tensor's after its module's backward (a block's two norms, the final norm's); else one all-reduce of them
    all (``runtime.job.reduce_partial_grads``). The gradient clip's norm of DTensor gradients sharded by TP or
    by ZeRO ≥ 1: one all-reduce of the partial norm (DTensor issues it inside ``linalg_vector_norm``)."""
    blk: Comms = ()
    head: Comms = ()
    coalesced = None
    if tp > 1 and sp:
        tensors = 2 if model.norm == "layernorm" else 1  # per norm
        norm = tensors * model.hidden_size * elt
        if dp > 1:
            blk = (Collective("tp", "all_reduce", model.hidden_size * elt, 2 * tensors),)
            head = (Collective("tp", "all_reduce", model.hidden_size * elt, tensors),)
        else:  # the final norm's once, a block's two norms per block
            coalesced = (norm, 2 * norm)
    once: Comms = ()
    if tp > 1:
        once = (Collective("tp", "all_reduce", 4),)
    elif dp > 1 and zero_stage >= 1:
        once = (Collective("dp", "all_reduce", 4),)
    return StepReductions((blk, (), head), once, coalesced)


def megatron_finalize(model: ModelSpec, grad_elt: int, tp: int, sp: bool) -> StepReductions:
    """Megatron-core's reductions after the DP gradient sync, each exposed at the step's end (core_v0.16.1
    ``megatron/core/distributed/finalize_model_grads.py``): with SP, ``_allreduce_non_tensor_model_parallel_grads``
    — one coalesced all-reduce over TP of the main gradients of the parameters marked ``sequence_parallel`` (a
    block's two norms, the final norm; LayerNorm weight and bias), whose bytes grow with the stage's blocks; and the
    gradient clip's all-reduce of the squared norm over the model-parallel group (``clip_grads.get_grad_norm_fp32``),
    once. ``grad_elt``: bytes per main-gradient element (``grad_bytes``). The tied embeddings' all-reduce between
    stages: ``tied_embedding_sync``."""
    coalesced = None
    if tp > 1 and sp:
        norm = (2 if model.norm == "layernorm" else 1) * model.hidden_size * grad_elt
        coalesced = (float(norm), 2.0 * norm)
    once: Comms = (Collective("tp", "all_reduce", 4),) if tp > 1 else ()
    return StepReductions(((), (), ()), once, coalesced)


def tied_embedding_sync(model: ModelSpec, grad_elt: int, tp: int) -> Comms:
    """Megatron-core's ``_allreduce_word_embedding_grads`` (core_v0.16.1 finalize_model_grads.py): with tied
    embeddings and the LM head on another stage than the embedding (pp > 1), the word embedding's main gradient
    (V/t × h, vocabulary-parallel) all-reduced between the first and the last stage — the embedding group, axis
    ``"pp"``, two ranks — at the end of both ranks' step."""
    if not model.tie_embeddings:
        return ()
    vocab = local_vocab(model, tp)  # the stack's padded vocabulary (``planner.specs.vocab``)
    return (Collective("pp", "all_reduce", vocab * model.hidden_size * grad_elt),)
