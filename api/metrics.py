"""Prometheus metrics: requests by route template and status, their latency, solver time, cache hits.

Each app has its own registry (several apps in one test process do not collide). With several
uvicorn workers each process counts its own requests; scrape each worker, or run one worker per
container.
"""

from __future__ import annotations

import time

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

disable_created_metrics()  # the *_created series only add noise to a scrape

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "meshplan_http_requests",
            "HTTP requests by method, route template and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "meshplan_http_request_duration_seconds",
            "HTTP request latency by method and route template.",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.solver_seconds = Histogram(
            "meshplan_solver_duration_seconds",
            "Wall time of one planner solve.",
            ["kind"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.plan_cache = Counter(
            "meshplan_plan_cache",
            "Plan requests answered from the store (hit) or solved (miss).",
            ["result"],
            registry=self.registry,
        )
        self.solver_inflight = Gauge(
            "meshplan_solver_inflight",
            "Solves running or waiting for a slot.",
            registry=self.registry,
        )
        self.solver_rejected = Counter(
            "meshplan_solver_rejected",
            "Solves refused because the server was saturated.",
            registry=self.registry,
        )

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def route_template(scope: Scope, status: int) -> str:
    """The matched API route's path template (``/v1/plans/{plan_id}``), never the raw path (unbounded
    label values would blow up the time series). Requests no API route matched are labelled
    ``unmatched`` when they failed with 404/405 and ``other`` otherwise (dashboard files, /docs)."""
    path = getattr(scope.get("route"), "path", None)
    if path:
        return path
    return "unmatched" if status in (404, 405) else "other"


class MetricsMiddleware:
    """Pure ASGI middleware (no BaseHTTPMiddleware: it keeps streaming and background tasks intact)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = route_template(scope, status["code"])
            method = scope.get("method", "GET")
            self.metrics.requests.labels(method, route, str(status["code"])).inc()
            self.metrics.latency.labels(method, route).observe(time.perf_counter() - start)
