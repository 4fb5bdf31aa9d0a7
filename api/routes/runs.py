"""``/v1/runs``: run reports from ``meshplan run`` (measured next to predicted)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query
from starlette.concurrency import run_in_threadpool

from api.deps import StoreDep, v1_router
from api.problems import error_responses, not_found
from api.schemas import Page, RunSummary, StoredRun
from planner.specs import RunReport

router = v1_router("/runs", "runs")


@router.post("", response_model=StoredRun, status_code=201, responses=error_responses(400, 401, 413, 422))
async def create_run(body: RunReport, store: StoreDep) -> StoredRun:
    return await run_in_threadpool(store.put_run, body)


@router.get("", response_model=Page[RunSummary], responses=error_responses(401, 422))
async def list_runs(
    store: StoreDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> Page[RunSummary]:
    return await run_in_threadpool(lambda: store.list_runs(limit=limit, offset=offset))


@router.get("/{run_id}", response_model=StoredRun, responses=error_responses(401, 404, 422))
async def get_run(run_id: str, store: StoreDep) -> StoredRun:
    stored = await run_in_threadpool(store.get_run, run_id)
    if stored is None:
        raise not_found("run", run_id)
    return stored
