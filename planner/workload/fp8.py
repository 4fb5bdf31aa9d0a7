"""What FP8 training (``training.precision: "fp8"``, ``planner.specs.fp8``) changes in a layer's ops: which linears
run their GEMMs in FP8 (``fp8_linears``: the ``Linear`` entries of ``planner.workload.ops.linears`` with ``fp8``
set), the casts and amax reductions around them as memory-bound ops (``cast_ops``), the bytes its FSDP weight
all-gathers move (``gathered_params``) and the device memory it adds (``fp8_state_bytes``). Priced by
``planner.pricing.gpu`` (FP8 GEMMs at the FP8 peak) like every other op.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from planner.specs.fp8 import RECIPES
from planner.workload.ops import MOE_BLOCK, Linear, MemOp, linears, rerun_linears

if TYPE_CHECKING:
    from planner.workload.inputs import Inputs

#: Block kinds whose linears run in FP8 (the LM head and the embedding stay 16-bit: ``planner.specs.fp8``).
FP8_KINDS = ("transformer_block", MOE_BLOCK)

#: Linears that read the same input tensor as an earlier one: it is cast to FP8 once (Transformer Engine's fused
#: QKV and FC1 GEMMs; under torch.compile the identical amax and cast of torchao's separate wq/wk/wv are one).
SHARED_INPUT = {"wk": "wq", "wv": "wq", "w3": "w1", "shared_w3": "shared_w1"}


def _converted(lin: Linear) -> bool:
    """The linears a recipe converts: a block's dense linears; the router (tiny, precision-sensitive) and
    grouped experts (their own converters, not priced here) stay 16-bit."""
    return lin.experts == 1 and lin.name != "router"


def fp8_linears(ctx: Inputs, kind: str, tp: int) -> tuple[Linear, ...]:
    """The layer's linears (``ops.linears``) with ``fp8`` set on those whose GEMMs run in FP8 under the request's
    recipe (none unless ``training.precision`` is fp8). Memoised on ``ctx`` (``Inputs.fp8_cache``)."""
    key = ("linears", kind, tp)
    hit = ctx.fp8_cache.get(key)
    if hit is None:
        lins = linears(ctx.model, kind, tp)
        if ctx.fp8_recipe is not None and kind in FP8_KINDS:
            lins = tuple(replace(lin, fp8=True) if _converted(lin) else lin for lin in lins)
        hit = ctx.fp8_cache[key] = lins
    return hit  # type: ignore[return-value]


def fp8_gemm_shapes(ctx: Inputs, kind: str, tokens: int, tp: int) -> list[tuple[int, int, int, int, bool]]:
    """Forward GEMMs (M, N, K, count, fp8) of one layer on one TP rank, as ``ops.gemm_shapes`` with each GEMM's
    precision."""
    out: dict[str, list] = {}
    for lin in fp8_linears(ctx, kind, tp):
        if lin.gemm in out:
            out[lin.gemm][3] += lin.experts
        else:
            out[lin.gemm] = [tokens * lin.routed // lin.experts, lin.n, lin.k, lin.experts, lin.fp8]
    return [(m, n, k, c, f) for m, n, k, c, f in out.values()]


def cast_ops(
    ctx: Inputs, kind: str, mbs: int, tp: int, sp: bool = False
) -> tuple[tuple[MemOp, ...], tuple[MemOp, ...]]:
    """(forward, backward) memory-bound ops of the FP8 casts of one layer per micro-batch (T tokens; bytes per
    element of the 16-bit tensor cast: ``planner.specs.fp8.RecipeFacts``). Forward: each distinct input (T × k)
    and, unless the recipe caches FP8 weights across micro-batches, each weight (n × k), at amax + cast bytes.
    Backward: each output gradient (T × n) cast; the other orientation the weight-gradient and input-gradient
    GEMMs need — FP8 transposes (read 1, write 1) of the inputs, output gradients and weights for one-orientation
    recipes, second casts for rowwise/MXFP8; torchao rowwise's scaling of both backward GEMMs' outputs after the
    GEMM (``RecipeFacts.rescale_bytes``: each linear's input gradient, T × k, and weight gradient, n × k). Kernels:
    an amax pass and a cast each (one fused kernel under ``compiled`` kernels or without an amax pass). Where the
    TP all-gathers run in FP8 (``fp8_tp_gather``) the casts of the gathered inputs and of the row-parallel output
    gradients run on the local shard, T/tp rows; the transposes take the gathered FP8 tensors."""
    lins = [lin for lin in fp8_linears(ctx, kind, tp) if lin.fp8]
    tokens = mbs * ctx.training.seq_len
    return linear_cast_ops(ctx, lins, tokens, tokens // tp if fp8_tp_gather(ctx, tp, sp) else tokens)


def linear_cast_ops(
    ctx: Inputs, lins: list[Linear], tokens: int, local: int | None = None
) -> tuple[tuple[MemOp, ...], tuple[MemOp, ...]]:
    """``cast_ops`` of the FP8 linears ``lins`` over ``tokens`` rows (a MoE block's dense MLP to take away and its
    shared experts: ``grouped_cast_ops``' callers); ``local``: the rows of a cast made before an FP8 TP all-gather
    (``fp8_tp_gather``; None: ``tokens``)."""
    recipe = ctx.fp8_recipe
    if recipe is None or not lins:
        return (), ()
    r = RECIPES[recipe]
    local = tokens if local is None else local
    a = r.amax_bytes + r.cast_bytes
    per_cast = 1 if r.amax_bytes == 0 or ctx.stack.kernels == "compiled" else 2
    own = [lin for lin in lins if SHARED_INPUT.get(lin.name) not in {x.name for x in lins}]  # distinct inputs
    inputs = sum(tokens * lin.k for lin in own)
    n_inputs = len(own)
    grads = sum(tokens * lin.n for lin in lins)
    weights = sum(lin.n * lin.k for lin in lins)
    cast_in = sum((local if lin.name in TP_GATHERED_INPUTS else tokens) * lin.k for lin in own)
    cast_grad = sum((local if lin.name in TP_GATHERED_GRADS else tokens) * lin.n for lin in lins)
    fwd = [MemOp("fp8_cast_input", a * cast_in, per_cast * n_inputs)]
    if not r.weight_cached:
        fwd.append(MemOp("fp8_cast_weight", a * weights, per_cast * len(lins)))
    bwd = [MemOp("fp8_cast_grad", a * cast_grad, per_cast * len(lins))]
    if r.orientations == 1:  # FP8 transposes of the saved input, the output gradient and the weight
        bwd.append(MemOp("fp8_transpose", 2.0 * (inputs + grads), n_inputs + len(lins)))
        if not r.weight_cached:
            bwd.append(MemOp("fp8_transpose_weight", 2.0 * weights, len(lins)))
    else:  # a second cast along the other axis
        bwd.append(MemOp("fp8_cast_other_axis", a * (inputs + grads), per_cast * (n_inputs + len(lins))))
        if not r.weight_cached:
            bwd.append(MemOp("fp8_cast_weight_other_axis", a * weights, per_cast * len(lins)))
    if r.rescale_bytes:  # the backward GEMMs' outputs scaled after the GEMM (torchao rowwise: ``RecipeFacts``)
        dgrads = sum(tokens * lin.k for lin in lins)
        bwd.append(MemOp("fp8_rowwise_rescale", r.rescale_bytes * (dgrads + weights), 2 * len(lins)))
    return tuple(fwd), tuple(bwd)


#: Recipes whose amax op torchtitan's op-level selective checkpointing keeps: torchao's tensorwise amax is
#: ``torch.max(torch.abs(x))`` (``aten.max.default``, in ``_save_list``), the axiswise one ``torch.amax(..., dim)``
#: (``aten.amax.default``, not kept) — torchao ``float8/float8_utils.py:64-69`` at 6243040; torchtitan
#: ``models/llama3/parallelize_llama.py:218-227`` at 820504e.
SAC_SAVED_AMAX = ("tensorwise",)


def sac_rerun_cast_ops(ctx: Inputs, mbs: int, tp: int, sp: bool = False) -> tuple[MemOp, ...]:
    """The forward FP8 casts torchtitan's op-level selective checkpointing reruns in backward, per micro-batch: those
    of the linears whose ``aten.mm`` it recomputes (``ops.rerun_linears``: wk, wo, w3). Its policy keeps only the
    ``_save_list`` ops (``aten.mm`` every other call, the SDPA kernels, ``reduce_scatter_tensor``, ``aten.max``) and
    marks the rest PREFER_RECOMPUTE (torchtitan ``parallelize_llama.py:218-268`` at 820504e), so an even mm's FP8
    operands — its input's cast and its weight's, each an amax and a cast (torchao ``hp_tensor_to_float8_dynamic``
    in ``matmul_with_hp_or_float8_args.forward``, ``float8_linear.py:87-114`` at 6243040) — are computed again to
    rerun it; the backward's own casts are ``cast_ops``' (torchao recasts the saved 16-bit input and weight). Where
    the amax op is kept (``SAC_SAVED_AMAX``) the rerun is the cast alone (``RecipeFacts.cast_bytes``, one kernel
    each). The odd mms' casts are not rerun: their outputs are kept and their backward reads the 16-bit tensors."""
    recipe = ctx.fp8_recipe
    if recipe is None:
        return ()
    even = {lin.name for lin in rerun_linears(ctx.model, tp)}
    lins = [lin for lin in fp8_linears(ctx, "transformer_block", tp) if lin.fp8 and lin.name in even]
    tokens = mbs * ctx.training.seq_len
    fwd, _ = linear_cast_ops(ctx, lins, tokens, tokens // tp if fp8_tp_gather(ctx, tp, sp) else tokens)
    if recipe not in SAC_SAVED_AMAX:
        return fwd
    r = RECIPES[recipe]
    share = r.cast_bytes / (r.amax_bytes + r.cast_bytes)
    per_cast = 1 if ctx.stack.kernels == "compiled" else 2  # ``linear_cast_ops``' kernels per cast, amax and cast
    return tuple(MemOp(op.name, op.nbytes * share, op.kernels // per_cast) for op in fwd)


def fp8_all_gather(ctx: Inputs) -> bool:
    """Whether the stack all-gathers FSDP-sharded weights in FP8 under this recipe (torchtitan tensorwise:
    ``enable_fsdp_float8_all_gather``; ``Stack.fp8_all_gather``)."""
    return ctx.fp8_recipe is not None and ctx.fp8_recipe in ctx.stack.fp8_all_gather


#: The column-parallel linears whose input is the sequence-parallel all-gather of a block (one gather each group),
#: and the row-parallel linears whose output gradient is all-gathered in backward (``collectives.ROW_PARALLEL``).
TP_GATHERED_INPUTS = ("wq", "wk", "wv", "w1", "w3")
TP_GATHERED_GRADS = ("wo", "w2")


def fp8_tp_gather(ctx: Inputs, tp: int, sp: bool) -> bool:
    """Whether the block's sequence-parallel all-gathers move FP8 (1 byte an element) and their casts run on the
    local shard, before the gather; the reduce-scatters stay 16-bit. Dense models only: a MoE block's dense MLP is
    taken away at 16-bit TP bytes (``pricing.expert_parallel``), so their gathers stay 16-bit here.

    * torchtitan at 820504e (the 2025-06 async-TP benchmark's commit, ``models/llama3/parallelize_llama.py``
      ``apply_tp``: ``enable_float8_tensorwise_tp`` = float8 converter and a recipe other than rowwise) swaps in
      torchao's ``Float8ColwiseParallel`` / ``Float8RowwiseParallel`` / ``PrepareFloat8ModuleInput`` (torchao
      ``float8/float8_tensor_parallel.py`` at 6243040): the attention's and the FFN's sequence-sharded input is cast
      to FP8 (``hp_tensor_to_float8_dynamic``) and then redistributed Shard(1) → Replicate, and each row-parallel
      output gets ``NoopFwToFloat8BwDynamic`` after its reduce-scatter, so in backward its gradient is cast on the
      shard and all-gathered in FP8. Rowwise keeps plain ``ColwiseParallel``/``RowwiseParallel`` ("float8
      all-gather with TP is only supported for tensorwise"): the recipes of its FP8 FSDP all-gather
      (``Stack.fp8_all_gather``);
    * Transformer Engine (``Stack.fp8_sp_gather``): ``LayerNormLinear`` writes its norm output in FP8 and
      all-gathers that (TE 7d576ed2, NeMo 24.07's, ``pytorch/module/layernorm_linear.py:125-126, 152-154``: a
      ``torch.uint8`` ``ln_out``, then ``gather_along_first_dim``; v2.9 ``layernorm_linear.py:246-265``:
      ``gather_along_first_dim(ln_out, tp_group, quantizer=input_quantizer)``), and the backward of a row-parallel
      ``Linear`` casts its output gradient to FP8 on the shard before the all-gather (7d576ed2
      ``pytorch/module/base.py:632-652`` ``grad_output_preprocess``; v2.9 ``base.py:1162-1192``), the userbuffers
      path too (its FP8 buffers). MXFP8's per-32 scales (1/32 byte) are not counted."""
    if tp == 1 or not sp or ctx.model.moe is not None or ctx.fp8_recipe is None:
        return False
    return fp8_all_gather(ctx) or ctx.fp8_recipe in ctx.stack.fp8_sp_gather


def fp8_cast_after_gather(ctx: Inputs, tp: int, sp: bool) -> bool:
    """Whether the block's FP8 linears cast their inputs after a 16-bit SP all-gather (an FP8 recipe whose
    all-gathers do not move FP8: ``fp8_tp_gather`` false), so that the gathered tensor feeds the cast, not the
    matmul: async TP's all-gather → matmul pattern does not fuse them (``workload.tp_overlap``). torchtitan rowwise:
    plain ``ColwiseParallel`` redistributes the bf16 input, then torchao's ``Float8Linear`` casts it
    (``float8_linear.py:87-97`` at 6243040, ``hp_tensor_to_float8_dynamic`` along dim -1), and in backward the
    bf16 output gradient all-gathered before wo / w2 is cast the same way (``:144-154``)."""
    if tp == 1 or not sp or ctx.fp8_recipe is None:
        return False
    return not fp8_tp_gather(ctx, tp, sp)


def gathered_params(ctx: Inputs, params: tuple[int, int, int], tp: int) -> tuple[int, int, int]:
    """(block, embedding, LM head) parameters as 16-bit-equivalent elements an FSDP weight all-gather moves: with
    FP8 all-gather a block's FP8 linears travel at 1 byte a weight, half a 16-bit element (their biases and
    the norms stay 16-bit)."""
    if not fp8_all_gather(ctx):
        return params
    fp8_weights = sum(lin.n * lin.k for lin in fp8_linears(ctx, "transformer_block", tp) if lin.fp8)
    blk, emb, head = params
    return blk - fp8_weights // 2, emb, head


def fp8_state_bytes(ctx: Inputs, tp: int) -> int:
    """Device bytes one block adds under FP8 training on one TP rank: the FP8 weight and its transpose kept
    across micro-batches (recipes with ``weight_cached``: 2 bytes a weight) and each FP8 linear's scaling state."""
    recipe = ctx.fp8_recipe
    if recipe is None:
        return 0
    key = ("state", tp)
    hit = ctx.fp8_cache.get(key)
    if hit is None:
        r = RECIPES[recipe]
        lins = [lin for lin in fp8_linears(ctx, "transformer_block", tp) if lin.fp8]
        cached = 2 * sum(lin.n * lin.k for lin in lins) if r.weight_cached else 0
        hit = ctx.fp8_cache[key] = cached + r.scale_state_bytes * len(lins)
    return hit  # type: ignore[return-value]


def grouped_cast_ops(
    ctx: Inputs, rows: int, local: int, h: int, f: int, elt: int, padded: bool
) -> tuple[tuple[MemOp, ...], tuple[MemOp, ...]]:
    """(forward, backward) memory-bound ops FP8 adds to Megatron-core's grouped experts (``TEGroupedMLP``, the
    megatron stack's ``Stack.moe_dispatch``) per micro-batch: ``local`` experts of ``rows`` rows each, fc1 h → 2f
    (w1 and w3 in one GEMM), fc2 f → h (f per expert-TP rank). Sources: Megatron-core core_v0.15 (commit 0d8e0714,
    the Megatron-Bridge v0.2.0 submodule) ``moe/experts.py:837-840, 881-887, 977-978``; Transformer Engine v2.9
    ``pytorch/module/grouped_linear.py:93-127, 313-327``, ``pytorch/csrc/extensions/cast.cpp:103-150`` (multi-tensor
    quantize) and ``pytorch/csrc/quantizer.cpp:497-536`` (current scaling), ``pytorch/module/fp8_padding.py:113-139``.

    * each expert's slice of the two GroupedLinears' inputs (forward: rows × h into fc1, rows × f into fc2) and of
      their output gradients (backward: rows × h out of fc2, rows × 2f out of fc1) is quantized by
      ``tex.split_quantize`` with both usages (rowwise for the GEMM, columnwise for the weight gradient): an amax
      pass where the recipe has one (``RecipeFacts.amax_bytes``), the cast (``cast_bytes``) and the columnwise copy
      the same kernel writes (1 byte); the FP8 weights are cast on a step's first micro-batch only
      (``is_first_microbatch`` caching, as ``RecipeFacts.weight_cached``). Kernels: delayed scaling quantizes all the
      experts' slices in one fused ``nvte_multi_cast_transpose``; current scaling runs amax, scale and cast for
      every expert (3 kernels each); the others one quantize kernel an expert;
    * ``padded``: each expert's rows are padded to a multiple of 16 (32 for MXFP8) for the FP8 GEMMs
      (``Fp8Padding`` before fc1 — the hidden rows and the probabilities — and ``Fp8Unpadding`` after fc2; skipped
      only when every expert's count is already a multiple, which routed counts are not): each a read + write of
      the rows (probabilities fp32), one kernel each, and their gradients the same backward."""
    recipe = ctx.fp8_recipe
    if recipe is None:
        return (), ()
    r = RECIPES[recipe]
    per = r.amax_bytes + r.cast_bytes + 1.0
    k = 1 if recipe == "delayed" else local * (3 if r.amax_bytes else 1)
    n = rows * local
    fwd = [MemOp("fp8_grouped_fc1_input", per * n * h, k), MemOp("fp8_grouped_fc2_input", per * n * f, k)]
    bwd = [MemOp("fp8_grouped_fc2_grad", per * n * h, k), MemOp("fp8_grouped_fc1_grad", per * n * 2 * f, k)]
    if padded:
        pad = MemOp("fp8_grouped_padding", 2.0 * n * (2 * h * elt + 4), 3)
        fwd.append(pad)
        bwd.append(pad)
    return tuple(fwd), tuple(bwd)
