"""``POST /v1/estimates``: the cost of one given configuration (the request's pins)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Body
from starlette.concurrency import run_in_threadpool

from api.deps import MetricsDep, SettingsDep, SolverDep, StoreDep, v1_router
from api.problems import error_responses
from api.routes.calibrations import resolve_calibration
from api.routes.plans import resolve_profile
from api.schemas import ESTIMATE_EXAMPLES
from api.solver import bound_request, timed
from planner.specs import Plan, PlanRequest

router = v1_router("/estimates", "estimates")


@router.post("", response_model=Plan, responses=error_responses(400, 401, 413, 422))
async def estimate(
    body: Annotated[PlanRequest, Body(openapi_examples=ESTIMATE_EXAMPLES)],
    settings: SettingsDep,
    store: StoreDep,
    solver: SolverDep,
    metrics: MetricsDep,
) -> Plan:
    """Complete the pinned configuration with the planner's documented defaults and estimate it
    (no search: fast, and not stored)."""
    request = await resolve_calibration(await resolve_profile(bound_request(body, settings), store), store)
    return await run_in_threadpool(timed(metrics, "estimate", lambda: solver.estimate_plan(request)))
