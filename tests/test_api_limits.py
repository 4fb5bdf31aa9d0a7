"""Bounds a deployer relies on: body size, model/cluster size, top_k, solver time and threads, and a
bounded solver pool that answers 503 at once when saturated instead of stalling the server.

These cases swap the planner for ``SlowSolver`` (a deliberately slow stand-in that records what
it was asked), so they check the service's own bounds whatever the planner does."""

from __future__ import annotations

import asyncio
import threading

import pytest
from fastapi.testclient import TestClient

from api.deps import get_solver
from api.metrics import Metrics
from api.problems import ProblemException
from api.solver import SolverPool
from planner.specs.catalog import MODELS
from tests.api_support import SlowSolver, make_app, make_settings, plan_request, profile_body, wait_until

PROBLEM = "application/problem+json"


@pytest.mark.parametrize(
    ("name", "body", "headers"),
    [
        ("declared length", b"{" + b" " * 5000 + b"}", {"content-type": "application/json"}),
        ("chunked, no length", iter([b"{", b" " * 3000, b" " * 3000, b"}"]), {"content-type": "application/json"}),
    ],
)
def test_body_over_the_limit_is_413(tmp_path, name, body, headers):
    with TestClient(make_app(tmp_path, max_body_bytes=4096)) as c:
        r = c.post("/v1/profiles", content=body, headers=headers)
        assert r.status_code == 413 and r.headers["content-type"] == PROBLEM
        assert "MESHPLAN_MAX_BODY_BYTES" in r.json()["detail"]
        # Just under the limit is read and validated as usual.
        small = c.post("/v1/profiles", json=profile_body())
        assert small.status_code == 201, small.text


LIMIT_CASES = [
    # (name, server settings, request changes, field named)
    ("model layers", {"max_layers": 4}, {"model": "tiny-gpt"}, "model"),
    ("inline model layers", {"max_layers": 4}, {"model": MODELS["tiny-gpt"].model_dump()}, "model.num_layers"),
    ("cluster GPUs", {"max_gpus": 4}, {"cluster__num_nodes": 1}, "cluster.num_nodes"),
    ("top_k", {"max_top_k": 2}, {"top_k": 5}, "top_k"),
]


@pytest.mark.parametrize(("name", "settings", "changes", "field"), LIMIT_CASES, ids=[c[0] for c in LIMIT_CASES])
def test_request_over_a_server_limit_is_422(tmp_path, name, settings, changes, field):
    solver = SlowSolver()
    app = make_app(tmp_path, **settings)
    app.dependency_overrides[get_solver] = lambda: solver
    with TestClient(app) as c:
        r = c.post("/v1/plans", json=plan_request(**changes))
        assert r.status_code == 422, r.text
        assert field in [e["field"] for e in r.json()["errors"]]
        assert all(e.get("fix") for e in r.json()["errors"])
        assert solver.requests == []  # refused before solving
        # The same server accepts a request within its limits.
        within = {
            "max_layers": {"model": "tiny-gpt"},
            "max_gpus": {"cluster__gpus_per_node": 4},
            "max_top_k": {"top_k": 2},
        }
        key = next(iter(settings))
        if key != "max_layers":
            assert c.post("/v1/plans", json=plan_request(**within[key])).status_code == 201


def test_solver_time_and_threads_are_capped(tmp_path):
    solver = SlowSolver()
    app = make_app(tmp_path, max_solver_time_s=2.0, max_solver_workers=1)
    app.dependency_overrides[get_solver] = lambda: solver
    with TestClient(app) as c:
        r = c.post("/v1/plans", json=plan_request(options={"time_limit_s": 500, "num_workers": 16}))
        assert r.status_code == 201
        assert solver.requests[0].options.time_limit_s == 2.0 and solver.requests[0].options.num_workers == 1
        assert r.json()["request"]["options"] == {
            "time_limit_s": 2.0,
            "num_workers": 1,
            "allow_tp_across_nodes": False,
            "prove": False,
            "memory_headroom": 0.05,
        }
        # Under the caps, the request's own values are kept.
        c.post("/v1/plans", json=plan_request(options={"time_limit_s": 0.5, "num_workers": 1}))
        assert solver.requests[1].options.time_limit_s == 0.5


def _post_in_thread(client: TestClient, body: dict, out: list) -> threading.Thread:
    def go() -> None:
        out.append(client.post("/v1/plans", json=body))

    t = threading.Thread(target=go)
    t.start()
    return t


def _inflight(client: TestClient) -> float:
    line = next(x for x in client.get("/metrics").text.splitlines() if x.startswith("meshplan_solver_inflight "))
    return float(line.split()[1])


def test_saturated_solver_answers_503_at_once_and_the_server_stays_responsive(tmp_path):
    # The solves are held until the end: every answer below arrives while both are still pending, so
    # "at once" and "not blocked" are shown by causality, not by a timer that a loaded machine breaks.
    gate = threading.Event()
    solver = SlowSolver(gate=gate)
    app = make_app(tmp_path, solver_concurrency=1, solver_queue=1)
    app.dependency_overrides[get_solver] = lambda: solver
    with TestClient(app) as c:
        results: list = []
        threads = [_post_in_thread(c, plan_request(training__global_batch_size=32), results)]
        wait_until(lambda: len(solver.requests) == 1, "the first solve to start")
        threads.append(_post_in_thread(c, plan_request(training__global_batch_size=64), results))
        wait_until(lambda: _inflight(c) == 2, "the second request to queue behind the first")
        third = c.post("/v1/plans", json=plan_request(training__global_batch_size=128))
        assert third.status_code == 503 and third.headers["content-type"] == PROBLEM
        assert third.headers["retry-after"] == "5"
        # The event loop is not blocked by the solves: other routes answer meanwhile.
        assert c.get("/healthz").status_code == 200 and c.get("/v1/plans").status_code == 200
        assert not gate.is_set() and results == [] and len(solver.requests) == 1  # nothing finished yet
        gate.set()
        for t in threads:
            t.join(60)
        assert sorted(r.status_code for r in results) == [201, 201]
        assert len(solver.requests) == 2
        metrics = c.get("/metrics").text
        assert "meshplan_solver_rejected_total 1.0" in metrics


def test_queue_wait_is_bounded(tmp_path):
    gate = threading.Event()  # the first solve never ends before the second request's answer
    solver = SlowSolver(gate=gate)
    app = make_app(tmp_path, solver_concurrency=1, solver_queue=4, solver_queue_timeout_s=0.3)
    app.dependency_overrides[get_solver] = lambda: solver
    with TestClient(app) as c:
        results: list = []
        first = _post_in_thread(c, plan_request(), results)
        wait_until(lambda: len(solver.requests) == 1, "the first solve to start")
        r = c.post("/v1/plans", json=plan_request(training__global_batch_size=64))
        assert r.status_code == 503 and "no solver slot within 0.3 s" in r.json()["detail"]
        assert results == []  # answered while the slot was still held: the wait, not the solve, ended it
        gate.set()
        first.join(60)
        assert results[0].status_code == 201


def test_identical_concurrent_requests_share_one_solve(tmp_path):
    solver = SlowSolver(delay=1.0)
    app = make_app(tmp_path, solver_concurrency=2)
    app.dependency_overrides[get_solver] = lambda: solver
    with TestClient(app) as c:
        results: list = []
        threads = [_post_in_thread(c, plan_request(), results) for _ in range(4)]
        for t in threads:
            t.join(10)
    assert len(solver.requests) == 1
    assert sorted(r.status_code for r in results) == [200, 200, 200, 201]
    assert len({r.json()["id"] for r in results}) == 1


def test_cancelled_request_keeps_its_slot_until_the_solve_ends(tmp_path):
    # A client that goes away mid-solve cancels its request task; the solver thread runs on, so its
    # slot must stay taken until the thread finishes (never more than `solver_concurrency` solves)
    # and must then be freed (no leak).
    settings = make_settings(tmp_path, solver_concurrency=1, solver_queue=0)
    pool = SolverPool(settings, Metrics())
    release = threading.Event()

    async def scenario() -> None:
        task = asyncio.create_task(pool.run(release.wait))
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.sleep(0.05)
        with pytest.raises(ProblemException) as refused:
            await pool.run(lambda: "second")
        assert refused.value.status == 503
        release.set()
        # The slot is freed once the thread ends, however long a loaded machine takes to run it: no leak.
        for _ in range(12000):
            try:
                assert await pool.run(lambda: "third") == "third"
                break
            except ProblemException:
                await asyncio.sleep(0.01)
        else:
            pytest.fail("the cancelled request's slot was never freed")

    try:
        asyncio.run(scenario())
    finally:
        pool.shutdown()
