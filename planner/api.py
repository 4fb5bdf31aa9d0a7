"""``planner.plan``, ``planner.estimate``, ``planner.estimate_plan``: requests in, plans out."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import cast

from planner.answer.estimate import make_plan
from planner.answer.explain import explain
from planner.answer.request import complete_pins, context, parse_request
from planner.compose.context import Context
from planner.compose.cost import class_costs, evaluate
from planner.search import SearchResult, search
from planner.search.cutsolver import ClassResult
from planner.search.space import explain_no_candidate
from planner.specs import (
    Estimate,
    Infeasibility,
    ParallelPins,
    Plan,
    PlanRequest,
    PlanResponse,
    SolverInfo,
    SolverStatus,
    UnprovenClass,
    version,
)
from planner.specs.config import CLASS_FIELDS, describe


def estimate_plan(request: PlanRequest | dict) -> Plan:
    req = parse_request(request)
    ctx = context(req)
    cand, n = complete_pins(ctx, req)
    cc = class_costs(ctx, cand)
    ev = evaluate(cc, n)
    return make_plan(ctx, req, cc, n, ev)


def estimate(request: PlanRequest | dict) -> Estimate:
    return estimate_plan(request).estimate


# ---------------------------------------------------------------------------------------------
# Planning


class _GcPause:
    """The depth of ``gc_paused`` across threads (the service plans concurrent requests in threads, and the collector
    is process-wide): the first to enter disables the collector, the last to leave re-enables it, and only if it ran
    when the first entered; the lock keeps the check and the change of depth one step."""

    lock = threading.Lock()
    depth = 0
    resume = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while planning, resumed after if it ran before: reference counting
    frees the millions of short-lived tuples the search makes, and the collector's passes over the live caches (tens
    of thousands of terms, classes and queue items) were ~20 % of the CPU of DeepSeek-V3 on 2,048 GPUs (~0.25 of
    ~1.3 s); the few cycles a plan leaves (~57,000 objects, ~1 MB there) are collected once it runs again. Nested and
    concurrent (threads) pauses share one pause (``_GcPause``): it ends when the last of them does."""
    with _GcPause.lock:
        if _GcPause.depth == 0:
            _GcPause.resume = gc.isenabled()
            gc.disable()
        _GcPause.depth += 1
    try:
        yield
    finally:
        with _GcPause.lock:
            _GcPause.depth -= 1
            if _GcPause.depth == 0 and _GcPause.resume:
                gc.enable()


def plan(request: PlanRequest | dict) -> PlanResponse:
    with gc_paused():
        return _plan(request)


def _plan(request: PlanRequest | dict) -> PlanResponse:
    t0 = time.perf_counter()
    req = parse_request(request)
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
        unproven=[_unproven(r) for r in result.unproven],
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


def _unproven(r: ClassResult) -> UnprovenClass:
    """A class the budget left unproven below the answer, with the pins that search it alone."""
    ev = r.evaluation if r.evaluation is not None and r.evaluation.fits else None
    return UnprovenClass(
        parallel=ParallelPins.model_validate({k: getattr(r.cand, k) for k in CLASS_FIELDS}),
        lower_bound_s=r.bound / 1e9,
        best_step_s=ev.objective_ns / 1e9 if ev is not None else None,
        best_stage_layers=list(r.stage_layers) if ev is not None and r.stage_layers is not None else None,
    )


def _infeasibility(ctx: Context, req: PlanRequest, result: SearchResult) -> Infeasibility:
    if result.classes == 0:
        field, reason, suggestion = explain_no_candidate(ctx, req.parallel, req.options.allow_tp_across_nodes)
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
