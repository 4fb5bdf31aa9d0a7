"""A priced configuration as the user reads it: the ``Estimate`` (step time, throughput, MFU, the time
breakdown on the busiest rank, memory per stage, notes) and the ``Plan`` around it."""

from __future__ import annotations

from planner.answer.residual_notes import calibration_note
from planner.compose.context import Context
from planner.compose.cost import Candidate, ClassCosts, Evaluation, rank_end_terms
from planner.compose.memory import stage_memory
from planner.compose.step_end import exposed_sync
from planner.specs import CostInputs, Estimate, ParallelConfig, Plan, PlanRequest, TimeBreakdown, version
from planner.specs.config import CLASS_FIELDS
from planner.specs.layout import mesh_layout, tp_plan


def model_flops_per_step(ctx: Context) -> float:
    from planner.workload.analytic import model_flops_per_step as mfps

    tokens = ctx.training.global_batch_size * ctx.training.seq_len
    return float(mfps(ctx.model, tokens, ctx.training.seq_len))


def build_estimate(ctx: Context, cc: ClassCosts, n: list[int], ev: Evaluation) -> Estimate:
    c = cc.cand
    step = ev.objective_ns / 1e9
    tokens = ctx.training.global_batch_size * ctx.training.seq_len
    flops = model_flops_per_step(ctx)
    per_gpu = flops / step / ctx.num_gpus if step > 0 else 0.0
    # Breakdown on the busiest rank: its compute and TP comm, the rest of the makespan is bubble + p2p.
    # ZeRO-3's per-layer gathers/reduce-scatters beyond the layer's compute are data-parallel communication
    # (``dp_sync_s``), not compute; compute that runs under them is not slowed down in this model.
    k = cc.moe_counts(n) or [0] * len(n)  # each chunk's MoE layers (a model of dense and MoE blocks)

    def part(own: list[int], layer: int, moe: int, extras: list[int] | None = None) -> int:
        """m × Σ over the chunks ``own`` of n·layer + k·moe + extras (ns)."""
        return cc.m * sum(n[ch] * layer + k[ch] * moe + (extras[ch] if extras else 0) for ch in own)

    busy, tp_time, z3_time, pp_time, cp_time, ep_time = [], [], [], [], [], []
    for r in range(c.pp):
        own = cc.rank_chunks(r)
        extra = [f + b for f, b in zip(cc.f_extra, cc.b_extra)]
        busy.append(part(own, cc.f_layer + cc.b_layer, cc.f_moe + cc.b_moe, extra))
        extra_tp = [f + b for f, b in zip(cc.f_extra_tp, cc.b_extra_tp)]
        tp_time.append(part(own, cc.f_layer_tp + cc.b_layer_tp, cc.f_moe_tp + cc.b_moe_tp, extra_tp))
        extra_z3 = [f + b for f, b in zip(cc.f_extra_z3, cc.b_extra_z3)]
        z3_time.append(part(own, cc.f_layer_z3 + cc.b_layer_z3, cc.f_moe_z3 + cc.b_moe_z3, extra_z3))
        pp_time.append(cc.m * sum(cc.f_extra_pp[ch] + cc.b_extra_pp[ch] for ch in own))  # blocking sends
        cp_time.append(part(own, cc.f_layer_cp + cc.b_layer_cp, cc.f_moe_cp + cc.b_moe_cp))
        ep_time.append(part(own, cc.f_layer_ep + cc.b_layer_ep, cc.f_moe_ep + cc.b_moe_ep))
    r = max(range(c.pp), key=lambda i: busy[i])
    p2p = min(sum(cc.lag[b] for b in ev.sim.critical_lags), max(0, ev.makespan_ns - busy[r]))
    bubble = max(0, ev.makespan_ns - busy[r] - p2p)
    p2p += pp_time[r]
    end = rank_end_terms(cc, n, ev.end_rank)
    dp_sync, opt = exposed_sync(end) + z3_time[r], end.optimizer
    ns = 1e-9
    breakdown = TimeBreakdown(
        compute_s=(busy[r] - tp_time[r] - z3_time[r] - pp_time[r] - cp_time[r] - ep_time[r]) * ns,
        tp_comm_s=tp_time[r] * ns,
        pp_bubble_s=bubble * ns,
        pp_p2p_s=p2p * ns,
        dp_sync_s=dp_sync * ns,
        optimizer_s=opt * ns,
        cp_comm_s=cp_time[r] * ns,
        ep_comm_s=ep_time[r] * ns,
    )
    stages = [stage_memory(cc, n, i) for i in range(c.pp)]
    notes = []
    gap = ctx.gap_note(c.micro_batch_size, c.tp, c.sequence_parallel)
    if gap is not None:
        notes.append(gap)
    if ctx.calibration is not None:
        notes.append(calibration_note(ctx.calibration))
    if cc.m < c.pp and c.pp > 1:
        notes.append(f"fewer micro-batches ({cc.m}) than pipeline stages ({c.pp}): large bubble")
    usable_gib = (1.0 - ctx.memory_headroom) * ctx.gpu.memory_gib
    if not ev.fits:
        room = (
            f" ({ctx.memory_headroom:.0%} of {ctx.gpu.memory_gib:g} GiB kept free: options.memory_headroom)"
            if ctx.memory_headroom
            else ""
        )
        notes.append(
            f"does not fit: rank {max(range(c.pp), key=lambda i: ev.memory_bytes[i])} needs "
            f"{max(s.total_gib for s in stages):.1f} GiB of {usable_gib:.4g} GiB{room}"
        )
    return Estimate(
        step_time_s=step,
        tokens_per_s=tokens / step if step > 0 else 0.0,
        model_tflops_per_gpu=per_gpu / 1e12,
        mfu=per_gpu / ctx.peak,
        memory_per_stage=stages,
        peak_memory_gib=max(s.total_gib for s in stages),
        gpu_memory_gib=ctx.gpu.memory_gib,
        fits=ev.fits,
        num_microbatches=cc.m,
        gpus_used=c.tp * c.cp * c.pp * c.dp,
        breakdown=breakdown,
        notes=notes,
        memory_headroom=ctx.memory_headroom,
        usable_memory_gib=usable_gib,
    )


def parallel_config(cand: Candidate, n: list[int]) -> ParallelConfig:
    return ParallelConfig.model_validate({**{k: getattr(cand, k) for k in CLASS_FIELDS}, "stage_layers": list(n)})


def make_plan(ctx: Context, request: PlanRequest, cc: ClassCosts, n: list[int], ev: Evaluation, rank: int = 1) -> Plan:
    """The Plan of one evaluated configuration: the full model and GPU specs, the mesh shape, the TP
    plan, the estimate, and the cost inputs and cost-model version that produced it."""
    parallel = parallel_config(cc.cand, n)
    inputs = CostInputs(
        cost_model_version=version.COST_MODEL_VERSION,
        profile=ctx.profile,
        network=ctx.network,
        calibration=ctx.calibration,
    )
    return Plan(
        rank=rank,
        model=ctx.model,
        cluster=request.cluster.model_copy(update={"gpu": ctx.gpu}),
        training=request.training,
        parallel=parallel,
        mesh=mesh_layout(parallel),
        tp_plan=tp_plan(ctx.model, parallel),
        estimate=build_estimate(ctx, cc, n, ev),
        inputs=inputs,
    )
