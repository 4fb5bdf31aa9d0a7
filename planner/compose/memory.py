"""Memory per pipeline rank, per GPU: the one formula the search constrains, the bounds screen with and
``Estimate.memory_per_stage`` itemises.

* weights, gradients, optimizer states: parameters on the rank × bytes per parameter under the ZeRO
  stage (``state_bytes``; Rajbhandari et al. 2020; 16-bit weights and gradients, K = 12 bytes of fp32
  master weights and Adam moments, K = 8 in fp32 training; ZeRO-1 shards K, ZeRO-2 also the
  gradients, ZeRO-3 everything, by dp);
* activations: saved bytes per layer (from the profile or ``planner.workload.analytic``) × copies alive at
  each of the schedule's activation peaks (1F1B: rank i holds min(pp − i, m); GPipe: m; interleaved:
  counted from the Megatron order), plus the embedding's and the LM head's;
* buffers: the loss's tensors on the last rank (``loss_buffer_bytes``), p2p send/recv buffers (and what the pipeline
  runtime keeps of every micro-batch, ``compose.pp_kept``), one
  layer's rematerialised activations under recomputation, ZeRO-3's gathered layers and gradient
  buffers (``zero3_buffer_bytes``);
* reserve: 1 GiB (CUDA context, NCCL and cuBLAS workspaces) + 5 % of the above (allocator
  fragmentation); a rank fits when its tensors are at most ``usable_bytes``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Generic, NamedTuple

from planner.compose.affine import NOTHING, Count, moe_counts, total
from planner.pricing.device import (  # noqa: F401 (re-exported: the memory a device keeps from tensors)
    DEFAULT_MEMORY_HEADROOM,
    FIXED_RESERVE_BYTES,
    FRAGMENTATION,
    GIB,
    reserve_bytes,
    usable_bytes,
    with_reserve_gib,
)
from planner.specs import BYTES_PER_ELEMENT, StageMemory
from planner.specs.stacks import Stack

if TYPE_CHECKING:
    from planner.compose.cost import Candidate, ClassCosts
    from planner.compose.terms import SharedTerms
    from planner.specs import TrainingSpec

#: Bytes of optimizer state per parameter beyond weights and gradients (ZeRO paper's K), by
#: (optimizer, mixed precision).
OPTIMIZER_STATE_BYTES = {("adam", True): 12, ("adam", False): 8, ("sgd", True): 8, ("sgd", False): 4}
#: HBM bytes touched per parameter by one optimizer step (read grad, read+write master weights and
#: states, write the 16-bit copy): Adam mixed = 2 + 8 + 8 + 8 + 2; SGD with momentum = 2 + 8 + 8 + 2.
OPTIMIZER_STEP_BYTES = {"adam": 28, "sgd": 20}


#: HBM bytes per parameter of the optimizer step besides the update (``memory.OPTIMIZER_STEP_BYTES``): the
#: gradient-norm pass of gradient clipping reads the fp32 main gradients (4; Megatron-LM ``clip_grad`` 1.0 in
#: its examples, torchtitan ``max_norm`` 1.0); with fp16 the loss-scale unscale and inf/NaN check reads and
#: writes them (8; ``torch._amp_foreach_non_finite_check_and_unscale_``, Megatron-LM megatron/optimizer/optimizer.py).
OPTIMIZER_EXTRA_BYTES = 4
LOSS_SCALE_BYTES = 8


def optimizer_step_bytes(optimizer: str, precision: str, optimizer_dtype: str = "fp32", grad_elt: int = 4) -> int:
    """HBM bytes per parameter the optimizer step moves: the update, the gradient-norm pass, fp16's unscale.

    ``optimizer_dtype="param"`` under mixed precision (``param_dtype_state_bytes``): the update reads the gradient
    (``grad_elt``, the dtype it was reduced in) and reads and writes the 16-bit parameter and each moment (apex
    ``DistributedFusedAdam`` with ``store_params=False`` updates the parameter shard in place: Adam 2 + 2·(2 + 2 + 2)
    = 14 bytes in bf16, against 28 with fp32 states and master weights); the norm pass reads the gradient once more."""
    if optimizer_dtype == "param" and precision != "fp32":
        e = BYTES_PER_ELEMENT[precision]
        update = grad_elt + 2 * e * (1 + MOMENTS[optimizer])
        return update + grad_elt + (2 * grad_elt if precision == "fp16" else 0)
    return OPTIMIZER_STEP_BYTES[optimizer] + OPTIMIZER_EXTRA_BYTES + (LOSS_SCALE_BYTES if precision == "fp16" else 0)


#: Optimizer moments per parameter (Adam: exp_avg and exp_avg_sq; SGD: the momentum buffer).
MOMENTS = {"adam": 2, "sgd": 1}


def param_dtype_state_bytes(optimizer: str, e: int) -> int:
    """K (bytes per parameter, sharded by ZeRO-1) of an optimizer whose states are in the parameters' 16-bit dtype
    (``Stack.optimizer_dtype="param"``): NeMo r2.0.0rc1 (579983fb) ``megatron_base_model.py:784-806`` passes
    ``optim.dtype`` to apex's ``DistributedFusedAdam`` and, that dtype being the model's (bf16 under
    ``megatron_amp_O2``), sets ``store_params=False``: no master copy. apex 810ffae (NeMo r2.0.0rc1 Dockerfile.ci:38)
    ``contrib/optimizers/distributed_fused_adam.py:440-465`` allocates each bucket's local shard of ``exp_avg`` and
    ``exp_avg_sq`` in that dtype: K = moments × e (Adam in bf16: 4, against 12).

    Not in K (cost model 54; 53 added it): apex's reduce-scattered gradient shard. ``_start_bucket_grad_sync``
    (``:1806-1818``) allocates it (``sync_grads_shard``, bucket size / DP elements in the grad buffer's dtype, i.e.
    ``grad_sync_dtype``, not fp32 unless that is), ``_finish_bucket_grad_sync`` (``:1862-1872``) keeps it as
    ``grads_shard`` for the step, and ``zero_grad`` (``:1461-1465``, ``self._grads_buckets.clear()``) drops it: NeMo
    calls ``zero_grad`` at the top of ``training_step`` (``megatron_gpt_model.py:804``), before the first forward, and
    syncs the buckets in the last micro-batch's backward only (``no_sync`` otherwise). So it lives from the last
    backward to the optimizer step, not at the activation peaks this memory model prices (the step's states alone,
    activations gone, stay below them)."""
    return MOMENTS[optimizer] * e


#: apex ``store_param_remainders`` (``Stack.optimizer_dtype="remainders"``): the low 16 bits of each fp32 master
#: weight in an int16 shard beside the bf16 parameter (apex 810ffae ``distributed_fused_adam.py:446-452``, required
#: with fp32 ``dtype`` and bf16 ``param_sync_dtype``: ``:645-660``), chosen by NeMo r2.0.0rc1 for optim.dtype fp32 over
#: bf16 parameters (``megatron_base_model.py:800-802``): K = 2 + 4 × moments (Adam: 10, against 12 with fp32 masters).
REMAINDER_BYTES = 2


def remainder_state_bytes(optimizer: str) -> int:
    return REMAINDER_BYTES + 4 * MOMENTS[optimizer]


def loss_buffer_bytes(stack: Stack, tokens: int, vocab_local: int, elt: int = 2, tp: int = 1) -> int:
    """Bytes the loss holds at its peak on the LM head's rank, beyond the saved activations.

    * ``loss="upcast"`` (torchtitan, train.py at 9dec370: ``cross_entropy(pred.flatten(0, 1).float(),
      labels)``, then ``del pred`` before ``loss.backward()``; the bundled runtime's ``runtime.job.loss_fn``
      is the same): the backward of the loss holds three fp32 [T, V/t] tensors at once — log_softmax's
      output (kept for backward), nll_loss's dense gradient (``zeros_like`` + scatter) and log_softmax's
      gradient; the forward holds less (bf16 logits + fp32 copy + log_softmax output = 10 bytes per logit
      against 12). Measured for the bundled runtime on an H200 (``bench/gpu/memory_phases.py``): the
      step's peak is in the first block's backward after the loss's, 11.7 GiB above the saved activations
      for 1.05 G logits (12 bytes each);
    * ``loss="fused"`` (flash-attn's Triton ``cross_entropy``, llm-foundry's default ``fused_crossentropy``:
      llmfoundry/models/mpt/modeling_mpt.py at 4952183): the loss reads the 16-bit logits, keeps them and one fp32
      log-sum-exp per row, and its backward writes a 16-bit gradient: 2 × ``elt`` bytes per logit;
    * ``loss="loss_parallel"`` (torchtitan: "upcast" run under ``loss_parallel()`` whenever tp > 1, 9dec370
      ``parallelisms/parallel_dims.py`` ``loss_parallel_enabled``, ``train.py`` ``train_context``; the LM head's
      ``ColwiseParallel(output_layouts=Shard(-1))``, ``parallelize_llama.py:138-142``): DTensor's handlers replace
      aten's fused kernels (torch 2.6.0 ``distributed/tensor/parallel/loss.py``, the same at 2.13.0): the backward
      ``_nll_loss_and_log_softmax_backward`` (:364-411) holds the saved log-softmax output x, ``grad_input =
      zeros_like(x)``, and the two temporaries of ``(grad_input + torch.exp(x)) * grad_output`` at once: four fp32
      [T, V/t] tensors, 16 bytes per logit (its forward ``_log_softmax``, :127-151, holds the bf16 logits, the fp32
      copy, ``shifted`` and ``exp(shifted)`` or the result: 14). With tp = 1: "upcast";
    * other stacks: the fp32 logits of the loss (one [T, V/t] fp32 tensor)."""
    kind = "upcast" if stack.loss == "loss_parallel" and tp == 1 else stack.loss
    per_logit = {"upcast": 12, "loss_parallel": 16, "fused": 2 * elt}.get(kind, 4)
    return tokens * vocab_local * per_logit


def zero3_buffer_bytes(stack: Stack, block_params: int, elt: int) -> int:
    """Bytes ZeRO-3 / FSDP holds beyond the shards, for one transformer block of ``block_params``:

    * ``reduce_dtype="fp32"`` (FSDP2 as torchtitan runs it, ``reduce_dtype=torch.float32``): the block
      being computed and the next one prefetched (FSDP2 always prefetches the next all-gather: torchtitan
      docs/fsdp.md), unsharded in the training precision, plus one block's unsharded gradient in the
      training precision and its fp32 copy, the reduce-scatter input: p·(3e + 4). At the loss, the
      "current" block is the last one, which torchtitan does not reshard after forward
      (``reshard_after_forward = int(layer_id) < len(model.layers) - 1``, parallelize_llama.py);
    * otherwise two gathered blocks, weights and gradients: 4·p·e."""
    if stack.reduce_dtype == "fp32":
        return block_params * (3 * elt + 4)
    return 2 * block_params * 2 * elt


def main_grad_bytes(stack: Stack, grad_elt: int) -> int:
    """Bytes per parameter of the stack's Megatron ``main_grad`` buffer (``state_bytes(main_grads)``): the dtype it
    reduces in (``grad_elt``) where its ``grad_add`` hooks add into one, else 0."""
    return grad_elt if stack.grad_add != "autograd" else 0


class StateBytes(NamedTuple):
    """Bytes per parameter on one GPU, by kind, under a ZeRO stage."""

    weights: float
    gradients: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer


def fsdp2_mixed_precision(layout: str, precision: str) -> bool:
    """Whether the states are FSDP2's under its mixed-precision policy (``state_bytes``): there ZeRO-1 and
    ZeRO-2 are one wrapper with one layout (``space.zero_stages``)."""
    return layout == "fsdp2" and precision != "fp32"


@lru_cache(maxsize=256)
def state_bytes(
    precision: str,
    optimizer: str,
    zero_stage: int,
    dp: int,
    layout: str = "master",
    whole_grads: int = 0,
    main_grads: int = 0,
    optimizer_dtype: str = "fp32",
) -> StateBytes:
    """Bytes per parameter of weights, gradients and optimizer states on one GPU, sharded by dp per ZeRO
    stage, as the stack holds them (``Stack.param_layout``):

    * ``"master"`` (and any fp32 training): weights and gradients in the training precision, optimizer
      states per ``OPTIMIZER_STATE_BYTES`` (mixed precision = any precision but fp32 keeps fp32 master
      weights there);
    * ``"fsdp2"`` with mixed precision (FSDP2's ``MixedPrecisionPolicy(param_dtype=bf16,
      reduce_dtype=fp32)``, as the bundled runtime applies it): the fp32 parameters are the master weights
      (4 bytes, sharded from ZeRO-1 on: ``fully_shard``), their bf16 copy stays unsharded from forward to
      backward below ZeRO-3 (2 bytes; ZeRO-3 reshards after forward: ``zero3_buffer_bytes``), fp32 gradients
      (4 bytes; whole below ZeRO-3, where the runtime accumulates the micro-batches' before one reduction:
      ``runtime.job.defer_gradient_sync``; sharded at ZeRO-3), the optimizer's moments only (``OPTIMIZER_STATE_BYTES`` of fp32 training). Measured for ZeRO-0 on an H200: 18 bytes
      per parameter (docs/validation.md "On a GPU").

    ``whole_grads``: bytes per parameter of ZeRO-2/3 gradients accumulated unsharded across the step's micro-batches
    before one reduction (``workload.accumulation.DpSchedule.whole_grads``, e.g. FSDP2 under a pipeline schedule, in
    its fp32 reduce dtype: ``accumulated_grad_bytes``); 0 where the stage's gradients stay sharded.

    ``main_grads``: bytes per parameter of a Megatron DDP ``main_grad`` buffer (a stack whose ``grad_add`` hooks add
    into it, cost model 51): the contiguous gradient buffer every parameter's gradient lives in, in the dtype the
    stack reduces in (``collectives.grad_bytes``) — fp32 under bf16, which forces ``accumulate_allreduce_grads_in_fp32``
    (Megatron-LM core_v0.16.1 ``megatron/training/arguments.py:711-724``, ``training.py:1295``
    ``grad_reduce_in_fp32``, ``megatron/core/distributed/distributed_data_parallel.py:147`` ``grad_dtype =
    torch.float if grad_reduce_in_fp32``; v2.5 ``arguments.py:139-155``) — and never sharded: the distributed
    optimizer reduce-scatters into the same whole buffer (``docs/user-guide/features/dist_optimizer.md``: bf16
    parameters, fp32 gradients 18 bytes, distributed 6 + 12/d). 0: gradients in the training precision.

    ``optimizer_dtype``: ``Stack.optimizer_dtype``; "param" under mixed precision prices K by
    ``param_dtype_state_bytes`` (16-bit moments, no master weights), "remainders" under bf16 by
    ``remainder_state_bytes`` (fp32 moments, 16-bit remainders instead of fp32 master weights)."""
    d = dp
    if fsdp2_mixed_precision(layout, precision):
        k = OPTIMIZER_STATE_BYTES[(optimizer, False)]
        if zero_stage == 0:
            return StateBytes(4 + 2, 4, k)
        if zero_stage < 3:  # the gradients accumulate whole until the step's reduce-scatter (runtime.job)
            return StateBytes(4 / d + 2, 4, k / d)
        return StateBytes(4 / d, whole_grads or 4 / d, k / d)
    e = BYTES_PER_ELEMENT[precision]
    k = OPTIMIZER_STATE_BYTES[(optimizer, precision != "fp32")]
    if optimizer_dtype == "param" and precision != "fp32":
        k = param_dtype_state_bytes(optimizer, e)
    elif optimizer_dtype == "remainders" and precision in ("bf16", "fp8") and zero_stage >= 1:
        k = remainder_state_bytes(optimizer)  # apex DistributedFusedAdam (ZeRO-1 on nemo-2407; ZeRO-0: fused_adam)
    g = main_grads if main_grads and zero_stage <= 1 else e
    out = StateBytes(*{0: (e, g, k), 1: (e, g, k / d), 2: (e, e / d, k / d), 3: (e / d, e / d, k / d)}[zero_stage])
    return out._replace(gradients=whole_grads) if whole_grads and zero_stage >= 2 else out


def stack_states(stack: Stack, training: TrainingSpec, zero_stage: int, dp: int, whole: int, main: int) -> StateBytes:
    """``state_bytes`` of a request's training under its stack (layout and optimizer dtype the stack's)."""
    p, opt = training.precision, training.optimizer
    return state_bytes(p, opt, zero_stage, dp, stack.param_layout, whole, main, stack.optimizer_dtype)


class MemoryTerms(NamedTuple, Generic[Count]):
    """Tensor bytes of one pipeline rank: ``states − pending[i] + activations[i] + buffers`` at its i-th peak."""

    states: Count
    activations: list[Count]  # per activation peak of the rank's schedule
    buffers: int
    #: per peak, the gradients of ``states`` not yet allocated there (``pending_grads``)
    pending: list[Count | int]


def peaks(t: MemoryTerms[Count]) -> list[Count]:
    """The rank's tensor bytes at each activation peak."""
    return [t.states - g + a + t.buffers for a, g in zip(t.activations, t.pending)]


def pending_grads(
    s: SharedTerms, c: Candidate, n: Sequence[Count], r: int, done: tuple[int, ...] | None, k: Sequence[Count] | None
) -> Count | int:
    """The gradients of rank r's chunks whose first backward has not run at a peak (``done``: the chunks whose has,
    ``grad_peaks.live_and_done``; None: every chunk's, the gradients held throughout): ``SharedTerms.grads`` of each
    such chunk, the embedding's with chunk 0, the LM head's with the last (``rank_states``' own split)."""
    if done is None or s.grads == NOTHING:
        return 0
    last = c.chunks - 1
    left = [ch for ch in range(r, c.chunks, c.pp) if ch not in done]
    if not left:
        return 0
    return total(
        [s.grads.at(n[ch], ch == 0, ch == last and s.own_head(c), k[ch] if k is not None else 0) for ch in left]
    )


def chunk_moe(s: SharedTerms, n: Sequence[Count], k: Sequence[Count] | None) -> Sequence[Count] | None:
    """The MoE layers of each chunk of the cut ``n`` of a model of two block kinds (``k`` when given: the cut
    solver's variables; else counted on the layer sequence, ``affine.moe_counts``); None for one kind."""
    if k is not None or s.moe_prefix is None:
        return k
    return moe_counts(s.moe_prefix, n)  # type: ignore[arg-type,return-value]  # ints: a cut being evaluated


def rank_states(s: SharedTerms, c: Candidate, n: Sequence[Count], r: int, k: Sequence[Count] | None = None) -> Count:
    """Model states of rank r of class ``c`` at the cut ``n``: rank r holds chunks r, r + pp, …, the
    embedding on rank 0 and the LM head (unless tied to it) on rank pp − 1; ``k``: each chunk's MoE layers
    (``chunk_moe``)."""
    k = chunk_moe(s, n, k)
    moe = total(k[r :: c.pp]) if k is not None else 0
    return s.states.at(total(n[r :: c.pp]), r == 0, r == c.pp - 1 and s.own_head(c), moe)


def rank_buffers(s: SharedTerms, c: Candidate, r: int) -> int:
    """Buffers that do not scale with the cut: one rematerialised layer, two ZeRO-3-gathered layers,
    p2p send/recv, and the larger of the loss's tensors on the LM head's rank (pp − 1) and torch's ring-attention
    buffers (``cp_tmp``, ``workload.context_parallel.torch_ring_buffer_bytes``): those live inside one attention
    call of a block, the loss's from the loss's forward through the LM head's backward (torchtitan 9dec370 train.py
    computes the loss, ``del pred``, then ``loss.backward()``), so the two are never held at once."""
    loss = s.logits_fp32 if r == c.pp - 1 else 0
    return s.recompute_tmp + s.z3_tmp + (2 * s.p2p_bytes if c.pp > 1 else 0) + max(loss, s.cp_tmp)


def rank_activations(
    s: SharedTerms,
    c: Candidate,
    n: Sequence[Count],
    peak: tuple[tuple[int, int], ...],
    k: Sequence[Count] | None = None,
) -> Count:
    """Saved activations at one activation peak, (chunk, copies alive) pairs: the embedding's with
    chunk 0, the LM head's with the last chunk; ``k``: each chunk's MoE layers (``chunk_moe``)."""
    last = c.chunks - 1
    k = chunk_moe(s, n, k)
    if k is None:
        return total([x * s.acts.at(n[ch], ch == 0, ch == last) for ch, x in peak])
    return total([x * s.acts.at(n[ch], ch == 0, ch == last, k[ch]) for ch, x in peak])


def memory_terms(
    s: SharedTerms,
    c: Candidate,
    n: Sequence[Count],
    r: int,
    live: tuple[tuple[tuple[int, int], ...], ...],
    k: Sequence[Count] | None = None,
    done: tuple[tuple[int, ...], ...] | None = None,
    kept: int = 0,
) -> MemoryTerms[Count]:
    """Rank r of class ``c`` at the cut ``n``; ``live``: the rank's activation peaks
    (``cost.live_vectors_cached``); ``k``: each chunk's MoE layers (``chunk_moe``); ``done``: per peak, the chunks
    whose gradients exist there (``ClassCosts.done``; None: all, at every peak); ``kept``: the rank's
    ``ClassCosts.kept`` (``kept_bytes``), in its buffers."""
    k = chunk_moe(s, n, k)
    return MemoryTerms(
        rank_states(s, c, n, r, k),
        [rank_activations(s, c, n, vec, k) for vec in live],
        rank_buffers(s, c, r) + kept,
        [0 for _ in live] if done is None else [pending_grads(s, c, n, r, d, k) for d in done],
    )


def rank_memory(cc: ClassCosts, n: Sequence[int], r: int, k: Sequence[int] | None = None) -> int:
    """Peak tensor bytes of rank r (what must fit in ``usable_bytes``)."""
    s, c = cc.shared, cc.cand  # = max(peaks(memory_terms(...))), without building the terms
    k = chunk_moe(s, n, k)
    # ``rank_activations`` of each peak from one copy of each of the rank's chunks (priced once, not per peak)
    last, acts = c.chunks - 1, s.acts
    one = {ch: acts.at(n[ch], ch == 0, ch == last, k[ch] if k is not None else 0) for ch in range(r, c.chunks, c.pp)}
    if cc.done is None:
        top = max([sum([x * one[ch] for ch, x in vec]) for vec in cc.live[r]])
    else:
        pend: dict[tuple[int, ...], int] = {}  # ``pending_grads`` by the chunks done
        for d in cc.done[r]:
            if d not in pend:
                pend[d] = pending_grads(s, c, n, r, d, k)
        at = zip(cc.live[r], cc.done[r])
        top = max([sum([x * one[ch] for ch, x in vec]) - pend[d] for vec, d in at])
    return rank_states(s, c, n, r, k) + top + rank_buffers(s, c, r) + kept_bytes(cc, r)


def kept_bytes(cc: ClassCosts, r: int) -> int:
    """What the pipeline runtime keeps of every micro-batch on rank r (``compose.pp_kept``; 0 where it keeps none)."""
    return cc.kept[r] if cc.kept else 0


def reported_peak(cc: ClassCosts, n: Sequence[int], r: int) -> tuple[MemoryTerms[int], int, tuple[int, ...] | None]:
    """Rank r's memory terms, the index of the peak ``stage_memory`` reports (the first of the highest) and the
    chunks whose gradients exist there (None: all of them)."""
    done = None if cc.done is None else cc.done[r]
    t = memory_terms(cc.shared, cc.cand, n, r, cc.live[r], done=done, kept=kept_bytes(cc, r))
    at = peaks(t)
    i = at.index(max(at))
    return t, i, None if cc.done is None else cc.done[r][i]


def stage_memory(cc: ClassCosts, n: list[int], r: int) -> StageMemory:
    t, i, _ = reported_peak(cc, n, r)  # the peak reported: its activations, the gradients held there
    tensors = peaks(t)[i]
    per = cc.shared.state_bytes  # the states split in the ratio of their bytes per parameter
    s = per.total
    return StageMemory(
        weights_gib=t.states * per.weights / s / GIB if s else 0.0,
        gradients_gib=(t.states * per.gradients / s - t.pending[i]) / GIB if s else 0.0,
        optimizer_gib=t.states * per.optimizer / s / GIB if s else 0.0,
        activations_gib=t.activations[i] / GIB,
        buffers_gib=t.buffers / GIB,
        reserve_gib=reserve_bytes(tensors) / GIB,
        total_gib=with_reserve_gib(tensors),
    )
