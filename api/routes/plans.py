"""``/v1/plans``: solve and store plans; read, list and delete them; their schedule trace; two side by side."""

from __future__ import annotations

import email.message
import json
from collections import OrderedDict
from typing import Annotated

from fastapi import HTTPException, Path, Query, Request, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from api.deps import SolverDep, StoreDep, get_metrics, get_pool, get_settings, get_solver, get_store, resolve, v1_router
from api.metrics import Metrics
from api.problems import ProblemException, _field_of, error_responses, not_found
from api.routes.calibrations import resolve_calibration
from api.schemas import PLAN_REQUEST_EXAMPLES, Page, PlanSummary, ProblemError, StoredPlan
from api.settings import Settings
from api.solver import Solver, SolverPool, bound_request, timed
from api.store import Store, request_key
from planner.answer.compare import PlanComparison, compare_plans
from planner.specs import Plan, PlanRequest, version
from planner.specs.errors import (
    explain_error,
    field_info,
    is_union_tag,
    located,
    merge_union_errors,
    with_known_fields,
)

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
    stored = await store.call(store.get_profile, request.profile_id)
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


class PlanKeys:
    """Raw request bodies already seen (with their content type) → their plan id: at most ``size``
    of them, bodies up to ``max_body`` bytes, ``max_bytes`` of bodies in all (least recently used
    go first). A repeated request is a dict lookup away from its key, without parsing or validating
    it again. Sound because the key is a function of the body, of the server's settings (fixed for
    an app) and of the cost-model version (part of the lookup); only bodies that validated are kept."""

    def __init__(self, size: int = 4096, max_body: int = 65536, max_bytes: int = 16 << 20) -> None:
        self.size = size
        self.max_body = max_body
        self.max_bytes = max_bytes
        self._bytes = 0
        self._keys: OrderedDict[tuple[int, str | None, bytes], str] = OrderedDict()

    def get(self, ctype: str | None, raw: bytes) -> str | None:
        seen = (version.COST_MODEL_VERSION, ctype, raw)
        key = self._keys.get(seen)
        if key is not None:
            self._keys.move_to_end(seen)
        return key

    def put(self, ctype: str | None, raw: bytes, key: str) -> None:
        seen = (version.COST_MODEL_VERSION, ctype, raw)
        if len(raw) > self.max_body or seen in self._keys:
            return
        self._keys[seen] = key
        self._bytes += len(raw)
        while len(self._keys) > self.size or self._bytes > self.max_bytes:
            (_v, _c, old), _k = self._keys.popitem(last=False)
            self._bytes -= len(old)


def _body_problem(errors: list[dict]) -> ProblemException:
    """The answer ``api.problems`` gives to these errors of a body declared as ``PlanRequest``: the
    same fields, messages and fixes (drawn from the declared fields) as FastAPI's own validation."""
    out = []
    for e in merge_union_errors(errors):
        loc = located(e)
        path = [p for p in loc[1:] if not is_union_tag(p)]
        if e.get("type") == "extra_forbidden":
            e = with_known_fields(e, PlanRequest, path)
        field = _field_of(loc)
        message, fix = explain_error(e, field, field_info(PlanRequest, path) if path else None)
        out.append(ProblemError(field=field, message=message, fix=fix))
    detail = "; ".join(f"{e.field}: {e.message}" for e in out[:5]) or "invalid request"
    return ProblemException(422, detail, errors=out, title="Invalid request")


def parse_plan_request(raw: bytes, content_type: str | None) -> PlanRequest:
    """The body as FastAPI reads a JSON body parameter (strict content type: JSON only when the
    request says so), with the same answers to bad bodies, but wherever this runs (off the loop)."""
    obj: object = None
    if raw:
        obj = raw
        if content_type:
            message = email.message.Message()
            message["content-type"] = content_type
            subtype = message.get_content_subtype()
            if message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json")):
                try:
                    obj = json.loads(raw)
                except json.JSONDecodeError as e:
                    error = {"type": "json_invalid", "loc": ("body", e.pos), "msg": "JSON decode error", "input": {}}
                    raise _body_problem([{**error, "ctx": {"error": e.msg}}]) from None
                except Exception as e:  # not UTF-8: what FastAPI answers
                    raise HTTPException(status_code=400, detail="There was an error parsing the body") from e
    if obj is None:
        raise _body_problem([{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
    try:
        return PlanRequest.model_validate(obj, from_attributes=True)
    except ValidationError as exc:
        raise _body_problem([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from None


def _json(body: bytes, status_code: int) -> Response:
    return Response(body, status_code=status_code, media_type="application/json")


@router.post(
    "",
    response_model=StoredPlan,
    status_code=201,
    responses={
        200: {"model": StoredPlan, "description": "The same request was solved before: answered from the store."},
        **error_responses(400, 401, 413, 422, 503),
    },
    # The body is read by the route (below), not by FastAPI: documented here as before.
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {"$ref": "#/components/schemas/PlanRequest"},
                    "examples": PLAN_REQUEST_EXAMPLES,
                }
            },
        }
    },
)
async def create_plan(http: Request) -> Response:
    """Plan a training job. The id is the content hash of the request (with defaults filled in and
    the solver time capped by the server) and of the planner's cost-model version: the same request is
    answered from the store, not re-solved, until the cost model changes; then it is solved again
    (the older answer stays readable under its id, marked ``stale``)."""
    # The body is a PlanRequest (documented as one above); it is read here, not by FastAPI, so that
    # its parsing, validation and key run off the event loop, and a body seen before skips them. The
    # dependencies are looked up, not solved by FastAPI per request (the hot path's largest cost).
    settings: Settings = await resolve(http, get_settings)
    store: Store = await resolve(http, get_store)
    raw = await http.body()
    ctype = http.headers.get("content-type")
    keys: PlanKeys = http.app.state.plan_keys
    key = keys.get(ctype, raw)
    body = await store.call(store.get_plan_body, key) if key is not None else None
    request: PlanRequest | None = None
    if body is None:

        def parse_and_look_up() -> tuple[PlanRequest, str, bytes | None]:
            req = bound_request(parse_plan_request(raw, ctype), settings)
            k = request_key(req)
            return req, k, store.get_plan_body(k)

        request, key, body = await store.call(parse_and_look_up)
        keys.put(ctype, raw, key)
    metrics: Metrics = await resolve(http, get_metrics)
    if body is None:
        assert request is not None and key is not None
        solver: Solver = await resolve(http, get_solver)
        pool: SolverPool = await resolve(http, get_pool)
        solve_request = await resolve_calibration(await resolve_profile(request, store), store)
        plan_id, stored_request = key, request

        def solve_and_store() -> tuple[bytes, bool]:
            done = store.get_plan_body(plan_id)  # solved by another request since we looked
            if done is not None:
                return done, False
            result = timed(metrics, "plan", lambda: solver.plan(solve_request))()
            return store.put_plan_body(plan_id, stored_request, result)  # committed before we answer

        (body, created), joined = await pool.run_once(key, solve_and_store)
        if created and not joined:
            metrics.plan_cache.labels("miss").inc()
            return _json(body, 201)
        if created:  # another request's solve: answered from it, as from the store
            body = body.replace(b'"cached":false', b'"cached":true', 1)  # the head's flag comes first
    metrics.plan_cache.labels("hit").inc()
    return _json(body, 200)


@router.get("", response_model=Page[PlanSummary], responses=error_responses(401, 422))
async def list_plans(
    store: StoreDep,
    model: Annotated[str | None, Query(max_length=128, description="Only plans of this model name.")] = None,
    gpu: Annotated[str | None, Query(max_length=64, description="Only plans on this GPU id.")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> Page[PlanSummary]:
    """Stored plans, newest first."""
    return await store.call(lambda: store.list_plans(model=model, gpu=gpu, limit=limit, offset=offset))


async def _get(store: Store, plan_id: str) -> StoredPlan:
    stored = await store.call(store.get_plan, plan_id)
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
async def get_plan(plan_id: PlanId, http: Request) -> Response:
    """The stored plan: its stored JSON document, looked up by id and sent as stored."""
    store: Store = await resolve(http, get_store)
    body = await store.call(store.get_plan_body, plan_id)
    if body is None:
        raise not_found("plan", plan_id)
    return _json(body, 200)


@router.delete("/{plan_id}", status_code=204, response_class=Response, responses=error_responses(401, 404, 422))
async def delete_plan(plan_id: PlanId, store: StoreDep) -> Response:
    if not await store.call(store.delete_plan, plan_id):
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
    cause and memory per pipeline stage, with B − A and B ÷ A (``planner.answer.compare``)."""
    a = _pick(await _get(store, plan_id), index)
    b = _pick(await _get(store, other_id), other_index, "query.other_index")
    return compare_plans(a, b, f"{plan_id}#{index}", f"{other_id}#{other_index}")
