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
(``PipelineStage.backward_maybe_with_nosync``, ``perform_reduce_grad``; torch 2.13.0 ``pipelining/stage.py:844-847``,
``:1164-1190``; the 2024 form ``set_requires_gradient_sync(last_backward)`` the same): one reduction per step, ZeRO-1/2
parameters gathered once and kept, and the gradients of a sharded-gradient stage (ZeRO-2 and ZeRO-3) accumulated
unsharded until the last backward — the memory a deferred ZeRO-2/3 reduction costs (``DpSchedule.whole_grads``), in
FSDP2's reduce dtype (``accumulated_grad_bytes``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner.specs.common import GradAccumulation, GradAdd


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
    #: gradients accumulated unsharded across the micro-batches of a sharded-gradient stage (ZeRO-3 reduced once;
    #: ZeRO-2 too under a pipeline schedule)
    whole_grads: bool = False

    def whole_grad_bytes(self, mode: GradAccumulation, elt: int, reduce_elt: int) -> int:
        """Bytes per parameter of the gradients held whole (``accumulated_grad_bytes``); 0 where they are not."""
        return accumulated_grad_bytes(mode, elt, reduce_elt) if self.whole_grads else 0


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
    piped = pipelined and mode in ("fsdp2", "fsdp2_deferred")
    fwd, bwd, each = (_PIPELINED if piped else _PLAIN[mode])[zero_stage]
    # ZeRO-2 too under a pipeline: FSDP2's post_backward skips the reduce-scatter and keeps the unsharded gradient
    # whatever the resharding (torch 2.13.0 _fsdp_param_group.py:607-612); the stage defers it even at m = 1
    return DpSchedule(fwd, bwd, each, whole_grads=not each and (zero_stage == 3 or (piped and zero_stage == 2)))


def accumulated_grad_bytes(mode: GradAccumulation, elt: int, reduce_elt: int) -> int:
    """Bytes per parameter of the unsharded gradient an engine of ``mode`` accumulates across the micro-batches while
    its reduction is deferred (``DpSchedule.whole_grads``), with ``elt``-byte gradients reduced in ``reduce_elt``.

    * FSDP2 (``"fsdp2"``, ``"fsdp2_deferred"``): in the reduce dtype. With gradient sync off, ``FSDPParamGroup.
      post_backward`` calls ``to_accumulated_grad_if_needed`` on every parameter, which replaces the unsharded
      16-bit ``.grad`` by ``unsharded_accumulated_grad = grad.to(reduce_dtype)``; the next micro-batches add into it
      (``accumulate_unsharded_grad_if_needed``: ``unsharded_accumulated_grad += grad``) until the backward that
      reduce-scatters it (torch 2.13.0 ``distributed/fsdp/_fully_shard/_fsdp_param_group.py:606-611, 620-625``,
      ``_fsdp_param.py:802-819``): 4 bytes under ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=float32)``;
    * other engines (FSDP1 under ``no_sync``): in the unsharded parameter's dtype, ``elt``."""
    return reduce_elt if mode in FSDP2_ENGINES else elt


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
    mode: GradAccumulation, gathered: int, gather_elt: int, params: int, grad_elt: int, reduce_elt: int, dp: int = 2
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
    copy-in (of the 1/dp shard, on its own stream) and the reduce-scatter's view-out (1/dp) are left out: sharded.
    FSDP1 (``fsdp1_reduce_bytes``, ``dp`` for its pre-divide) gathers into its flat parameter (no copy-out) but passes
    over its gradient."""
    if mode in FSDP1_ENGINES:
        return CopyBytes(copy_out=0, reduce_copy_in=fsdp1_reduce_bytes(params, grad_elt, reduce_elt, dp))
    if mode not in FSDP2_ENGINES:
        return CopyBytes(0, 0)
    return CopyBytes(copy_out=2 * gathered * gather_elt, reduce_copy_in=params * (grad_elt + reduce_elt))


#: Engines that run FSDP1's ``FullyShardedDataParallel`` (flat parameters): their gradient passes (``fsdp1_reduce_bytes``).
FSDP1_ENGINES: tuple[GradAccumulation, ...] = ("fsdp1", "fsdp1_no_sync")
#: Every FSDP engine: copies or gradient passes around its collectives on the compute stream (``compose.terms``).
FSDP_ENGINES = FSDP2_ENGINES + FSDP1_ENGINES


def predivide_factor(dp: int) -> int:
    """FSDP1's gradient pre-division factor for ``dp`` ranks: torch ``DefaultState._get_gradient_predivide_factor``
    (``distributed/algorithms/_comm_hooks/default_hooks.py``: double while dp divides and dp / factor > factor)."""
    factor = 1
    while dp % factor == 0 and dp / factor > factor:
        factor *= 2
    return factor


def fsdp1_reduce_bytes(params: int, grad_elt: int, reduce_elt: int, dp: int) -> int:
    """HBM bytes (read + written) of FSDP1's passes over one unit's unsharded gradient of ``params`` elements in each
    backward that reduces it (docs/planner.md, "FSDP1's gradient passes"; torch 2.13.0 as installed, the same calls in
    the 2.0/2.1 FSDP1 that Composer 0.16-0.17 drove):

    * autograd's ``SplitWithSizesBackward`` — the module parameters are ``torch.split`` views of the flat parameter
      (``_flat_param.py:1901,1925`` ``_get_unflat_views_*``; in forward ``_use_unsharded_views(as_params=False)``,
      ``_flat_param.py:1521``), so their gradients reach it through ``split_with_sizes_backward``, an ``at::cat`` into
      a new flat gradient on the compute stream: read and write ``grad_elt`` per element;
    * ``_post_backward_hook`` (``_runtime_utils.py:764``): ``flat_param.grad.to(handle._reduce_dtype)`` where the
      reduce dtype differs (MixedPrecision ``param_dtype=bf16, reduce_dtype=fp32``, Composer's "DEFAULT"): read
      ``grad_elt``, write ``reduce_elt``;
    * ``_reduce_grad`` (``_runtime_utils.py:852``): ``_div_if_needed(padded_unsharded_grad, predivide)`` — an in-place
      ``div_`` of the whole unsharded gradient in the reduce dtype before the reduce-scatter, whenever the pre-divide
      factor (``predivide_factor``) exceeds 1, i.e. for every dp >= 2: read and write ``reduce_elt``.

    No ``F.pad`` copy: with ``use_orig_params`` (Composer's default) the flat parameter is padded to a multiple of the
    world size "to avoid a copy for the post-backward reduce-scatter" (``_flat_param.py:760-762``). The cast and the
    division run on FSDP1's post-backward stream, between the next layer's backward kernels on the same SMs, so they are
    priced on the compute timeline like FSDP2's copy-in."""
    cat = 2 * grad_elt
    cast = grad_elt + reduce_elt if reduce_elt != grad_elt else 0
    div = 2 * reduce_elt if predivide_factor(dp) > 1 else 0
    return params * (cat + cast + div)


@dataclass(frozen=True, slots=True)
class AddBytes:
    """HBM bytes per local parameter that a stack moves on the compute stream to add one micro-batch's weight
    gradients into the step's gradient (``add_bytes``): ``each`` in every micro-batch's backward, ``first`` in the
    first one's instead (autograd keeps the first gradient as it is), ``step`` once per step (zeroing the buffer)."""

    each: float
    first: float
    step: float
    #: main-grad bytes the linears' weight-gradient GEMMs read and write as C (beta = 1; 0: not fused)
    fused_c: int = 0


NO_ADD = AddBytes(0.0, 0.0, 0.0)


def add_bytes(
    grad_add: GradAdd,
    mode: GradAccumulation,
    zero_stage: int,
    sched: DpSchedule,
    precision: str,
    elt: int,
    main: int,
    dp: int,
) -> AddBytes:
    """The gradient-accumulation pass of a stack (``Stack.grad_add``, engine ``mode``) per local parameter, with
    ``elt``-byte parameters and gradients and ``main``-byte main gradients (the DP reduction's dtype:
    ``collectives.grad_bytes``). Sources (docs/planner.md, "Gradient accumulation pass"):

    * ``"autograd"``: torch's ``AccumulateGrad`` keeps the first micro-batch's gradient and adds the next ones in
      place (``variable_grad += new_grad`` under no grad mode: read 2·elt, write elt) — Megatron-LM v2.0 (no main
      grads: ``megatron/model/distributed.py`` all-reduces ``param.grad``), DeepSpeed ZeRO-0/1 (v0.5.0
      ``zero/stage2.py:439``: no gradient hooks without ``partition_gradients`` or ``overlap_comm``, which
      ``engine.py:999-1014`` forces off at stage 1 and under a pipeline), FSDP1 under ``no_sync``;
    * ``"main_grad_if_bf16"`` (Megatron-LM v2.5): with ``accumulate_allreduce_grads_in_fp32`` (forced by ``--bf16``,
      ``megatron/arguments.py:139-155``) every parameter's backward hook runs ``param.main_grad.add_(param.grad.data)``
      and frees ``.grad`` (``megatron/model/distributed.py:168-177``): read elt + main, write main in every
      micro-batch; the buffer zeroed each step (``zero_grad_buffer``); fp16 without the flag: ``"autograd"``;
    * ``"main_grad_fused"`` (Megatron-LM 52e636888c, Megatron-core 0.16.1): the same hook for every parameter
      (``model/distributed.py:174-184``; core ``distributed_data_parallel.py:437-441``) but the linears' weights,
      whose weight-gradient GEMM accumulates into ``main_grad`` (``--no-gradient-accumulation-fusion`` off by
      default: 52e636888c ``arguments.py:634``, ``core/tensor_parallel/layers.py:299-306``
      ``wgrad_gemm_accum_fp32``; core_v0.16.1 ``arguments.py:2083``, TE ``fuse_wgrad_accumulation``): ``fused_c``;
    * DeepSpeed bf16 at ZeRO-0 (``BF16_Optimizer``: gradients accumulated in fp32 by default,
      ``engine.py get_data_types``): ``update_hp_grads`` after every micro-batch's backward adds each bf16 ``.grad``
      into its fp32 buffer (``bf16_optimizer.py:340`` ``hp_grad.data.add_(lp.grad.data.to(hp_grad.dtype))``;
      ``pipe/engine.py:867``), as ``"main_grad_if_bf16"``;
    * gradients reduced in every micro-batch (ZeRO-2/3, FSDP without ``no_sync``): the 1/dp shard accumulated in place
      from the second micro-batch (FSDP2 ``foreach_reduce``: ``sharded_param.grad += new_sharded_grad`` in the fp32
      sharded parameter's dtype; DeepSpeed v0.5.0 ``zero/stage2.py:648`` partition ``accumulated_grad.add_``, 16-bit);
    * FSDP2 with gradient sync off (``"fsdp2_deferred"``, under a pipeline schedule): ``to_accumulated_grad_if_needed``
      copies the first unsharded gradient into the reduce dtype (read elt, write 4) and
      ``accumulate_unsharded_grad_if_needed`` adds the next ones (``unsharded_accumulated_grad += grad``: read elt
      + 4, write 4) (torch ``distributed/fsdp/_fully_shard/_fsdp_param.py``); autograd where the dtypes agree."""
    if sched.reduce_each:
        sharded = (4 if mode in ("fsdp1", "fsdp2") else elt) / dp
        return AddBytes(3 * sharded, 0.0, 0.0)
    autograd = AddBytes(3.0 * elt, 0.0, 0.0)
    if mode in ("fsdp2", "fsdp2_deferred"):  # sync deferred (the runtime, a pipeline schedule)
        return AddBytes(elt + 8.0, elt + 4.0, 0.0) if main == 4 and elt != 4 else autograd
    if mode == "deepspeed" and zero_stage == 0 and precision == "bf16":
        return AddBytes(elt + 8.0, elt + 8.0, 4.0)
    if mode != "megatron" or grad_add == "autograd" or (grad_add == "main_grad_if_bf16" and precision != "bf16"):
        return autograd
    hook = AddBytes(elt + 2.0 * main, elt + 2.0 * main, float(main))
    return replace(hook, fused_c=main) if grad_add == "main_grad_fused" else hook
