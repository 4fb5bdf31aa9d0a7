"""The plan cache's hot path (issue 12): a cache hit is a key lookup and the stored bytes sent back.

``PlanCacheMiddleware`` answers the two requests that are served from the store, before FastAPI's
routing, exception and dependency machinery (which cost the event loop more than the rest of a hit):

- ``POST /v1/plans`` with a body seen before (``PlanKeys``: the raw body and its content type → the
  plan id): the stored ``StoredPlan`` document, ``cached`` true, status 200;
- ``GET /v1/plans/{plan_id}``: the stored document.

Everything else, and any request it cannot answer from the store (a body not seen before, an unknown
id, a token that is missing or wrong, a database error), goes on to the FastAPI route unchanged (a
POST's body is handed on as it was read), which answers it as before: a 201 after a solve, a 404 or
401 problem, a 422 for a bad body. The answers it gives are byte for byte the route's (same status,
headers and body); the store lookup runs in the store's threads, off the event loop; the metrics see
the route's template as for any other request. Dependency overrides (tests) are honoured.
"""

from __future__ import annotations

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.deps import get_metrics, get_settings, get_store, resolve, token_matches
from api.metrics import Metrics
from api.routes import plans
from api.settings import Settings
from api.store import Store

PLANS = "/v1/plans"
PLAN_PREFIX = PLANS + "/"
MAX_ID = 64  # PlanId's max_length: a longer id is the route's 422


class PlanCacheMiddleware:
    """Serve stored plans without FastAPI's per-request work; hand every other request on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        # The routes FastAPI would have matched (it puts the same objects in ``scope["route"]``).
        self._routes: dict[str, APIRoute] = {
            f"{method} {route.path}": route
            for route in plans.router.routes
            if isinstance(route, APIRoute)
            for method in route.methods
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("root_path"):
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        if method == "POST" and path == PLANS:
            await self._post(scope, receive, send)
        elif method == "GET" and path.startswith(PLAN_PREFIX):
            plan_id = path[len(PLAN_PREFIX) :]
            if 0 < len(plan_id) <= MAX_ID and "/" not in plan_id:
                await self._get(scope, receive, send, plan_id)
            else:
                await self.app(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _authorized(self, request: Request) -> bool:
        """The token check of ``api.deps.require_token`` (constant time); False sends the request on
        to the route, which answers 401."""
        settings: Settings = await resolve(request, get_settings)
        scheme, _, given = (request.headers.get("authorization") or "").partition(" ")  # as HTTPBearer reads it
        return token_matches(settings.token, given.strip() if scheme.lower() == "bearer" else None)

    async def _stored(self, request: Request, plan_id: str) -> bytes | None:
        store: Store = await resolve(request, get_store)
        try:
            return await store.call(store.get_plan_body, plan_id)
        except Exception:  # noqa: BLE001 - the route answers it (its error handling, its problem document)
            return None

    async def _post(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope)
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: the route sees it too
                await self.app(scope, _replay(chunks, message, receive), send)
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        raw = b"".join(chunks)
        body = None
        if await self._authorized(request):
            key = request.app.state.plan_keys.get(request.headers.get("content-type"), raw)
            if key is not None:
                body = await self._stored(request, key)
        if body is None:
            await self.app(scope, _replay([raw], None, receive), send)
            return
        metrics: Metrics = await resolve(request, get_metrics)
        metrics.plan_cache.labels("hit").inc()
        await self._send(scope, send, "POST " + PLANS, body)

    async def _get(self, scope: Scope, receive: Receive, send: Send, plan_id: str) -> None:
        request = Request(scope)
        body = await self._stored(request, plan_id) if await self._authorized(request) else None
        if body is None:
            await self.app(scope, receive, send)
            return
        await self._send(scope, send, f"GET {PLAN_PREFIX}{{plan_id}}", body)

    async def _send(self, scope: Scope, send: Send, route: str, body: bytes) -> None:
        scope["route"] = self._routes[route]  # the metrics label the route's template
        headers = [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _replay(chunks: list[bytes], pending: Message | None, receive: Receive) -> Receive:
    """A ``receive`` that gives the body read so far as one message (then ``pending``, when the read
    stopped at a disconnect), then the server's own messages."""
    first: list[Message] = [{"type": "http.request", "body": b"".join(chunks), "more_body": pending is not None}]
    if pending is not None:
        first.append(pending)

    async def replayed() -> Message:
        if first:
            return first.pop(0)
        return await receive()

    return replayed
