"""``/healthz`` (the process answers), ``/readyz`` (the store answers), ``/metrics`` (Prometheus).
Open without a token, so load balancers and scrapers need no secret."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from api.deps import MetricsDep, StoreDep
from api.problems import error_responses
from api.schemas import Health

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    return Health(status="ok")


@router.get(
    "/readyz", response_model=Health, responses={503: {"model": Health, "description": "The store does not answer."}}
)
async def readyz(store: StoreDep) -> Response:
    try:
        await run_in_threadpool(store.ping)
    except Exception as exc:  # any driver error means not ready; say which
        return JSONResponse(
            Health(status="unavailable", detail=f"store: {type(exc).__name__}").model_dump(), status_code=503
        )
    return JSONResponse(Health(status="ok").model_dump())


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}, **error_responses()})
async def metrics(m: MetricsDep) -> Response:
    body, content_type = m.exposition()
    return Response(body, media_type=content_type)
