"""What a mixture-of-experts block does on one rank under expert parallelism (issue 23), as plain data: per MoE
block and micro-batch the router GEMM, the grouped expert GEMMs at their per-expert shapes, the shared experts,
the token dispatch/combine all-to-all over the EP group, the expert tensor-parallel exchanges, the memory-bound
permutes and the parameters and activations it holds — set beside the dense MLP that the block's op list
(``planner.workload.ops``, ``"transformer_block"``) prices, so composition replaces that MLP by this one.

Notation (notes §5, ../shared/notes/moe-cp-fp8.md): b·s tokens per micro-batch, h hidden, E routed experts, k
top-k, f the expert width, fs the shared experts' total width, β bytes per element. A rank dispatches its
tokens T = b·s/tp (the sequence-parallel shard; b·s at tp = 1). Layout (Megatron-core's folding,
``planner.specs.ep_rules``): E/ep experts per rank; with etp = tp > 1 the dispatched rows are all-gathered over
the TP group (T_in = b·s) and each expert's width is f/tp; with etp = 1, T_in = T and whole experts.

* grouped GEMMs (``torch._grouped_mm`` / TE grouped GEMM, ``--moe-grouped-gemm``): per local expert M =
  T_in·k·ep/E rows (uniform routing; × ``load_imbalance`` on the busiest rank), N × K of w1, w3 (f/etp × h) and
  w2 (h × f/etp): total FLOPs T_in·k·6·h·f/etp per rank, the active-parameter count (top-k);
* all-to-all (``--moe-token-dispatcher-type alltoall``, torchtitan ``all_to_all_single``): forward dispatch and
  combine, each T·k·h·β bytes sent per rank; backward both again (4 per layer; 6 under full recomputation, which
  reruns the forward);
* etp = tp > 1: an all-gather and a reduce-scatter of the T_in·k·h dispatched rows over TP per direction, in
  place of the dense MLP's sequence-parallel exchange (which stays only for shared experts);
* memory-bound: router softmax/top-k over T·E fp32 scores, permute and unpermute of the T_in·k·h rows (read +
  write, before and after the exchange), the SwiGLU product over T_in·k·f/etp.

Megatron-core's alltoall dispatcher (``dispatch="megatron"``: ``Stack.moe_dispatch``; core_v0.16.1, commit
55ac7082, ``megatron/core/transformer/moe/token_dispatcher.py`` ``MoEAlltoAllTokenDispatcher``) adds to this:

* a second permutation on each side when a rank holds more than one expert (E/ep > 1, any ep): the rows received
  from the all-to-all, grouped by source rank, are sorted by local expert (``dispatch_postprocess``,
  ``sort_chunks_by_idxs`` at token_dispatcher.py:732) and unsorted before the combine (``combine_preprocess``,
  token_dispatcher.py:767) — each a read + write of the T_in·k·h rows (with ``--moe-pad-expert-input-to-capacity``
  the same copy as ``.transpose(0, 1).contiguous()``), forward and backward;
* two small exchanges over the EP group, latency-bound, blocking on the compute stream: the token counts'
  all-gather (``preprocess``, token_dispatcher.py:539: E int64 counts a rank over the tp·ep group, forward only — no
  gradient; none when padded to capacity, whose splits are fixed) priced as the all-to-all of ep·E·8 bytes that
  delivers the same (ep − 1)·E·8 bytes to each rank, and the probabilities' all-to-all beside the tokens'
  (``token_dispatch``, token_dispatcher.py:669: T·k·β bytes, the router's dtype; its autograd backward another);
  both again in the backward under full recomputation. The host's wait for the counts' device-to-host copy
  (``_maybe_dtoh_and_synchronize``, token_dispatcher.py:862-901: copied at ``before_permutation_1``, waited on at
  ``before_ep_alltoall`` with ep > 1 dropless) is not priced: the host launches the first permutation between the
  copy and the wait, so the device idles only if that permutation (T·k·h·β read and written: ≈ 75 µs on the
  26.04.01 gpt-oss row, 0.2 ms on the Qwen3-30B-A3B one) ends before the woken host launches the all-to-all (a few µs: ``gpu.GPU_LAUNCH_US``).
  What the dropless path costs beyond this is not priced and not known: on 16 H100 the same Qwen3-30B-A3B mapping
  (GBS 512, MBS 2, PP 2, VP 24, EP 8, FP8 current scaling) ran 10494 tok/s/GPU padded to capacity (Megatron-Bridge
  25.09; no counts, no sync) and 5275 dropless (25.11), where this model prices the two within 5 % (10598, 10132);
  the 25.11 run also differs in container and, by its preset, in ``overlap_moe_expert_parallel_comm`` (issue 23).
  NVIDIA tracks that 2× as a regression of the 25.11 recipe (Megatron-Bridge issue #1998), fixed by a recipe change
  (PR #2477: HybridEP, no EP overlap) whose dropless dispatch still waits for the counts each layer (core 55ac7082
  fused_a2a.py:365-367) at 9058 tok/s/GPU: the wait alone is not the 2×; unpriced host time is the likely rest (docs/validation.md);
* the routing probabilities ride into the experts and are applied in the fused weighted activation
  (``experts.py`` ``TEGroupedMLP.forward``: ``weighted_bias_swiglu_impl`` / ``weighted_bias_quick_geglu_impl`` at
  experts.py:692/699, the Megatron-Bridge recipes' ``bias_activation_fusion``), and the combine's ``unpermute``
  (token_dispatcher.py:833) merges no probabilities, so the saved tensors per routed row are fc1's input (h),
  fc1's output (2f/etp, the activation's input) and the activation's output (f/etp, fc2's input): β·(h + 3f/etp),
  no copy of the experts' output; the dense MLP it replaces saved its TE ``LayerNormMLP`` tensors (3·f/tp per
  token with SwiGLU, 2 with GeLU, under the ``te`` activation formula: ``activations.te_block_saved_terms``).
  Under an FP8 recipe TE's ``GroupedLinear`` (v2.9, commit 70f53666, ``pytorch/module/grouped_linear.py:197-205``;
  the same in v2.8 and v2.10) saves each expert's input quantized, columnwise only (``update_usage(rowwise_usage=
  False, columnwise_usage=True)``): fc1's and fc2's inputs at 1 byte an element, β·2f/etp + (h + f/etp) a row
  (Megatron keeps the original input only with ``moe_act`` recomputation or fc1 offloading: experts.py:592-601);
* experts with biases (``MoeSpec.expert_bias``, gpt-oss): fc1's bias is added inside TE's grouped GEMM
  (``skip_bias_add=False``), fc2's is returned (``skip_bias_add=True``) and added by ``TEGroupedMLP._apply_bias``
  (experts.py:609-626) as a Python loop over the local experts — ``t + b * p`` per expert (the product b·p
  broadcast to the expert's [rows, h], written; then read with t and the sum written) and a ``torch.cat`` of
  the results (read + written): 6 passes of the T_in·k·h·β rows forward; backward the product's gradients
  grad·p (for b) and grad·b (for p), each written and reduced (``cat``'s and the sum's gradients are views):
  6 passes again;
* a clamped SwiGLU (``MoeSpec.swiglu_limit``, gpt-oss: Megatron-Bridge's ``activation_func_clamp_value`` 7.0 with
  ``quick_gelu`` and ``bias_activation_fusion``, v0.2.0–v0.3.1 models/gpt_oss/gpt_oss_provider.py:79-84, v0.4.0
  gpt_oss_bridge.py:73-84) is clamped outside the fused activation: ``weighted_bias_quick_geglu_impl``
  (megatron/core/fusions/fused_bias_geglu.py:410-441, the same at every Megatron-LM commit Megatron-Bridge
  v0.2.0–v0.4.2 pins: 0d8e0714, b0cc2706, 55ac7082, d7288711, 2edffadb) runs in eager PyTorch
  ``input.chunk(2, -1)``, ``x_glu.clamp(max=limit)``, ``x_linear.clamp(-limit, limit)`` and ``torch.cat`` before
  the compiled ``WeightedQuickGeGLUFunction`` (``clamp_ops``). Forward: each clamp reads and writes f, the cat reads
  and writes 2f (8·f·β a row, 3 kernels). Backward (PyTorch ``FunctionsManual.cpp`` ``clamp_backward`` and
  ``cat_tensors_backward``; ``split_backward`` for the chunk; read at pytorch/pytorch 002ca6715b): the cat's
  gradients are views; the gate's ``where(self <= max, grad, 0)`` (a 1-byte mask written, then read with the
  gradient), the up half's ``where((self >= min).logical_and_(self <= max), grad, 0)`` (two masks, their in-place
  and, the where) and the chunk's gradient ``cat`` of the two halves (2f read and written): 11·f·β + 8·f bytes a
  row, 7 kernels. The clamps save their input (fc1's output, kept beside the cat's result the activation saves):
  2·f·β more saved a row.

Padded to capacity (``MoeSpec.pad_to_capacity``; Megatron-core core_v0.16.1 ``--moe-pad-expert-input-to-capacity``):
the T·k assignments above become C·E rows per rank, C = ⌈T·k/E × cf⌉ (``expert_capacity``), in every term — the
all-to-all, the ETP exchange, the permutes, the grouped GEMMs (C·ep·T_in/T rows per local expert) and the saved
activations — whatever the load (``routed_rows``, ``expert_rows``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from planner.specs import ModelSpec
from planner.workload.collectives import Collective, Comms
from planner.workload.ops import MemOp

#: (M, N, K, count): ``count`` GEMMs of M × N × K.
Gemm = tuple[int, int, int, int]


@dataclass(frozen=True, slots=True)
class ExpertWork:
    """One MoE block's MLP per micro-batch on one rank, beside the dense MLP it replaces."""

    #: forward GEMMs of the MoE MLP: router, grouped experts (per expert, local experts), shared experts
    gemms: tuple[Gemm, ...]
    #: forward GEMMs of the dense MLP the block's op list holds (w1, w3, w2 at b·s × ffn/tp)
    dense_gemms: tuple[Gemm, ...]
    #: forward HBM bytes of the MoE MLP's memory-bound ops, and of the dense MLP's activation
    mem_bytes: float
    dense_mem_bytes: float
    #: per direction, blocking on the compute stream: the EP all-to-alls, the ETP exchanges added and the
    #: dense MLP's TP exchange they replace (to take away)
    a2a_fwd: Comms
    a2a_bwd: Comms
    tp_fwd: Comms
    tp_bwd: Comms
    dense_tp_fwd: Comms
    dense_tp_bwd: Comms
    #: parameters this rank holds per MoE block: the routed experts' (sharded over EP × ETP), the rest of the
    #: MoE MLP's (router, shared experts) and the dense MLP's the op list counted
    expert_params: int
    other_params: int
    dense_params: int
    #: saved activation bytes with no recomputation: the MoE MLP's and the dense MLP's hidden tensors
    saved: float
    dense_saved: float
    #: forward FLOPs of the MoE MLP and of the dense MLP on this rank
    flops: float
    dense_flops: float
    #: (forward, backward) HBM bytes of Megatron's per-expert output bias (``TEGroupedMLP._apply_bias``), apart
    #: from ``mem_bytes`` (whose backward moves twice the forward's): each way its own count
    bias_bytes: tuple[float, float] = (0.0, 0.0)
    #: (forward, backward) memory-bound ops of Megatron's clamp of a clamped SwiGLU outside its fused activation
    #: (``clamp_ops``; gpt-oss), apart from ``mem_bytes`` as ``bias_bytes`` is
    clamp_ops: tuple[tuple[MemOp, ...], tuple[MemOp, ...]] = ((), ())


def clamp_ops(rows: float, f: int, elt: int) -> tuple[tuple[MemOp, ...], tuple[MemOp, ...]]:
    """(forward, backward) ops of Megatron-core's eager clamp of ``rows`` routed rows of fc1's output [rows, 2f]
    before its fused quick-GEGLU (module docstring; fused_bias_geglu.py:424-431 at 0d8e0714…2edffadb): forward the
    gate's and the up half's ``clamp`` (f read + f written each) and the ``cat`` (2f read + 2f written); backward
    ``clamp_backward``'s masks (1 byte an element) and ``where``s and the chunk's gradient ``cat``."""
    r, b = float(rows), float(elt)
    fwd = (
        MemOp("clamp_gate", r * 2 * f * b, 1),
        MemOp("clamp_up", r * 2 * f * b, 1),
        MemOp("clamp_cat", r * 4 * f * b, 1),
    )
    bwd = (
        MemOp("gate_le_mask", r * f * (b + 1), 1),  # self <= max: read self, write a bool
        MemOp("gate_where", r * f * (1 + 2 * b), 1),  # where(mask, grad, 0): read mask + grad, write
        MemOp("up_ge_le_masks", 2 * r * f * (b + 1), 2),  # self >= min, self <= max
        MemOp("up_and", r * 3 * f, 1),  # logical_and_ in place: read two bools, write one
        MemOp("up_where", r * f * (1 + 2 * b), 1),
        MemOp("chunk_grad_cat", r * 4 * f * b, 1),  # split_backward: cat of the halves' gradients
    )
    return fwd, bwd


def expert_work(
    model: ModelSpec,
    mbs: int,
    seq: int,
    tp: int,
    sp: bool,
    ep: int,
    etp: int,
    elt: int,
    recompute: str,
    glu: float = 6.0,
    dispatch: str = "generic",
    activations: str = "zoo",
    fp8: bool = False,
) -> ExpertWork:
    """``ExpertWork`` of a MoE block of ``model`` (module docstring); ``glu``: HBM bytes per FFN element of the
    SwiGLU product under the stack's kernels (``ops.op_bytes``; fused: 3β); ``dispatch``: the stack's token
    dispatcher (``Stack.moe_dispatch``: "megatron" sorts by local expert and saves no combine copy);
    ``activations``: the stack's saved-tensor formula (``Stack.activations``), whose dense MLP this block's replaces
    (``te``: 3·f/tp per token with SwiGLU, 2 with GeLU; the others 4); ``fp8``: an FP8 recipe, under which the
    Megatron experts' GEMM inputs are saved at 1 byte (module docstring)."""
    moe = model.moe
    assert moe is not None  # callers ask only for MoE models
    h, E = model.hidden_size, moe.num_experts
    full = mbs * seq  # tokens of the micro-batch (gathered over TP)
    T = full // tp if (sp and tp > 1) else full  # tokens this rank routes and dispatches
    T_in = full if etp > 1 else T  # rows into this rank's experts (gathered over ETP)
    f = moe.expert_ffn_hidden_size // etp
    local = E // ep
    sent, routed = routed_rows(model, T, T_in)
    rows = expert_rows(model, T, T_in, ep)  # per local expert
    fs = moe.shared_experts * moe.shared_ffn // tp if moe.shared_experts else 0
    fd = model.ffn_hidden_size // tp
    gemms: list[Gemm] = [(T, E, h, 1), (rows, f, h, 2 * local), (rows, h, f, local)]
    if fs:
        gemms += [(full, fs, h, 2), (full, h, fs, 1)]
    dense: tuple[Gemm, ...] = ((full, fd, h, 2), (full, h, fd, 1))
    megatron = dispatch == "megatron"
    # permute + unpermute, each read + write; Megatron's sort by local expert and its inverse too (E/ep > 1)
    permute = (4 if megatron and local > 1 else 2) * 2.0 * routed * h * elt
    router = 3.0 * T * E * 4  # softmax / top-k over fp32 scores
    mem = glu * (rows * local * f + full * fs) + permute + router
    dispatched = sent * h * elt
    a2a: Comms = (Collective("ep", "all_to_all", dispatched, 2),) if ep > 1 else ()
    a2a_b: Comms = (Collective("ep", "all_to_all", dispatched, 4 if recompute == "full" else 2),) if ep > 1 else ()
    if megatron and ep > 1:  # its small exchanges on the compute stream (module docstring)
        rerun = 1 if recompute == "full" else 0
        small = [Collective("ep", "all_to_all", sent * elt, 1)]  # the probabilities, forward; its backward's
        if not moe.pad_to_capacity:  # the token counts' all-gather (E int64 a rank), forward only
            small.append(Collective("ep", "all_to_all", ep * E * 8.0, 1))
        a2a += tuple(small)
        a2a_b += (Collective("ep", "all_to_all", sent * elt, 1),)
        a2a_b += tuple(replace(c, count=c.count * rerun) for c in small if rerun)
    exch = 4 if recompute == "full" else 2  # backward reruns the forward's under full recomputation
    dense_tp: Comms = ()
    moe_tp: Comms = ()
    if tp > 1 and sp:  # the dense MLP's all-gather + reduce-scatter of the residual stream
        dense_tp = () if fs else (Collective("tp", "reduce_scatter", full * h * elt, 2),)
        if etp > 1:
            moe_tp = (Collective("tp", "reduce_scatter", routed * h * elt, 2),)
    tp_b: Comms = tuple(Collective(c.axis, c.op, c.nbytes, c.count * exch / 2) for c in moe_tp)
    dense_b: Comms = tuple(Collective(c.axis, c.op, c.nbytes, c.count * exch / 2) for c in dense_tp)
    # gpt-oss (expert_bias): gate and up biases of f, a down bias of h per expert; its router's bias
    expert_params = local * (3 * h * f + ((2 * f + h) if moe.expert_bias else 0))
    other = E * h + (E if moe.router_bias else 0) + (3 * h * fs if fs else 0)
    # Megatron's fc2 bias (skip_bias_add) per local expert: b·p written [rows, h], t + b·p, torch.cat; backward
    # the product's two gradients (grad·p and grad·b, each written and reduced): 6 passes of the rows each way
    bias = 6.0 * rows * local * h * elt if megatron and moe.expert_bias else 0.0
    # per routed row: Megatron fc1's input, fc1's output, the activation's (module docstring), the GEMMs' inputs at
    # 1 byte under FP8; else also a combine copy
    clamped = megatron and moe.swiglu_limit is not None  # gpt-oss: the eager clamp before the fused activation
    if megatron:
        q = 1.0 if fp8 else float(elt)  # fc1's and fc2's inputs as GroupedLinear saves them
        per_row = q * (h + f) + elt * 2 * f * (2 if clamped else 1)  # + fc1's output, which the clamps save
    else:
        per_row = elt * (2 * h + 3 * f)
    saved = routed * per_row + 4.0 * full * fs * elt + 4.0 * T * E
    dense_hidden = (3 if model.activation == "swiglu" else 2) if activations == "te" else 4  # the dense MLP's
    return ExpertWork(
        gemms=tuple(gemms),
        dense_gemms=dense,
        mem_bytes=mem,
        dense_mem_bytes=glu * full * fd,
        a2a_fwd=a2a,
        a2a_bwd=a2a_b,
        tp_fwd=moe_tp,
        tp_bwd=tp_b,
        dense_tp_fwd=dense_tp,
        dense_tp_bwd=dense_b,
        expert_params=expert_params,
        other_params=other,
        dense_params=3 * h * fd,
        saved=saved,
        dense_saved=float(dense_hidden * full * fd * elt),
        flops=float(sum(2.0 * m * n * kk * c for m, n, kk, c in gemms)),
        dense_flops=float(sum(2.0 * m * n * kk * c for m, n, kk, c in dense)),
        bias_bytes=(bias, bias),
        clamp_ops=clamp_ops(rows * local, f, elt) if clamped else ((), ()),
    )


def expert_capacity(tokens: int, model: ModelSpec) -> int:
    """Rows an expert takes from the ``tokens`` one rank routes: Megatron-core core_v0.16.1 ``get_capacity(
    num_tokens=tokens·k, num_experts=E, capacity_factor)`` = ⌈(tokens·k / E) · capacity_factor⌉, the float
    expression its router and its alltoall dispatcher evaluate (``moe_utils.py``, ``token_dispatcher.py``)."""
    moe = model.moe
    assert moe is not None and moe.capacity_factor is not None
    return math.ceil((tokens * moe.top_k / moe.num_experts) * moe.capacity_factor)


def routed_rows(model: ModelSpec, T: int, T_in: int) -> tuple[float, float]:
    """(rows one rank dispatches, rows into its experts in all) of a MoE block, whatever ep: unpadded, the T·k
    assignments of its T routed tokens × the busiest rank's ``load_imbalance`` (capped by ``capacity_factor``:
    the kept ones), T_in·k·imb into the experts (T_in = T·etp, gathered over ETP); padded to capacity
    (``MoeSpec.pad_to_capacity``, Megatron-core's ``--moe-pad-expert-input-to-capacity``): C = ``expert_capacity``
    rows for each of the E experts whatever the load — the alltoall dispatcher's ``num_out_tokens = capacity ·
    num_experts`` sent with even splits (``input_splits`` None) — and C·E·T_in/T into the experts."""
    moe = model.moe
    assert moe is not None
    if moe.pad_to_capacity:
        sent = expert_capacity(T, model) * moe.num_experts
        return float(sent), float(sent * (T_in // T))
    imb = moe.load_imbalance if moe.capacity_factor is None else min(moe.load_imbalance, moe.capacity_factor)
    return T * moe.top_k * imb, T_in * moe.top_k * imb


def expert_rows(model: ModelSpec, T: int, T_in: int, ep: int) -> int:
    """Rows of one local expert's grouped GEMMs at ep: unpadded ⌈T_in·k·ep/E·imb⌉ (uniform routing, × the busiest
    rank's imbalance); padded C from each of the ep·T_in/T ranks that send to it (Megatron-core's
    ``num_tokens_per_local_expert = capacity · tp_size · ep_size``, tp_size the expert-TP group)."""
    moe = model.moe
    assert moe is not None
    if moe.pad_to_capacity:
        return expert_capacity(T, model) * ep * (T_in // T)
    imb = moe.load_imbalance if moe.capacity_factor is None else min(moe.load_imbalance, moe.capacity_factor)
    return math.ceil(T_in * moe.top_k * ep / moe.num_experts * imb)


def expert_dp(tp: int, dp: int, ep: int, etp: int) -> int:
    """Expert-data-parallel ranks (tp · dp = etp · ep · edp): the group an expert's gradients and ZeRO shards span."""
    return tp * dp // (ep * etp)
