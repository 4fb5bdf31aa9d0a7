"""The meshplan service: ``create_app(settings)`` builds the FastAPI app.

Routes live in ``api/routes/`` (one module per resource) under ``/v1``, behind the bearer token when
``MESHPLAN_API_TOKEN`` is set; ``/healthz``, ``/readyz``, ``/metrics`` and the dashboard (``/``) are
open. Every error is an RFC 9457 problem document (``api.problems``).
"""

from __future__ import annotations

import gc
import importlib
import sys
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from api import problems
from api.body_limit import BodyLimitMiddleware
from api.hot_path import PlanCacheMiddleware
from api.metrics import Metrics, MetricsMiddleware
from api.routes import calibrations, catalog, estimates, exports, health, plans, profiles, runs
from api.settings import Settings, load_settings
from api.solver import SolverPool
from api.store import Store

STATIC_DIR = Path(__file__).resolve().parent / "static"
VERSION = "0.1.0"
SWITCH_INTERVAL_S = 0.001
GC_FULL_PASS_EVERY = 1000  # middle-generation passes per full pass (CPython's default: 10)
PRELOAD = ("planner.api", "planner.answer.trace")  # what solves import (PlannerSolver imports them on first use)


def create_app(settings: Settings | None = None) -> FastAPI:
    """The app for ``settings`` (default: from the ``MESHPLAN_`` environment, validated now)."""
    settings = settings or load_settings()
    store = Store(settings.database_url, settings.store_threads)
    metrics = Metrics()
    pool = SolverPool(settings, metrics)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        # What start-up made (the app, its schemas, the imports) lives as long as the process: keep it
        # out of the collector's full passes, which would otherwise walk it under load (tail latency).
        # The planner is imported first so that its modules are part of it: imported on the first
        # solve instead, they stayed in the collector's oldest generation, and each full pass (which
        # solves trigger) walked them with the interpreter held: 25 ms of CPU each, 200-800 ms on
        # the loaded machine, during which neither /healthz nor a cache hit was answered.
        for module in PRELOAD:
            importlib.import_module(module)
        gc.collect()
        gc.freeze()
        # A full pass walks every object alive, a solve's working set included (100-400 ms with the
        # interpreter held, measured during solves): run one every GC_FULL_PASS_EVERY passes of the
        # middle generation instead of every 10 (its garbage is collected later, not never).
        thresholds = gc.get_threshold()
        gc.set_threshold(thresholds[0], thresholds[1], max(thresholds[2], GC_FULL_PASS_EVERY))
        # Solves are Python threads: hand the interpreter back to the event loop within 1 ms (not
        # the default 5), so /healthz and cache hits do not queue behind a solve's bytecode.
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        yield
        gc.set_threshold(*thresholds)
        pool.shutdown()
        store.close()

    app = FastAPI(
        title="meshplan",
        version=VERSION,
        summary="Automatic TP/PP/DP parallelism planner for training large models.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.store = store
    app.state.metrics = metrics
    app.state.pool = pool
    app.state.plan_keys = plans.PlanKeys()

    problems.install(app)
    app.add_middleware(PlanCacheMiddleware)  # innermost: cache hits skip FastAPI's per-request work
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=metrics)  # outermost: counts 413s too

    for module in (plans, exports, estimates, profiles, runs, calibrations, catalog, health):
        app.include_router(module.router)
    _mount_dashboard(app)
    return app


def _mount_dashboard(app: FastAPI) -> None:
    """The dashboard's static files at ``/`` (after the API routes, which match first)."""
    if (STATIC_DIR / "index.html").is_file():
        app.mount("/", StaticFiles(directory=STATIC_DIR, html=True), name="dashboard")
        return

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def no_dashboard() -> str:
        return (
            "<!doctype html><title>meshplan</title><h1>meshplan service</h1>"
            "<p>The dashboard is not installed (api/static/index.html is missing). "
            "The REST API is up: see <a href='/docs'>/docs</a>.</p>"
        )
