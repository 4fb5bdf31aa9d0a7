"""Running the planner for the service: the solver interface, request bounds, and a pool that runs
solves off the event loop with bounded concurrency.

``SolverPool`` holds ``concurrency`` worker threads and lets at most ``queue`` more solves wait for
one (for at most ``queue_timeout_s``); past that a request is refused at once with 503 and a
``Retry-After``, so a burst of heavy requests cannot stall the server. Identical requests that
arrive while one is being solved wait for that solve instead of starting another. Solver threads
run at a lower CPU priority than the rest of the process (Linux), so solves filling the cores do
not delay the event loop.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

from api.metrics import Metrics
from api.problems import ProblemException
from api.schemas import ProblemError
from api.settings import Settings
from planner.specs import Plan, PlanRequest, PlanResponse
from planner.specs.catalog import get_model

R = TypeVar("R")


class Solver(Protocol):
    """What the service needs from the planner (``planner.plan``, ``planner.estimate_plan``,
    ``planner.answer.trace.chrome_trace``). Tests may swap in another implementation."""

    def plan(self, request: PlanRequest) -> PlanResponse: ...

    def estimate_plan(self, request: PlanRequest) -> Plan: ...

    def trace(self, plan: Plan) -> dict: ...


class PlannerSolver:
    """The real planner (imported on first use, so the app starts fast)."""

    def plan(self, request: PlanRequest) -> PlanResponse:
        import planner

        return planner.plan(request)

    def estimate_plan(self, request: PlanRequest) -> Plan:
        import planner

        return planner.estimate_plan(request)

    def trace(self, plan: Plan) -> dict:
        from planner.answer.trace import chrome_trace

        return chrome_trace(plan)


def bound_request(request: PlanRequest, settings: Settings) -> PlanRequest:
    """Refuse requests beyond the service's bounds (422 naming the field) and cap the solver's time
    and threads at the settings' limits (the stored request shows the values used)."""
    errors: list[ProblemError] = []
    model = get_model(request.model)  # an unknown catalog id → MeshplanError → 422 'model'
    if model.num_layers > settings.max_layers:
        field = "model.num_layers" if not isinstance(request.model, str) else "model"
        errors.append(
            ProblemError(
                field=field,
                message=f"{model.num_layers} layers exceeds this server's limit of {settings.max_layers}",
                fix="use a smaller model or raise MESHPLAN_MAX_LAYERS on the server",
            )
        )
    if request.cluster.num_gpus > settings.max_gpus:
        errors.append(
            ProblemError(
                field="cluster.num_nodes",
                message=f"num_nodes × gpus_per_node = {request.cluster.num_gpus} exceeds this server's limit of {settings.max_gpus} GPUs",
                fix="plan for fewer nodes or raise MESHPLAN_MAX_GPUS on the server",
            )
        )
    if request.top_k > settings.max_top_k:
        errors.append(
            ProblemError(
                field="top_k",
                message=f"top_k={request.top_k} exceeds this server's limit of {settings.max_top_k}",
                fix=f"ask for at most {settings.max_top_k} plans",
            )
        )
    if errors:
        detail = "; ".join(f"{e.field}: {e.message}" for e in errors)
        raise ProblemException(422, detail, errors=errors, title="Request exceeds the server's limits")
    options = request.options.model_copy(
        update={
            "time_limit_s": min(request.options.time_limit_s, settings.max_solver_time_s),
            "num_workers": min(request.options.num_workers, settings.max_solver_workers),
        }
    )
    return request.model_copy(update={"options": options})


class SolverPool:
    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.concurrency = settings.solver_concurrency
        self.capacity = settings.solver_concurrency + settings.solver_queue
        self.queue_timeout_s = settings.solver_queue_timeout_s
        self.metrics = metrics
        self._executor: ThreadPoolExecutor | None = None  # made on first use, again after shutdown
        self._slots = asyncio.Semaphore(self.concurrency)
        self._admitted = 0  # solves running or waiting for a slot
        self._inflight: dict[str, asyncio.Future] = {}

    def shutdown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def _saturated(self, why: str) -> ProblemException:
        self.metrics.solver_rejected.inc()
        return ProblemException(
            503,
            f"the solver is saturated ({why}); retry later",
            headers={"Retry-After": "5"},
            title="Service Unavailable",
        )

    def _release(self) -> None:
        self._admitted -= 1
        self.metrics.solver_inflight.set(self._admitted)
        self._slots.release()

    async def run(self, fn: Callable[[], R]) -> R:
        """Run ``fn`` in a solver thread. 503 at once when ``capacity`` solves are admitted, or when
        no slot frees up within ``queue_timeout_s``."""
        if self._admitted >= self.capacity:
            raise self._saturated(f"{self._admitted} solves running or queued")
        self._admitted += 1
        self.metrics.solver_inflight.set(self._admitted)
        try:
            await asyncio.wait_for(self._slots.acquire(), self.queue_timeout_s)
        except (TimeoutError, asyncio.CancelledError) as exc:
            self._admitted -= 1
            self.metrics.solver_inflight.set(self._admitted)
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise self._saturated(f"no solver slot within {self.queue_timeout_s:g} s") from None
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                self.concurrency, thread_name_prefix="meshplan-solver", initializer=_lower_priority
            )
        future = asyncio.get_running_loop().run_in_executor(self._executor, fn)
        # The slot is freed when the thread finishes, even if the client went away meanwhile: the
        # number of solver threads busy never exceeds ``concurrency``.
        future.add_done_callback(lambda _f: self._release())
        return await asyncio.shield(future)

    async def run_once(self, key: str, fn: Callable[[], R]) -> tuple[R, bool]:
        """Like ``run``, but concurrent calls with the same ``key`` share one solve. Returns (result,
        whether this call joined another's solve)."""
        shared = self._inflight.get(key)
        if shared is not None:
            return await asyncio.shield(shared), True
        task = asyncio.ensure_future(self.run(fn))
        self._inflight[key] = task
        task.add_done_callback(lambda _t: self._inflight.pop(key, None))
        return await asyncio.shield(task), False


SOLVER_NICENESS = 10


def _lower_priority() -> None:
    """A solver thread yields the CPU to the event loop and the store's threads: on Linux, where
    niceness is per thread, it runs at nice +10 (and so do the threads it starts, e.g. CP-SAT's),
    so on a machine whose cores the solves fill, /healthz and cache hits are still served first.
    Elsewhere nothing changes (the call would lower the whole process)."""
    if sys.platform != "linux":
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, max(os.getpriority(os.PRIO_PROCESS, tid), SOLVER_NICENESS))
    except OSError:  # not permitted here: run at the process's priority
        pass


def timed(metrics: Metrics, kind: str, fn: Callable[[], R]) -> Callable[[], R]:
    def wrapper() -> R:
        start = time.perf_counter()
        try:
            return fn()
        finally:
            metrics.solver_seconds.labels(kind).observe(time.perf_counter() - start)

    return wrapper
