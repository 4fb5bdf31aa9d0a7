"""When a stack's data-parallel collectives run across the micro-batches of one step (issue 27 §2): per micro-batch
or once per step, as each stack's training loop and data-parallel engine issue them (``Stack.grad_accumulation``).

With m micro-batches per step (gradient accumulation, or a pipeline schedule's micro-batches), a sharded data-parallel
engine either reduces every micro-batch's gradients in that micro-batch's backward, or accumulates them and reduces
once after the last; and it either keeps a ZeRO-1/2 unit's gathered parameters across micro-batches or frees them
after each backward and gathers them again in the next forward. What each engine does (sources at their versions;
docs/planner.md, "Gradient accumulation"):

* ``"megatron"`` — Megatron-LM / Megatron-core DDP and distributed optimizer: the gradient sync runs once, after the
  last micro-batch (``no_sync_func`` around the others, ``megatron/core/pipeline_parallel/schedules.py``); the
  distributed optimizer's parameter all-gather once, after the optimizer step.
* ``"deepspeed"`` — DeepSpeed: ZeRO-0/1 reduce at the gradient-accumulation boundary only; ZeRO-2 and ZeRO-3 reduce in
  every micro-batch's backward (``engine.py no_sync`` asserts it "is incompatible with gradient partitioning");
  ZeRO-3 gathers every fetch, forward and backward, of every micro-batch.
* ``"fsdp1"`` — PyTorch FSDP (FullyShardedDataParallel) in a loop that does not wrap the non-final micro-batches in
  ``no_sync()`` (Composer: ``ddp_sync_context`` applies ``no_sync`` only to a ``DistributedDataParallel`` model):
  every micro-batch reduce-scatters (NO_SHARD: all-reduces) its gradients, and with ``_sync_gradients`` True
  ``_should_free_in_backward`` frees the unsharded parameters after each backward even for SHARD_GRAD_OP, so
  every forward all-gathers again; FULL_SHARD also before every backward.
* ``"fsdp1_no_sync"`` — the same FSDP1 in a loop that wraps every micro-batch but the last in ``no_sync()`` (a loop of
  your own; "FSDP will accumulate the full model gradients (instead of gradient shards) until the eventual sync",
  ``FullyShardedDataParallel.no_sync``): one reduction per step; SHARD_GRAD_OP keeps its parameters unsharded across
  the micro-batches (``_should_free_in_backward`` is False), FULL_SHARD still gathers twice per micro-batch and holds
  the unsharded gradients (``_post_backward_hook`` returns before the reduce-scatter, ``.grad`` whole).
* ``"fsdp2"`` — FSDP2 (``fully_shard``, ``replicate``) in a loop that keeps gradient sync on (torchtitan v0.1.0 –
  v0.2.2 ``train.py``: ``for microbatch in range(gradient_accumulation_steps)`` with no
  ``set_requires_gradient_sync``): as ``"fsdp1"`` (``reshard_after_backward`` defaults True).
* ``"fsdp2_deferred"`` — FSDP2 with ``set_requires_gradient_sync(False)`` on all but the last micro-batch below
  ZeRO-3 (the bundled runtime, ``runtime.job.defer_gradient_sync``): one reduction per step, but the parameters are
  still resharded after each backward (``reshard_after_backward`` True), so ZeRO-1/2 gather in every forward.

Under a ``torch.distributed.pipelining`` schedule (pp > 1 on ``"fsdp2"`` and ``"fsdp2_deferred"``) the stage sets
``set_requires_gradient_sync(False)`` and ``set_reshard_after_backward(False)`` on every backward but the last
(``PipelineStage.backward_maybe_with_nosync``, ``perform_reduce_grad``): one reduction per step, ZeRO-1/2 parameters
gathered once and kept, and ZeRO-3 gradients accumulated unsharded (in the reduce dtype) until the last backward — the
memory a deferred ZeRO-3 reduction costs (``DpSchedule.whole_grads``).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.specs.stacks import GradAccumulation


@dataclass(frozen=True, slots=True)
class DpSchedule:
    """When a ZeRO stage's data-parallel collectives run: per micro-batch (True) or once per step (False)."""

    #: parameters all-gathered before every micro-batch's forward (else: ZeRO-1/2 once per step, after the optimizer
    #: step; none at ZeRO-0)
    gather_fwd: bool
    #: and again before every micro-batch's backward (ZeRO-3 resharded after forward)
    gather_bwd: bool
    #: gradients reduced in every micro-batch's backward (else once, after the last micro-batch)
    reduce_each: bool
    #: gradients accumulated unsharded across the micro-batches of a sharded-gradient stage (ZeRO-3 reduced once)
    whole_grads: bool = False


#: Per engine, ZeRO stage: (gather_fwd, gather_bwd, reduce_each) without a pipeline schedule (module docstring).
_PLAIN: dict[GradAccumulation, dict[int, tuple[bool, bool, bool]]] = {
    "megatron": {0: (False, False, False), 1: (False, False, False), 2: (False, False, False), 3: (True, True, True)},
    "deepspeed": {0: (False, False, False), 1: (False, False, False), 2: (False, False, True), 3: (True, True, True)},
    "fsdp1": {0: (False, False, True), 1: (True, False, True), 2: (True, False, True), 3: (True, True, True)},
    "fsdp1_no_sync": {
        0: (False, False, False),
        1: (False, False, False),
        2: (False, False, False),
        3: (True, True, False),
    },
    "fsdp2": {0: (False, False, True), 1: (True, False, True), 2: (True, False, True), 3: (True, True, True)},
    "fsdp2_deferred": {
        0: (False, False, False),
        1: (True, False, False),
        2: (True, False, False),
        3: (True, True, True),
    },
}
#: FSDP2 under ``torch.distributed.pipelining``: gradient sync and resharding after backward off until the last.
_PIPELINED: dict[int, tuple[bool, bool, bool]] = {
    0: (False, False, False),
    1: (False, False, False),
    2: (False, False, False),
    3: (True, True, False),
}


def dp_schedule(mode: GradAccumulation, zero_stage: int, pipelined: bool) -> DpSchedule:
    """When the DP collectives of ``zero_stage`` run on an engine of ``mode`` (``pipelined``: pp × virtual stages > 1)."""
    table = _PIPELINED if pipelined and mode in ("fsdp2", "fsdp2_deferred") else _PLAIN[mode]
    fwd, bwd, each = table[zero_stage]
    return DpSchedule(fwd, bwd, each, whole_grads=zero_stage == 3 and not each)


@dataclass(frozen=True, slots=True)
class DpCounts:
    """Collectives per step of one data-parallel unit (an FSDP-wrapped module, a gradient bucket)."""

    all_gather: int
    reduce: int  #: gradient reductions: all-reduce at ZeRO-0, reduce-scatter above


def dp_counts(mode: GradAccumulation, zero_stage: int, pipelined: bool, micro_batches: int) -> DpCounts:
    """How many all-gathers and gradient reductions one unit issues in a step of ``micro_batches`` (dp > 1)."""
    s = dp_schedule(mode, zero_stage, pipelined)
    m = micro_batches
    once = 1 if zero_stage in (1, 2) else 0  # the updated parameters of a ZeRO-1/2 unit, gathered once
    gathers = (m if s.gather_fwd else once) + (m if s.gather_bwd else 0)
    return DpCounts(gathers, m if s.reduce_each else 1)


#: Engines that run FSDP2's ``fully_shard`` (``Stack.grad_accumulation``): their collectives copy on the compute stream.
FSDP2_ENGINES: tuple[GradAccumulation, ...] = ("fsdp2", "fsdp2_deferred")


@dataclass(frozen=True, slots=True)
class CopyBytes:
    """HBM bytes FSDP2 moves on the compute stream around one unit's collectives (read + written)."""

    #: after each all-gather: ``split_with_sizes_copy`` of the whole gathered buffer into the unsharded parameters
    copy_out: int
    #: before each reduce-scatter: ``torch.cat`` of the unsharded gradients into the reduce-dtype input (the compute
    #: stream waits for it: ``current_stream.wait_event(copy_in_event)``)
    reduce_copy_in: int


def fsdp2_copy_bytes(
    mode: GradAccumulation, gathered: int, gather_elt: int, params: int, grad_elt: int, reduce_elt: int
) -> CopyBytes:
    """The bytes FSDP2 copies on the compute stream for one unit of ``params`` parameters (``gathered`` of them as
    16-bit-equivalent elements of ``gather_elt`` bytes on the all-gather's wire; gradients of ``grad_elt`` bytes
    reduced in ``reduce_elt``), per all-gather and per reduce-scatter; zero on other engines. Source: PyTorch FSDP2
    ``_fsdp_collectives.py`` (pytorch/pytorch 01d66d21, 2024-04; the same calls in 8fc2039dec):
    ``foreach_all_gather_copy_out`` runs ``torch.split_with_sizes_copy(all_gather_output, ..., out=...)`` on the
    current (compute) stream after waiting for the gather — every gathered byte read once and written once;
    ``foreach_reduce_scatter`` builds its input with ``foreach_reduce_scatter_copy_in`` (``torch.cat`` of the
    gradients' ``view(world_size, -1)`` into the ``reduce_dtype`` buffer) and the compute stream waits on its event
    before freeing the gradients — the gradients read in their dtype and written in the reduce dtype (torch 2.13.0's
    ``foreach_reduce`` runs that copy on the compute stream itself). The gather's
    copy-in (of the 1/dp shard, on its own stream) and the reduce-scatter's view-out (1/dp) are left out: sharded."""
    if mode not in FSDP2_ENGINES:
        return CopyBytes(0, 0)
    return CopyBytes(copy_out=2 * gathered * gather_elt, reduce_copy_in=params * (grad_elt + reduce_elt))
