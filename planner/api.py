"""``planner.plan``, ``planner.estimate``, ``planner.estimate_plan``: requests in, plans out."""

from __future__ import annotations

import time
from typing import cast

from planner import rules, version
from planner.catalog import get_gpu, get_model
from planner.config import CLASS_FIELDS, SCHEDULE_INFO, describe, estimate_defaults
from planner.cost import Candidate, ClassCosts, Context, Evaluation, class_costs, evaluate, rank_end_terms
from planner.errors import MeshplanError
from planner.explain import explain
from planner.layout import even_stage_layers, mesh_layout, tp_plan
from planner.memory import stage_memory
from planner.residuals import calibration_note, check_calibration
from planner.search import SearchResult, search
from planner.space import explain_no_candidate, validate_pins
from planner.specs import (
    CostInputs,
    Estimate,
    Infeasibility,
    ParallelConfig,
    ParallelPins,
    Plan,
    PlanRequest,
    PlanResponse,
    SearchOptions,
    SolverInfo,
    SolverStatus,
    TimeBreakdown,
)
from planner.stacks import resolve as resolve_stack
from planner.terms import exposed_sync

#: Defaults of ``estimate`` for fields the request leaves out (``planner.config.FIELDS``; dp, virtual_stages
#: and stage_layers are derived, see ``complete_pins``).
ESTIMATE_DEFAULTS = estimate_defaults()


def _request(request: PlanRequest | dict) -> PlanRequest:
    if isinstance(request, PlanRequest):
        return request
    return PlanRequest.model_validate(request)


def context(request: PlanRequest) -> Context:
    if request.profile_id is not None and request.profile is None:
        raise MeshplanError(
            "profile_id", "a stored profile id is only resolved by the service", "pass the Profile itself as 'profile'"
        )
    model = get_model(request.model)
    gpu = get_gpu(request.cluster.gpu)
    rules.check(rules.seq_len_fits(model, request.training.seq_len))
    try:
        gpu.peak_flops(request.training.precision)
    except ValueError as exc:
        raise MeshplanError("training.precision", str(exc), "choose a precision the GPU supports") from None
    if request.profile is not None and request.profile.model.name != model.name:
        raise MeshplanError(
            "profile.model",
            f"the profile is of {request.profile.model.name!r}, not {model.name!r}",
            "profile the requested model",
        )
    if request.profile is not None:
        check_profile_device(request.profile.device, gpu.id)
    if request.calibration_id is not None and request.calibration is None:
        raise MeshplanError(
            "calibration_id",
            "a stored calibration id is only resolved by the service",
            "pass the Calibration itself as 'calibration' (`meshplan plan --calibration cal.json`), or send the "
            "request to the service (POST /v1/plans), which resolves the id",
        )
    if request.calibration is not None:
        check_calibration(request.calibration, gpu.id, resolve_stack(request.training.stack).id)
    return Context(
        model=model,
        gpu=gpu,
        cluster=request.cluster,
        training=request.training,
        profile=request.profile,
        network=request.network,
        memory_headroom=request.options.memory_headroom,
        calibration=request.calibration,
    )


#: Profile devices that measured no time (FLOPs and bytes only): they fit any GPU.
DEVICELESS = {"meta", "analytic"}


def check_profile_device(device: str, gpu_id: str) -> None:
    """A profile measured on one device prices layers with that device's times: it must be the cluster's
    GPU. ``device`` is what the profiler recorded (``torch.cuda.get_device_name()``, e.g. 'NVIDIA H100
    80GB HBM3', or 'cpu'); it matches ``gpu_id`` when the id's model ('h100' of 'h100-sxm5-80gb')
    appears in it and, where both state a memory size ('80GB', '80gb'), the sizes agree."""
    import re

    name = device.lower()
    if name in DEVICELESS or name == gpu_id.lower():  # the latter: a GPU spec named for the profiled device
        return
    model, *_ = gpu_id.lower().split("-")
    stated, listed = set(re.findall(r"(\d+)\s*gb", name)), set(re.findall(r"(\d+)\s*gb", gpu_id.lower()))
    same_model = model in re.split(r"[^a-z0-9]+", name) or model in name.replace(" ", "")
    if same_model and (not (stated and listed) or stated & listed):
        return
    raise MeshplanError(
        "profile.device",
        f"the profile was measured on {device!r}, but the cluster's GPU is {gpu_id!r}: its times are not this GPU's",
        f"measure the profile on the cluster's GPU ({gpu_id}: `meshplan profile model --device cuda` there), "
        "set cluster.gpu to the profiled device, or use a meta/analytic profile (`--device meta`), which "
        "has no times",
    )


# ---------------------------------------------------------------------------------------------
# Estimates


def model_flops_per_step(ctx: Context) -> float:
    from planner.analytic import model_flops_per_step as mfps

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
    busy, tp_time, z3_time = [], [], []
    for r in range(c.pp):
        own = cc.rank_chunks(r)
        busy.append(cc.m * sum(n[ch] * (cc.f_layer + cc.b_layer) + cc.f_extra[ch] + cc.b_extra[ch] for ch in own))
        tp_time.append(
            cc.m * sum(n[ch] * (cc.f_layer_tp + cc.b_layer_tp) + cc.f_extra_tp[ch] + cc.b_extra_tp[ch] for ch in own)
        )
        z3_time.append(
            cc.m * sum(n[ch] * (cc.f_layer_z3 + cc.b_layer_z3) + cc.f_extra_z3[ch] + cc.b_extra_z3[ch] for ch in own)
        )
    r = max(range(c.pp), key=lambda i: busy[i])
    p2p = min(sum(cc.lag[b] for b in ev.sim.critical_lags), max(0, ev.makespan_ns - busy[r]))
    bubble = max(0, ev.makespan_ns - busy[r] - p2p)
    end = rank_end_terms(cc, n, ev.end_rank)
    dp_sync, opt = exposed_sync(end) + z3_time[r], end.optimizer
    ns = 1e-9
    breakdown = TimeBreakdown(
        compute_s=(busy[r] - tp_time[r] - z3_time[r]) * ns,
        tp_comm_s=tp_time[r] * ns,
        pp_bubble_s=bubble * ns,
        pp_p2p_s=p2p * ns,
        dp_sync_s=dp_sync * ns,
        optimizer_s=opt * ns,
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
        gpus_used=c.tp * c.pp * c.dp,
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


def replay_request(plan: Plan) -> PlanRequest:
    """The request that re-estimates ``plan`` with the inputs that priced it: ``estimate_plan`` of it
    gives the plan's own estimate when ``plan.inputs.cost_model_version`` is the current one. TP
    across nodes is allowed (the plan's own layout is being priced, not searched)."""
    return PlanRequest(
        model=plan.model,
        cluster=plan.cluster,
        training=plan.training,
        parallel=ParallelPins(**plan.parallel.model_dump()),
        profile=plan.inputs.profile,
        network=plan.inputs.network,
        calibration=plan.inputs.calibration,
        options=SearchOptions(allow_tp_across_nodes=True, memory_headroom=plan.estimate.memory_headroom),
    )


def complete_pins(ctx: Context, request: PlanRequest) -> tuple[Candidate, list[int]]:
    """The configuration ``estimate`` evaluates: the pins plus ``ESTIMATE_DEFAULTS``; dp fills the
    cluster; stage_layers default to an even split (remainder to the middle chunks)."""
    pins = request.parallel
    validate_pins(ctx, pins, request.options)
    d = ESTIMATE_DEFAULTS
    schedule = pins.schedule or d["schedule"]
    v = pins.virtual_stages or SCHEDULE_INFO[schedule].fixed_virtual_stages or 2
    tp = pins.tp or d["tp"]
    if pins.pp is not None:
        pp = pins.pp
    elif pins.stage_layers is not None:
        pp = max(1, len(pins.stage_layers) // v)
    else:
        pp = d["pp"]
    n_gpus = ctx.num_gpus
    if pins.dp is not None:
        dp = pins.dp
    else:
        rules.check(rules.degrees_divide(tp, pp, None, n_gpus))
        dp = n_gpus // (tp * pp)
    rules.check(rules.degrees_product(tp, pp, dp, n_gpus))
    mbs = pins.micro_batch_size or d["micro_batch_size"]
    gbs = ctx.training.global_batch_size
    rules.check(rules.batch_divides(gbs, dp, mbs))
    m = gbs // (dp * mbs)
    rules.check(
        rules.schedule_priced(schedule),
        rules.virtual_stages_fit(schedule, v),
        rules.interleaving_needs_pipeline(pp, v),
        rules.interleaved_microbatches_priced(schedule, pp, m),
    )
    short = rules.one_f_one_b_microbatches(schedule, pp, m, gbs, dp)
    if short is not None:
        raise short if pins.micro_batch_size is not None else rules.with_field(short, "parallel.schedule")
    L = ctx.model.num_layers
    rules.check(rules.pp_fits_layers(pp, v, L))
    sp = bool((pins.sequence_parallel if pins.sequence_parallel is not None else d["sequence_parallel"]) and tp > 1)
    rules.check(rules.sequence_parallel_splits_seq(sp, tp, ctx.training.seq_len))
    cand = Candidate(
        tp,
        pp,
        dp,
        mbs,
        schedule,
        v,
        pins.recompute or d["recompute"],
        sp,
        pins.zero_stage if pins.zero_stage is not None else d["zero_stage"],
    )
    if pins.stage_layers is not None:
        rules.check(rules.stage_layers_count(pins.stage_layers, pp, v))
    n = list(pins.stage_layers) if pins.stage_layers is not None else even_stage_layers(L, pp * v)
    rules.check(rules.stage_layers_nonempty(n, ends_may_be_empty=False))
    return cand, n


def estimate_plan(request: PlanRequest | dict) -> Plan:
    req = _request(request)
    ctx = context(req)
    cand, n = complete_pins(ctx, req)
    cc = class_costs(ctx, cand)
    ev = evaluate(cc, n)
    return make_plan(ctx, req, cc, n, ev)


def estimate(request: PlanRequest | dict) -> Estimate:
    return estimate_plan(request).estimate


# ---------------------------------------------------------------------------------------------
# Planning


def plan(request: PlanRequest | dict) -> PlanResponse:
    t0 = time.perf_counter()
    req = _request(request)
    ctx = context(req)
    result: SearchResult = search(ctx, req.parallel, req.options, req.top_k)
    plans = []
    for i, res in enumerate(result.results):
        cc = class_costs(ctx, res.cand)
        assert res.stage_layers is not None and res.evaluation is not None  # every result the search returns is solved
        plans.append(make_plan(ctx, req, cc, res.stage_layers, res.evaluation, rank=i + 1))
    info = SolverInfo(
        status=cast(SolverStatus, result.status.value),
        objective_value=result.objective_ns / 1e9 if result.objective_ns is not None else None,
        best_objective_bound=result.bound_ns / 1e9 if result.bound_ns is not None else None,
        wall_time_s=time.perf_counter() - t0,
        configurations_considered=result.classes,
        notes=result.notes,
    )
    infeasible = None
    if not plans:
        infeasible = _infeasibility(ctx, req, result)
    else:
        plans = explain(ctx, plans, result, req)
    return PlanResponse(
        cost_model_version=version.COST_MODEL_VERSION,
        model=ctx.model,
        cluster=req.cluster,
        training=req.training,
        plans=plans,
        solver=info,
        infeasible=infeasible,
    )


def _infeasibility(ctx: Context, req: PlanRequest, result: SearchResult) -> Infeasibility:
    if result.classes == 0:
        field, reason, suggestion = explain_no_candidate(ctx, req.parallel)
        return Infeasibility(reason=reason, field=field, suggestion=suggestion)
    if result.min_memory is not None:
        cand, need = result.min_memory
        gib = need / (1.0 - ctx.memory_headroom)  # the GPU size it fits on with the requested headroom
        room = f" and {ctx.memory_headroom:.0%} headroom (options.memory_headroom)" if ctx.memory_headroom else ""
        per_node = ctx.cluster.gpus_per_node
        return Infeasibility(
            reason=f"no configuration fits in {ctx.gpu.memory_gib:g} GiB per GPU; the smallest footprint ({describe(cand)}) needs "
            f"{need:.1f} GiB, i.e. a {gib:.1f} GiB GPU{room}",
            field="cluster.gpu",
            suggestion=f"use GPUs with at least {gib:.1f} GiB, more nodes than {ctx.cluster.num_nodes} (× {per_node} GPUs), "
            "a smaller micro-batch or sequence length, or unpin parallel settings",
            min_memory_per_gpu_gib=gib,
        )
    return Infeasibility(
        reason="the solver found no feasible configuration in its time limit",
        field="options.time_limit_s",
        suggestion="raise options.time_limit_s",
    )
