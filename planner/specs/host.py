"""What a CPU run measures of its host beyond rates: its framework dispatch by class (``HostDispatch``)."""

from __future__ import annotations

from pydantic import Field

from planner.specs.common import Spec


class HostDispatch(Spec):
    """Host-side framework dispatch of a CPU "GPU" (a ``GpuSpec`` whose id starts with ``cpu``), µs, by
    dispatch class, measured on the host by ``meshplan run`` (``runtime.host_dispatch``). The cost model
    adds them where a plan issues that class of work (``planner.pricing.host.host_dispatch``); absent (None)
    on a GPU and on a host spec without the measurement."""

    op_fwd_us: float = Field(ge=0, le=1e5, description="A plain op with autograd, forward (recording).")
    op_bwd_us: float = Field(ge=0, le=1e5, description="The backward of one plain forward op.")
    tp_linear_fwd_us: float = Field(ge=0, le=1e6, description="A TP (DTensor) linear beyond a plain one, forward.")
    tp_linear_bwd_us: float = Field(ge=0, le=1e6, description="The same, backward.")
    fsdp_module_fwd_us: float = Field(ge=0, le=1e6, description="An FSDP2-wrapped module's hooks, forward.")
    fsdp_module_bwd_us: float = Field(ge=0, le=1e6, description="The same, backward.")
    fsdp_param_fwd_us: float | None = Field(
        default=None,
        ge=0,
        le=1e6,
        description="Per parameter tensor an FSDP2-wrapped module holds, forward (its unsharded view set up); "
        "with it, ``fsdp_module_*_us`` is the module's own part (no parameters). None: not measured (older runs, "
        "whose ``fsdp_module_*_us`` were measured on modules of two tensors).",
    )
    fsdp_param_bwd_us: float | None = Field(
        default=None,
        ge=0,
        le=1e6,
        description="The same, backward (its gradient copied into the reduction buffer and back out as a DTensor).",
    )
    clip_plain_us: float | None = Field(
        default=None, ge=0, le=1e6, description="Gradient-norm clipping per plain gradient tensor (None: not measured)."
    )
    clip_dtensor_us: float | None = Field(
        default=None, ge=0, le=1e6, description="Gradient-norm clipping per DTensor gradient (None: not measured)."
    )
    adam_plain_us: float = Field(ge=0, le=1e6, description="AdamW step per plain parameter tensor.")
    adam_dtensor_us: float = Field(ge=0, le=1e6, description="AdamW step per DTensor parameter tensor.")
    tp_collective_us: float | None = Field(
        default=None,
        ge=0,
        le=1e6,
        description="A blocking all-reduce between compute (as TP runs it), measured by the run's own ranks, beyond "
        "the same all-reduce back to back (None when the run had one process).",
    )
    tp_all_reduce_us: float | None = Field(
        default=None,
        ge=0,
        le=1e6,
        description="One TP all-reduce as the runtime's DTensor linears issue it (a functional collective, "
        "``_c10d_functional.all_reduce``, and its wait), between compute, whole: its dispatch, the wait for the "
        "other ranks and the transfer of ``tp_collective_bytes``; measured by the run's own ranks on its TP mesh, "
        "under its load (``runtime.host_dispatch.tp_functional_us``). With it every TP collective of a host is "
        "priced from these figures, not by the network fit × ``comm_scale`` (+ ``tp_collective_us``). None: "
        "not measured (a run without TP, older runs).",
    )
    tp_all_gather_us: float | None = Field(
        default=None,
        ge=0,
        le=1e6,
        description="The same for one sequence-parallel all-gather or reduce-scatter of the activation (the mean "
        "of the pair). None: as ``tp_all_reduce_us``.",
    )
    tp_collective_bytes: float | None = Field(
        default=None,
        gt=0,
        le=1e12,
        description="The activation size the TP collectives were measured at (bytes, unsharded); other sizes "
        "are priced from it with the network fit's per-byte slope.",
    )
    dp_all_reduce_us: float | None = Field(
        default=None,
        ge=0,
        le=1e6,
        description="One data-parallel all-reduce as the runtime's FSDP2 wrappers issue it (``replicate``: one "
        "blocking c10d collective per wrapped module), between compute, whole: its dispatch, the wait for the other "
        "ranks and the transfer of ``dp_collective_bytes``; measured by the run's own ranks on its DP mesh, under "
        "its load (``runtime.host_dispatch.dp_collectives_us``: wrapped modules of the plan's block size against the "
        "same on a one-rank mesh, so the hooks in ``fsdp_*_us`` are not counted twice). With it every DP all-reduce "
        "of a host is priced from it, not by the network fit × ``comm_scale``. None: not measured (no such "
        "collective in the run, older runs).",
    )
    dp_all_gather_us: float | None = Field(
        default=None, ge=0, le=1e6, description="The same for one ``fully_shard`` parameter all-gather."
    )
    dp_reduce_scatter_us: float | None = Field(
        default=None, ge=0, le=1e6, description="The same for one ``fully_shard`` gradient reduce-scatter."
    )
    dp_collective_bytes: float | None = Field(
        default=None,
        gt=0,
        le=1e12,
        description="The module size the DP collectives were measured at (bytes); other sizes are priced from it "
        "with the network fit's per-byte slope.",
    )
    p2p_us: float | None = Field(
        default=None,
        ge=0,
        le=1e6,
        description="One pipeline send/recv between adjacent stages (c10d point-to-point on the pipeline group), "
        "between compute, whole, at ``p2p_bytes``; measured by the run's own ranks on its pipeline mesh "
        "(``runtime.host_dispatch.p2p_us``). With it a host's pipeline lags are priced from it, not by the network "
        "fit × ``comm_scale``. None: not measured.",
    )
    p2p_bytes: float | None = Field(
        default=None, gt=0, le=1e12, description="The activation size ``p2p_us`` was measured at (bytes)."
    )
    pp_action_us: float | None = Field(
        default=None,
        ge=0,
        le=1e6,
        description="One pipeline-schedule action (a micro-batch's forward or backward on a chunk) beyond the "
        "chunk's own compute, the rank's CPU time: the schedule's bookkeeping, its send/recv posted and completed, "
        "the loss and gradient scaling, and the compute's slowdown interleaved with them; measured by the run's "
        "own ranks running its schedule over one block per chunk against the same calls made directly "
        "(``runtime.host_dispatch.pp_action_us``). The cost model adds it to every chunk's forward and backward "
        "of a pipelined plan. None: not measured (no pipeline in the run, older runs).",
    )
    cpu_share: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="The fraction of a core each rank computed on when the run had more single-thread ranks "
        "than the host has cores (cores ÷ processes; the figures above are then as each rank saw them). The "
        "host work the cost model adds beyond the measurements (the ``kernel_overhead_us`` and "
        "``step_overhead_s`` residuals, fitted per rank alone) takes 1/cpu_share as long. None: a core per rank.",
    )
