"""Dependencies of the routes as ``Annotated`` aliases. Tests replace any of them with
``app.dependency_overrides[get_solver] = lambda: SlowSolver()`` (and the same for settings, store).

They are ``async def`` on purpose: FastAPI runs a plain ``def`` dependency in a worker thread, and
a thread hop per dependency per request would cost more than the request itself."""

from __future__ import annotations

import hmac
import inspect
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.metrics import Metrics
from api.problems import ProblemException, error_responses
from api.settings import Settings
from api.solver import PlannerSolver, Solver, SolverPool
from api.store import Store


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_store(request: Request) -> Store:
    return request.app.state.store


_PLANNER = PlannerSolver()


async def get_solver() -> Solver:
    return _PLANNER


async def get_pool(request: Request) -> SolverPool:
    return request.app.state.pool


async def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


_FROM_STATE: dict[Callable[..., Any], Callable[[Request], Any]] = {
    get_settings: lambda r: r.app.state.settings,
    get_store: lambda r: r.app.state.store,
    get_solver: lambda _r: _PLANNER,
    get_pool: lambda r: r.app.state.pool,
    get_metrics: lambda r: r.app.state.metrics,
}


async def resolve(request: Request, dependency: Callable[..., Any]) -> Any:
    """What a route would get injected for ``dependency``, without FastAPI's per-request dependency
    solving (a third of the event loop's time per cache hit): the test's override in
    ``app.dependency_overrides`` (called without arguments, awaited if it is a coroutine function),
    else the app's own. For the hot routes (``POST /v1/plans``, ``GET /v1/plans/{id}``)."""
    override = request.app.dependency_overrides.get(dependency)
    if override is None:
        return _FROM_STATE[dependency](request)
    value = override()
    return await value if inspect.isawaitable(value) else value


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[Store, Depends(get_store)]
SolverDep = Annotated[Solver, Depends(get_solver)]
PoolDep = Annotated[SolverPool, Depends(get_pool)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]

_bearer = HTTPBearer(auto_error=False, description="Needed when the server sets MESHPLAN_API_TOKEN.")


def token_matches(expected: str | None, given: str | None) -> bool:
    """Whether a request's bearer token (``given``; None when it sent none) passes the server's
    (``expected``; None: no token configured). Constant-time, so response timing does not leak how much
    of a guess was right. Used by ``require_token`` and the cache-hit path (``api.hot_path``)."""
    if expected is None:
        return True
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


async def require_token(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Every /v1 route: when a token is configured, the request must carry it (``token_matches``)."""
    if not token_matches(settings.token, credentials.credentials if credentials is not None else None):
        raise ProblemException(
            401,
            "missing or wrong API token; send 'Authorization: Bearer <token>' with the server's MESHPLAN_API_TOKEN",
            headers={"WWW-Authenticate": "Bearer"},
            title="Unauthorized",
        )


def v1_router(prefix: str, tag: str) -> APIRouter:
    """A resource's router under ``/v1``, behind the token. Route paths carry the full ``/v1/...``
    prefix themselves, so the matched route's ``path`` is the template the metrics label with."""
    return APIRouter(
        prefix=f"/v1{prefix}", tags=[tag], dependencies=[Depends(require_token)], responses=error_responses(401)
    )
