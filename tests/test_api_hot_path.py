"""The plan cache's hot path (issue 12): a hit is a key lookup and the stored bytes sent back.

- The bodies are byte for byte what FastAPI's serialisation of the ``StoredPlan`` model gives (the
  old path, rebuilt here as a reference route), for a fresh answer, a hit, a GET, a row stored before
  the document column, and text that JSON escapes.
- A hit neither calls the planner nor parses the stored JSON back into models.
- The body's parsing, its key and the store's work run off the event loop: ``/healthz`` and
  ``/readyz`` answer while every store thread is held, and bad bodies get the same answers as
  FastAPI's own body parsing gives (``POST /v1/estimates`` takes the same ``PlanRequest``).

No timing is asserted anywhere (the load figures are ``bench/bench_api_load.py``'s).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, select, text

from api.app import create_app
from api.deps import get_solver, get_store
from api.routes import plans as plans_route
from api.schemas import StoredPlan
from api.settings import Settings
from api.store import STORE_THREADS, PlanRow, Store, migrate, request_key
from planner.specs import PlanRequest, PlanResponse
from planner.specs.catalog import MODELS
from tests.api_support import ROOT, SlowSolver, make_app, plan_request
from tests.pg_support import pg_server, pg_url  # noqa: F401 - fixtures


def reference_body(store: Store, plan_id: str, cached: bool) -> bytes:
    """The body the service sent before issue 12: the row parsed into a ``StoredPlan`` and returned
    through a FastAPI route with ``response_model=StoredPlan`` (validation and serialisation)."""
    ref = FastAPI()

    @ref.get("/p", response_model=StoredPlan)
    async def p() -> StoredPlan:
        stored = store.get_plan(plan_id)
        assert stored is not None
        return stored.model_copy(update={"cached": cached})

    with TestClient(ref) as client:
        return client.get("/p").content


def inline_model(name: str) -> dict:
    return {**MODELS["tiny-gpt"].model_dump(mode="json"), "name": name}


BODIES = [
    ("catalog model", plan_request()),
    ("inline model, text JSON escapes", plan_request(model=inline_model('модель "x"\\\n\t✓\x00'))),
    ("pinned degrees", plan_request(parallel__tp=2, parallel__pp=2)),
]


@pytest.mark.parametrize(("case", "body"), BODIES, ids=[c for c, _ in BODIES])
def test_answers_are_byte_identical_to_the_models_serialisation(tmp_path, case, body):
    app = make_app(tmp_path)
    store: Store = app.state.store
    with TestClient(app) as client:
        first = client.post("/v1/plans", json=body)
        assert first.status_code == 201, first.text
        plan_id = first.json()["id"]
        hit = client.post("/v1/plans", json=body)
        got = client.get(f"/v1/plans/{plan_id}")
        assert (hit.status_code, got.status_code) == (200, 200)
        assert hit.headers["content-type"] == got.headers["content-type"] == "application/json"
        assert first.content == reference_body(store, plan_id, cached=False)
        assert hit.content == got.content == reference_body(store, plan_id, cached=True)
        assert json.loads(hit.content)["cached"] is True and json.loads(first.content)["cached"] is False


def test_a_hit_does_not_call_the_planner_nor_parse_the_stored_json(tmp_path, monkeypatch):
    app = make_app(tmp_path)
    solver = SlowSolver()
    app.dependency_overrides[get_solver] = lambda: solver
    with TestClient(app) as client:
        first = client.post("/v1/plans", json=plan_request())
        assert first.status_code == 201 and len(solver.requests) == 1

        def refuse(*_a, **_k):
            raise AssertionError("the hot path parsed a stored answer back into a model")

        monkeypatch.setattr(PlanResponse, "model_validate_json", refuse)
        monkeypatch.setattr(PlanRequest, "model_validate_json", refuse)
        monkeypatch.setattr(StoredPlan, "model_dump", refuse)
        spelled_otherwise = json.dumps(dict(reversed(plan_request().items())))  # another spelling, same key
        answers = [
            client.post("/v1/plans", json=plan_request()),
            client.post("/v1/plans", json=plan_request()),  # the raw body seen before: no parsing at all
            client.post("/v1/plans", content=spelled_otherwise, headers={"content-type": "application/json"}),
            client.get(f"/v1/plans/{first.json()['id']}"),
        ]
        assert [a.status_code for a in answers] == [200, 200, 200, 200]
        assert len({a.content for a in answers}) == 1
        assert len(solver.requests) == 1  # solved once, never again


def test_a_row_stored_before_the_document_column_is_served_the_same_and_written_back(tmp_path):
    """A database at revision 0002 (no ``document``) with a stored plan: after the upgrade the plan
    is served byte-identical to the model's serialisation, and its document is stored on that read."""
    donor = make_app(tmp_path / "donor")
    with TestClient(donor) as client:
        plan_id = client.post("/v1/plans", json=plan_request()).json()["id"]
    with donor.state.store.engine.connect() as conn:
        row = conn.execute(select(PlanRow.__table__).where(PlanRow.id == plan_id)).mappings().one()
    (tmp_path / "old").mkdir()
    url = f"sqlite:///{tmp_path / 'old' / 'meshplan.db'}"
    engine = create_engine(url)
    migrate(engine, "0002")
    with engine.begin() as conn:
        columns = [c for c in row if c != "document"]
        conn.execute(
            text(f"INSERT INTO plans ({', '.join(columns)}) VALUES ({', '.join(':' + c for c in columns)})"),
            {c: row[c] for c in columns},
        )
    engine.dispose()

    app = make_app(tmp_path / "old")  # upgrades to the head
    store: Store = app.state.store
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT document FROM plans")).scalar() is None
    with TestClient(app) as client:
        got = client.get(f"/v1/plans/{plan_id}")
        assert got.status_code == 200
        assert got.content == reference_body(store, plan_id, cached=True)
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT document FROM plans")).scalar() is not None
        assert client.get(f"/v1/plans/{plan_id}").content == got.content
        assert client.post("/v1/plans", json=plan_request()).content == got.content


class HeldStore(Store):
    """The real store, whose plan lookups wait while ``gate`` is shut (a held lock), and which records
    whether each ran on a thread with a running event loop."""

    def __init__(self, url: str, threads: int = STORE_THREADS) -> None:
        super().__init__(url, threads)
        self.gate = threading.Event()
        self.lock = threading.Lock()
        self.waiting = 0
        self.on_loop: list[bool] = []

    def get_plan_body(self, plan_id: str, cached: bool = True) -> bytes | None:
        with self.lock:
            self.on_loop.append(_loop_running_here())
            self.waiting += 1
        self.gate.wait(300)
        return super().get_plan_body(plan_id, cached)


def _loop_running_here() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@pytest.mark.parametrize("threads", [4, STORE_THREADS])
def test_healthz_and_readyz_answer_while_every_store_thread_is_held(tmp_path, monkeypatch, threads):
    """48 cache hits wait on the held store (more than its threads and anyio's 40): /healthz and
    /readyz still answer, and then every hit gets its plan. The body's key and the store's lookups
    ran off the event loop thread."""
    app = make_app(tmp_path)
    with TestClient(app) as client:
        plan_id = client.post("/v1/plans", json=plan_request()).json()["id"]
    store = HeldStore(f"sqlite:///{tmp_path / 'meshplan.db'}", threads)
    app.dependency_overrides[get_store] = lambda: store
    app.state.plan_keys = plans_route.PlanKeys()  # the key is computed again (recorded below)
    keyed_on_loop: list[bool] = []
    real_key = plans_route.request_key

    def recording_key(request):
        keyed_on_loop.append(_loop_running_here())
        return real_key(request)

    monkeypatch.setattr(plans_route, "request_key", recording_key)

    async def scenario() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=300) as http:
            posts = [asyncio.create_task(http.post("/v1/plans", json=plan_request())) for _ in range(24)]
            gets = [asyncio.create_task(http.get(f"/v1/plans/{plan_id}")) for _ in range(24)]
            while store.waiting < threads:  # every store thread is held
                await asyncio.sleep(0.01)
            # a hang guard, not a timing claim: these must answer while the store is held
            health = await asyncio.wait_for(http.get("/healthz"), 120)
            ready = await asyncio.wait_for(http.get("/readyz"), 120)
            assert (health.status_code, ready.status_code) == (200, 200)
            assert not store.gate.is_set() and not any(t.done() for t in posts + gets)
            store.gate.set()
            return await asyncio.gather(*posts, *gets)

    try:
        answers = asyncio.run(scenario())
    finally:
        store.gate.set()
        store.close()
    assert [a.status_code for a in answers] == [200] * 48
    assert len({a.content for a in answers}) == 1
    assert store.on_loop and not any(store.on_loop)
    assert keyed_on_loop and not any(keyed_on_loop)


def test_concurrent_identical_requests_share_one_solve_and_the_joiners_are_marked_cached(tmp_path):
    app = make_app(tmp_path)
    gate = threading.Event()
    solver = SlowSolver(gate=gate)
    app.dependency_overrides[get_solver] = lambda: solver

    async def scenario() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=300) as http:
            tasks = [asyncio.create_task(http.post("/v1/plans", json=plan_request())) for _ in range(4)]
            while not solver.requests:
                await asyncio.sleep(0.01)
            gate.set()  # a request that comes after the solve is a plain hit: 200 as well
            return await asyncio.gather(*tasks)

    answers = asyncio.run(scenario())
    assert len(solver.requests) == 1
    assert sorted(a.status_code for a in answers) == [200, 200, 200, 201]
    store: Store = app.state.store
    plan_id = answers[0].json()["id"]
    for a in answers:
        assert a.content == reference_body(store, plan_id, cached=a.status_code == 200)


BAD_BODIES = [
    ("invalid JSON", {"content": b"{not json", "headers": {"content-type": "application/json"}}),
    ("empty body", {"content": b"", "headers": {"content-type": "application/json"}}),
    ("text/plain", {"content": json.dumps(plan_request()).encode(), "headers": {"content-type": "text/plain"}}),
    ("no content type", {"content": json.dumps(plan_request()).encode(), "headers": {}}),
    ("not UTF-8", {"content": b'{"model": "\xff"}', "headers": {"content-type": "application/json"}}),
    ("a list", {"json": [1, 2]}),
    ("unknown field", {"json": {**plan_request(), "bogus": 1}}),
    ("num_nodes 0", {"json": plan_request(cluster__num_nodes=0)}),
    ("top_k 99", {"json": plan_request(top_k=99)}),
    ("seq_len a string", {"json": plan_request(training__seq_len="abc")}),
    ("no cluster", {"json": {k: v for k, v in plan_request().items() if k != "cluster"}}),
    ("bad union member", {"json": plan_request(model={"name": "x"})}),
]


@pytest.mark.parametrize(("case", "kwargs"), BAD_BODIES, ids=[c for c, _ in BAD_BODIES])
def test_bad_bodies_get_the_answer_fastapis_body_parsing_gives(tmp_path, case, kwargs):
    """POST /v1/estimates declares the same PlanRequest body and lets FastAPI read it: the answers
    (status, fields, messages, fixes) are the same, but for the path in ``instance``."""
    with TestClient(make_app(tmp_path), raise_server_exceptions=False) as client:
        ours = client.post("/v1/plans", **kwargs)
        fastapis = client.post("/v1/estimates", **kwargs)
    assert ours.status_code == fastapis.status_code and ours.status_code in (400, 422), ours.text
    a, b = ours.json(), fastapis.json()
    assert (a.pop("instance"), b.pop("instance")) == ("/v1/plans", "/v1/estimates")
    assert a == b


def test_the_key_cache_is_bounded_and_keyed_by_content_type_and_body():
    keys = plans_route.PlanKeys(size=2, max_body=8)
    keys.put("application/json", b"a", "A")
    keys.put("application/json", b"b", "B")
    assert keys.get("text/plain", b"a") is None  # another content type is another request
    assert keys.get("application/json", b"a") == "A"  # a is now the most recent
    keys.put("application/json", b"c", "C")  # b goes
    keys.put("application/json", b"0123456789", "big")  # over max_body: not kept
    assert [keys.get("application/json", k) for k in (b"a", b"b", b"c", b"0123456789")] == ["A", None, "C", None]
    by_bytes = plans_route.PlanKeys(size=100, max_body=8, max_bytes=10)
    for i in range(5):
        by_bytes.put(None, bytes([i]) * 4, str(i))  # 4 bytes each: at most 2 fit in 10
    assert [by_bytes.get(None, bytes([i]) * 4) for i in range(5)] == [None, None, None, "3", "4"]


def test_openapi_still_documents_the_plan_request_body(tmp_path):
    with TestClient(make_app(tmp_path)) as client:
        op = client.get("/openapi.json").json()["paths"]["/v1/plans"]["post"]
    body = op["requestBody"]
    assert body["required"] is True
    assert body["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/PlanRequest"}
    assert set(body["content"]["application/json"]["examples"]) >= {"tiny"}
    assert {"200", "201", "422"} <= set(op["responses"])


# ---- the hits answered before FastAPI's routing (api/hot_path.py) ----------------------------------

TOKEN = "s3cret-token-0123456789abcdef"
AUTH = [
    ("none", {}, 401),
    ("right", {"Authorization": f"Bearer {TOKEN}"}, 200),
    ("right, lower-case scheme", {"Authorization": f"bearer {TOKEN}"}, 200),
    ("wrong", {"Authorization": "Bearer not-the-token-0123456789"}, 401),
    ("prefix of the token", {"Authorization": f"Bearer {TOKEN[:-1]}"}, 401),
    ("token and more", {"Authorization": f"Bearer {TOKEN}x"}, 401),
    ("spaces around the token", {"Authorization": f"Bearer  {TOKEN} "}, 200),  # as FastAPI's HTTPBearer reads it
    ("wrong scheme", {"Authorization": f"Basic {TOKEN}"}, 401),
    ("empty", {"Authorization": "Bearer "}, 401),
]


@pytest.mark.parametrize(("case", "headers", "status"), AUTH, ids=[c for c, _, _ in AUTH])
def test_a_hit_needs_the_token_like_any_v1_request(tmp_path, case, headers, status):
    """A body seen before and a stored id are answered from the store only with the right token;
    otherwise the route's own 401 problem."""
    app = make_app(tmp_path, api_token=TOKEN)
    app.dependency_overrides[get_solver] = lambda: SlowSolver()
    right = {"Authorization": f"Bearer {TOKEN}"}
    with TestClient(app) as client:
        first = client.post("/v1/plans", json=plan_request(), headers=right)
        assert first.status_code == 201
        plan_id = first.json()["id"]
        answers = [
            client.post("/v1/plans", json=plan_request(), headers=headers),
            client.get(f"/v1/plans/{plan_id}", headers=headers),
        ]
    for r in answers:
        assert r.status_code == status, r.text
        if status == 401:
            assert r.headers["content-type"] == "application/problem+json"
            assert r.headers["www-authenticate"] == "Bearer"
            assert "response" not in r.json()  # nothing of the plan
        else:
            assert r.json()["id"] == plan_id and r.json()["cached"] is True


def test_hits_are_counted_under_their_route_template(tmp_path):
    app = make_app(tmp_path)
    app.dependency_overrides[get_solver] = lambda: SlowSolver()
    with TestClient(app) as client:
        plan_id = client.post("/v1/plans", json=plan_request()).json()["id"]
        for _ in range(3):
            assert client.post("/v1/plans", json=plan_request()).status_code == 200
        for _ in range(2):
            assert client.get(f"/v1/plans/{plan_id}").status_code == 200
        assert client.get(f"/v1/plans/{'0' * 32}").status_code == 404  # not stored: the route's 404
        text = client.get("/metrics").text
    expected = [
        'meshplan_http_requests_total{method="POST",route="/v1/plans",status="201"} 1.0',
        'meshplan_http_requests_total{method="POST",route="/v1/plans",status="200"} 3.0',
        'meshplan_http_requests_total{method="GET",route="/v1/plans/{plan_id}",status="200"} 2.0',
        'meshplan_http_requests_total{method="GET",route="/v1/plans/{plan_id}",status="404"} 1.0',
        'meshplan_plan_cache_total{result="hit"} 3.0',
        'meshplan_plan_cache_total{result="miss"} 1.0',
        'meshplan_http_request_duration_seconds_count{method="POST",route="/v1/plans"} 4.0',
    ]
    for line in expected:
        assert line in text.splitlines(), line


def test_a_body_sent_in_pieces_is_solved_once_then_a_hit(tmp_path):
    """The hot path reads the whole body before it looks it up, and hands a body it has not seen on
    to the route intact, however the client split it."""
    app = make_app(tmp_path)
    solver = SlowSolver()
    app.dependency_overrides[get_solver] = lambda: solver
    raw = json.dumps(plan_request()).encode()

    async def scenario() -> list[httpx.Response]:
        async def pieces():
            for i in range(0, len(raw), 7):
                yield raw[i : i + 7]

        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            headers = {"content-type": "application/json"}
            return [await http.post("/v1/plans", content=pieces(), headers=headers) for _ in range(2)]

    first, second = asyncio.run(scenario())
    assert (first.status_code, second.status_code) == (201, 200), first.text
    assert first.json()["id"] == second.json()["id"] and len(solver.requests) == 1


def test_a_body_seen_before_is_not_parsed_again(tmp_path, monkeypatch):
    app = make_app(tmp_path)
    app.dependency_overrides[get_solver] = lambda: SlowSolver()
    with TestClient(app) as client:
        first = client.post("/v1/plans", json=plan_request())

        def refuse(*_a, **_k):
            raise AssertionError("a body seen before was parsed again")

        monkeypatch.setattr(plans_route, "parse_plan_request", refuse)
        monkeypatch.setattr(plans_route, "request_key", refuse)
        hits = [client.post("/v1/plans", json=plan_request()) for _ in range(3)]
    assert [h.status_code for h in hits] == [200] * 3
    assert {h.json()["id"] for h in hits} == {first.json()["id"]}


def test_a_deleted_plan_is_not_served_from_the_key_cache(tmp_path):
    app = make_app(tmp_path)
    solver = SlowSolver()
    app.dependency_overrides[get_solver] = lambda: solver
    with TestClient(app) as client:
        first = client.post("/v1/plans", json=plan_request())
        plan_id = first.json()["id"]
        assert client.delete(f"/v1/plans/{plan_id}").status_code == 204
        assert client.get(f"/v1/plans/{plan_id}").status_code == 404
        again = client.post("/v1/plans", json=plan_request())  # the key is known, the plan is not: solved
    assert again.status_code == 201 and again.json()["id"] == plan_id and len(solver.requests) == 2


# ---- the cache key covers the whole request, calibrations included ------------------------------

CALIBRATION = {"gpu": "h100-sxm5-80gb", "residuals": {"compute_scale": 1.25}}
KEYED = [
    ("as is", plan_request()),
    ("calibration_id", plan_request(calibration_id="0" * 32)),
    ("another calibration_id", plan_request(calibration_id="1" * 32)),
    ("inline calibration", plan_request(calibration=CALIBRATION)),
    ("another inline calibration", plan_request(calibration={**CALIBRATION, "residuals": {"compute_scale": 1.5}})),
    ("profile_id", plan_request(profile_id="0" * 32)),
    ("network", plan_request(network={"backend": "nccl", "device": "h100", "world_size": 8})),
    ("top_k", plan_request(top_k=1)),
    ("memory headroom", plan_request(options__memory_headroom=0.1)),
]


def test_every_field_of_the_request_is_part_of_its_key():
    """Requests that differ in any field (a calibration above all: a calibrated plan is another
    plan) have different ids; spelling (key order, defaults written out) does not matter."""
    keys = {case: request_key(PlanRequest.model_validate(body)) for case, body in KEYED}
    assert len(set(keys.values())) == len(keys), keys
    spelled = PlanRequest.model_validate({**dict(reversed(plan_request().items())), "calibration_id": None})
    assert request_key(spelled) == keys["as is"]


@pytest.mark.parametrize(
    "changes",
    [{"calibration_id": "0" * 32}, {"calibration": CALIBRATION}],
    ids=["calibration_id", "inline calibration"],
)
def test_a_calibrated_request_does_not_hit_the_uncalibrated_plan(tmp_path, changes):
    app = make_app(tmp_path)
    solver = SlowSolver()
    app.dependency_overrides[get_solver] = lambda: solver
    with TestClient(app) as client:
        plain = client.post("/v1/plans", json=plan_request())
        assert plain.status_code == 201
        calibrated = client.post("/v1/plans", json=plan_request(**changes))
        # solved anew (201), or refused (422: no stored calibration with that id): never the plain plan
        assert calibrated.status_code in (201, 422), calibrated.text
        assert calibrated.json().get("id") != plain.json()["id"]
        assert client.post("/v1/plans", json=plan_request()).json()["id"] == plain.json()["id"]


# ---- PostgreSQL: a hit is one statement -------------------------------------------------------------


def _statements(log: str) -> list[str]:
    """The statements a PostgreSQL server logged (``log_statement = 'all'``): simple and extended
    protocol alike (``statement: ...``, ``execute <name>: ...``)."""
    found = []
    for line in log.splitlines():
        for marker in ("LOG:  statement: ", "LOG:  execute "):
            if marker in line:
                found.append(line.split(marker, 1)[1])
    return found


def test_postgres_hits_run_one_statement_each_and_no_ping(pg_server, pg_url):
    """Each cache hit (POST of a body seen before, GET by id) sends PostgreSQL exactly the plan
    lookup: no pre-ping (psycopg pings with an empty statement, ``;``), no ``BEGIN``/``ROLLBACK``
    around it (before: those four statements per hit)."""
    pg_server.admin(f"ALTER DATABASE \"{pg_url.rsplit('/', 1)[1]}\" SET log_statement = 'all'")
    app = create_app(Settings(database_url=pg_url))
    app.dependency_overrides[get_solver] = lambda: SlowSolver()
    log = pg_server.root / "server.log"
    with TestClient(app) as client:
        plan_id = client.post("/v1/plans", json=plan_request()).json()["id"]
        assert client.post("/v1/plans", json=plan_request()).status_code == 200  # connections made
        start = log.stat().st_size
        hits = [client.post("/v1/plans", json=plan_request()) for _ in range(10)]
        hits += [client.get(f"/v1/plans/{plan_id}") for _ in range(10)]
        with log.open() as f:
            f.seek(start)
            statements = _statements(f.read())
    assert [h.status_code for h in hits] == [200] * 20
    assert len(statements) == 20, statements
    assert all(s.split(": ", 1)[1].startswith("SELECT plans.created_at") for s in statements), statements


def test_postgres_hits_survive_connections_the_server_closed(pg_server, pg_url):
    """Without a ping per hit, a pooled connection the server has closed (restart, failover,
    ``pg_terminate_backend``) is found by the lookup itself: it is dropped and the hit answered on a
    fresh connection, not failed."""
    database = pg_url.rsplit("/", 1)[1]
    app = create_app(Settings(database_url=pg_url))
    app.dependency_overrides[get_solver] = lambda: SlowSolver()
    with TestClient(app) as client:
        plan_id = client.post("/v1/plans", json=plan_request()).json()["id"]
        store: Store = app.state.store
        with store.read_engine.connect() as a, store.read_engine.connect() as b:  # two pooled connections
            a.exec_driver_sql("SELECT 1"), b.exec_driver_sql("SELECT 1")
        assert store.read_engine.pool.checkedin() >= 2
        pg_server.admin(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}'")
        answers = [client.post("/v1/plans", json=plan_request()), client.get(f"/v1/plans/{plan_id}")]
    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]


FROZEN_AFTER_START = """
import gc, sys
from fastapi.testclient import TestClient
from api.app import create_app
from api.settings import Settings
assert "planner.search" not in sys.modules  # imported by the first solve, unless start-up does
with TestClient(create_app(Settings(database_url=sys.argv[1]))):
    import planner.search
    tracked = {id(o) for o in gc.get_objects()}
    late = [m for m in ("planner.search", "planner.search.cutsolver") if id(vars(sys.modules[m])) in tracked]
    print(late)
"""


def test_start_up_freezes_the_planners_modules_out_of_the_collector(tmp_path):
    """The modules a solve imports are imported before ``gc.freeze()`` at start-up, so the collector's
    full passes (which solves trigger, holding the interpreter: no request is answered meanwhile)
    do not walk them. A fresh interpreter: in this one the test modules imported the planner long ago."""
    done = subprocess.run(
        [sys.executable, "-c", FROZEN_AFTER_START, f"sqlite:///{tmp_path / 'meshplan.db'}"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_store_calls_return_results_and_errors_and_survive_a_caller_that_left(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'meshplan.db'}")
    gate = threading.Event()

    def held() -> str:
        gate.wait(300)
        return "late"

    def fails() -> None:
        raise KeyError("from the store thread")

    async def scenario() -> list[object]:
        left = asyncio.create_task(store.call(held))
        await asyncio.sleep(0)
        left.cancel()  # the caller goes away while its call runs
        gate.set()
        with pytest.raises(asyncio.CancelledError):
            await left
        with pytest.raises(KeyError, match="from the store thread"):
            await store.call(fails)
        return list(await asyncio.gather(*(store.call(pow, i, 2) for i in range(3 * STORE_THREADS))))

    try:
        assert asyncio.run(scenario()) == [i * i for i in range(3 * STORE_THREADS)]
        assert asyncio.run(scenario()) == [i * i for i in range(3 * STORE_THREADS)]  # another event loop
    finally:
        store.close()
