"""``/v1/plans``: solve and store plans; read, list and delete them; their schedule trace; two side by side."""

from __future__ import annotations

from typing import Annotated

from fastapi import Body, Path, Query, Response
from starlette.concurrency import run_in_threadpool

from api.deps import MetricsDep, PoolDep, SettingsDep, SolverDep, StoreDep, v1_router
from api.problems import ProblemException, error_responses, not_found
from api.schemas import PLAN_REQUEST_EXAMPLES, Page, PlanSummary, ProblemError, StoredPlan
from api.solver import bound_request, timed
from api.store import Store, request_key
from planner.compare import PlanComparison, compare_plans
from planner.specs import Plan, PlanRequest

router = v1_router("/plans", "plans")

PlanId = Annotated[
    str, Path(max_length=64, description="Plan id: the content hash of its request and cost-model version.")
]
Index = Annotated[int, Query(ge=0, le=19, description="Which plan of the response (0 = best).")]


async def resolve_profile(request: PlanRequest, store: Store) -> PlanRequest:
    """A request naming a stored profile gets that profile inlined (the solver sees plain data)."""
    if request.profile_id is None:
        return request
    if request.profile is not None:
        raise ProblemException(
            422,
            "give either profile or profile_id, not both",
            errors=[
                ProblemError(field="profile_id", message="both profile and profile_id are set", fix="drop one of them"),
            ],
        )
    stored = await run_in_threadpool(store.get_profile, request.profile_id)
    if stored is None:
        raise ProblemException(
            422,
            f"profile_id: no stored profile with id {request.profile_id!r}",
            errors=[
                ProblemError(
                    field="profile_id",
                    message=f"no stored profile with id {request.profile_id!r}",
                    fix="upload it with POST /v1/profiles and use the id it returns",
                ),
            ],
        )
    return request.model_copy(update={"profile": stored.profile, "profile_id": None})


@router.post(
    "",
    response_model=StoredPlan,
    status_code=201,
    responses={
        200: {"model": StoredPlan, "description": "The same request was solved before: answered from the store."},
        **error_responses(400, 401, 413, 422, 503),
    },
)
async def create_plan(
    body: Annotated[PlanRequest, Body(openapi_examples=PLAN_REQUEST_EXAMPLES)],
    response: Response,
    settings: SettingsDep,
    store: StoreDep,
    solver: SolverDep,
    pool: PoolDep,
    metrics: MetricsDep,
) -> StoredPlan:
    """Plan a training job. The id is the content hash of the request (with defaults filled in and
    the solver time capped by the server) and of the planner's cost-model version: the same request is
    answered from the store, not re-solved, until the cost model changes; then it is solved again
    (the older answer stays readable under its id, marked ``stale``)."""
    request = bound_request(body, settings)
    key = request_key(request)
    stored = await run_in_threadpool(store.get_plan, key)
    if stored is None:
        solve_request = await resolve_profile(request, store)

        def solve_and_store() -> StoredPlan:
            done = store.get_plan(key)  # solved by another request since we looked
            if done is not None:
                return done
            result = timed(metrics, "plan", lambda: solver.plan(solve_request))()
            plan, _created = store.put_plan(key, request, result)  # committed before we answer
            return plan

        stored, joined = await pool.run_once(key, solve_and_store)
        if joined:
            stored = stored.model_copy(update={"cached": True})
    if stored.cached:
        metrics.plan_cache.labels("hit").inc()
        response.status_code = 200
    else:
        metrics.plan_cache.labels("miss").inc()
    return stored


@router.get("", response_model=Page[PlanSummary], responses=error_responses(401, 422))
async def list_plans(
    store: StoreDep,
    model: Annotated[str | None, Query(max_length=128, description="Only plans of this model name.")] = None,
    gpu: Annotated[str | None, Query(max_length=64, description="Only plans on this GPU id.")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> Page[PlanSummary]:
    """Stored plans, newest first."""
    return await run_in_threadpool(lambda: store.list_plans(model=model, gpu=gpu, limit=limit, offset=offset))


async def _get(store: Store, plan_id: str) -> StoredPlan:
    stored = await run_in_threadpool(store.get_plan, plan_id)
    if stored is None:
        raise not_found("plan", plan_id)
    return stored


def _pick(stored: StoredPlan, index: int, field: str = "query.index") -> Plan:
    plans = stored.response.plans
    if not plans:
        reason = stored.response.infeasible.reason if stored.response.infeasible else "the solver found no plan"
        raise ProblemException(404, f"plan {stored.id} holds no feasible plan ({reason})")
    if index >= len(plans):
        raise ProblemException(
            404,
            f"plan {stored.id} has {len(plans)} plans; index {index} is out of range",
            errors=[
                ProblemError(
                    field=field, message=f"must be below {len(plans)}", fix=f"use an index from 0 to {len(plans) - 1}"
                ),
            ],
        )
    return plans[index]


@router.get("/{plan_id}", response_model=StoredPlan, responses=error_responses(401, 404, 422))
async def get_plan(plan_id: PlanId, store: StoreDep) -> StoredPlan:
    return await _get(store, plan_id)


@router.delete("/{plan_id}", status_code=204, response_class=Response, responses=error_responses(401, 404, 422))
async def delete_plan(plan_id: PlanId, store: StoreDep) -> Response:
    if not await run_in_threadpool(store.delete_plan, plan_id):
        raise not_found("plan", plan_id)
    return Response(status_code=204)


@router.get(
    "/{plan_id}/trace",
    responses={
        200: {"description": "Chrome/Perfetto trace JSON of the simulated schedule."},
        **error_responses(401, 404, 422),
    },
)
async def get_trace(plan_id: PlanId, store: StoreDep, solver: SolverDep, index: Index = 0) -> dict:
    """The simulated pipeline schedule of plan ``index`` as Chrome trace JSON (open in Perfetto)."""
    plan = _pick(await _get(store, plan_id), index)
    return await run_in_threadpool(solver.trace, plan)


@router.get("/{plan_id}/compare/{other_id}", response_model=PlanComparison, responses=error_responses(401, 404, 422))
async def compare(
    plan_id: PlanId,
    other_id: Annotated[str, Path(max_length=64, description="The stored plan to compare with.")],
    store: StoreDep,
    index: Index = 0,
    other_index: Annotated[int, Query(ge=0, le=19, description="Which plan of the other response (0 = best).")] = 0,
) -> PlanComparison:
    """Plan ``index`` of ``plan_id`` beside plan ``other_index`` of ``other_id``: settings, step time by
    cause and memory per pipeline stage, with B − A and B ÷ A (``planner.compare``)."""
    a = _pick(await _get(store, plan_id), index)
    b = _pick(await _get(store, other_id), other_index, "query.other_index")
    return compare_plans(a, b, f"{plan_id}#{index}", f"{other_id}#{other_index}")
