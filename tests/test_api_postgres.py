"""The store on both supported backends: every case in the table runs on a SQLite file and on a real
PostgreSQL server (tests/pg_support.py), plus PostgreSQL-only cases: `/readyz` when the database
goes away, several processes creating the tables at once, and a real `meshplan serve` on PostgreSQL
that keeps a plan across a restart."""

from __future__ import annotations

import threading

import httpx
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.client import MeshplanClient
from api.settings import Settings
from api.store import Store, request_key
from planner.specs import PlanRequest, Profile, RunReport
from tests.api_support import LiveServer, SlowSolver, plan_request, profile_body, run_report_body
from tests.pg_support import REQUIRE_ENV, pg_server, pg_url, unavailable  # noqa: F401 - fixtures

BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(params=BACKENDS)
def store_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'meshplan.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def store(store_url):
    s = Store(store_url)
    yield s
    s.close()


def solved(**changes: object):
    request = PlanRequest.model_validate(plan_request(**changes))
    return request_key(request), request, SlowSolver().plan(request)


def test_records_round_trip_and_survive_a_new_store(store_url):
    first = Store(store_url)
    key, request, response = solved()
    plan, created = first.put_plan(key, request, response)
    profile, profile_new = first.put_profile(Profile.model_validate(profile_body()))
    run = first.put_run(RunReport.model_validate(run_report_body()))
    first.close()

    second = Store(store_url)  # same database, new engine: what was written is read back exactly
    try:
        assert created and profile_new
        got = second.get_plan(key)
        assert got.request == request and got.response == response and got.created_at == plan.created_at and got.cached
        assert second.get_profile(profile.id).profile == profile.profile
        assert second.get_run(run.id).report == run.report and second.get_run(run.id).created_at == run.created_at
        assert second.list_runs(limit=10, offset=0).items[0].measured_step_time_s == run.report.measured_step_time_s
        for missing in (second.get_plan("0" * 32), second.get_profile("0" * 32), second.get_run("0" * 32)):
            assert missing is None
    finally:
        second.close()


@pytest.mark.parametrize("kind", ["plan", "profile"])
def test_content_hash_dedupes(store, kind):
    if kind == "plan":
        key, request, response = solved()
        first, new1 = store.put_plan(key, request, response)
        again, new2 = store.put_plan(key, request, response)
        total = store.list_plans(model=None, gpu=None, limit=10, offset=0).total
    else:
        first, new1 = store.put_profile(Profile.model_validate(profile_body()))
        again, new2 = store.put_profile(Profile.model_validate(profile_body()))
        total = store.list_profiles(model=None, limit=10, offset=0).total
    assert (new1, new2, total) == (True, False, 1)
    assert again.id == first.id and again.created_at == first.created_at


# (model, gpu) of the stored plans; the listing cases filter and page over them.
STORED = [
    ("tiny-gpt", "h100-sxm5-80gb"),
    ("tiny-gpt", "a100-sxm4-80gb"),
    ("gpt3-125m", "h100-sxm5-80gb"),
    ("gpt3-125m", "h100-sxm5-80gb"),
    ("gpt3-350m", "b200-sxm-192gb"),
]


@pytest.mark.parametrize(
    ("model", "gpu", "expected"),
    [
        (None, None, 5),
        ("tiny-gpt", None, 2),
        (None, "h100-sxm5-80gb", 3),
        ("gpt3-125m", "h100-sxm5-80gb", 2),
        ("gpt3-350m", "h100-sxm5-80gb", 0),
        ("no-such-model", None, 0),
        ("tiny\x00gpt", None, 0),  # PostgreSQL text cannot hold NUL: must still be a plain miss
    ],
)
def test_listing_filters_and_pages(store, model, gpu, expected):
    ids = []
    for i, (m, g) in enumerate(STORED):
        key, request, response = solved(model=m, cluster__gpu=g, training__global_batch_size=8 * (i + 1))
        ids.append(store.put_plan(key, request, response)[0].id)
    matching = [pid for pid, (m, g) in zip(ids, STORED) if (model is None or m == model) and (gpu is None or g == gpu)]
    pages = [store.list_plans(model=model, gpu=gpu, limit=2, offset=o) for o in range(0, 6, 2)]
    assert all(p.total == expected for p in pages)
    listed = [item.id for p in pages for item in p.items]
    assert listed == list(reversed(matching))  # newest first, each exactly once across pages
    assert all(item.model == (model or item.model) and item.gpu == (gpu or item.gpu) for p in pages for item in p.items)


def test_delete(store):
    key, request, response = solved()
    store.put_plan(key, request, response)
    assert store.delete_plan(key) and store.get_plan(key) is None and not store.delete_plan(key)
    _, created = store.put_plan(key, request, response)  # the same request stores anew
    assert created and store.list_plans(model=None, gpu=None, limit=10, offset=0).total == 1


@pytest.mark.parametrize(
    "device",
    ["x" * 1000, "cuda\x00H100", "Ünïcødé GPU 🚀"],  # longer than the old String(256); NUL; non-ASCII
    ids=["long", "nul", "unicode"],
)
def test_free_form_text_is_kept_exactly(store, device):
    profile, _ = store.put_profile(Profile.model_validate(profile_body(device=device)))
    assert store.get_profile(profile.id).profile.device == device
    assert store.list_profiles(model=None, limit=10, offset=0).total == 1
    run = store.put_run(RunReport.model_validate({**run_report_body(), "model": device, "device": device}))
    assert store.get_run(run.id).report.model == device


THREADS, RUNS_EACH, SHARED_PLANS = 8, 15, 6


def test_concurrent_writers_lose_and_duplicate_nothing(store):
    """THREADS threads each add RUNS_EACH runs and all race to store the same SHARED_PLANS plans and
    profile: every run is there once, every plan was created by exactly one thread."""
    plans = [solved(training__global_batch_size=8 * (i + 1)) for i in range(SHARED_PLANS)]
    profile = Profile.model_validate(profile_body())
    created: list[str] = []
    run_ids: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    barrier = threading.Barrier(THREADS)

    def writer(t: int) -> None:
        try:
            barrier.wait()
            for i in range(RUNS_EACH):
                run = store.put_run(RunReport.model_validate(run_report_body(step_time=t + i / 100)))
                key, request, response = plans[(t + i) % SHARED_PLANS]
                stored, new = store.put_plan(key, request, response)
                assert stored.id == key and stored.response == response
                _, new_profile = store.put_profile(profile)
                with lock:
                    run_ids.append(run.id)
                    created.extend([key] * new + ["profile"] * new_profile)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    listed = store.list_runs(limit=500, offset=0)
    assert listed.total == THREADS * RUNS_EACH and sorted(r.id for r in listed.items) == sorted(run_ids)
    assert sorted(created) == sorted([key for key, _, _ in plans] + ["profile"])
    assert store.list_plans(model=None, gpu=None, limit=500, offset=0).total == SHARED_PLANS
    assert store.list_profiles(model=None, limit=10, offset=0).total == 1


# ---- PostgreSQL only --------------------------------------------------------------------------


def test_readyz_follows_the_database(pg_server, pg_url):
    app = create_app(Settings(database_url=pg_url))
    with TestClient(app) as client:
        assert client.get("/readyz").status_code == 200
        pg_server.admin(f'DROP DATABASE "{pg_url.rsplit("/", 1)[1]}" WITH (FORCE)')
        r = client.get("/readyz")
        assert (
            r.status_code == 503
            and r.json()["status"] == "unavailable"
            and "store: OperationalError" in r.json()["detail"]
        )
        pg_server.admin(f'CREATE DATABASE "{pg_url.rsplit("/", 1)[1]}"')  # back: ready again, same app
        assert client.get("/readyz").status_code == 200


@pytest.mark.parametrize(("require", "outcome"), [(None, pytest.skip.Exception), ("1", pytest.fail.Exception)])
def test_missing_postgres_skips_unless_required(monkeypatch, require, outcome):
    if require is None:
        monkeypatch.delenv(REQUIRE_ENV, raising=False)
    else:
        monkeypatch.setenv(REQUIRE_ENV, require)
    with pytest.raises(outcome, match="apt-get install -y postgresql"):
        unavailable("PostgreSQL server binaries not found")


@pytest.mark.parametrize("backend", BACKENDS)
def test_workers_create_the_tables_at_once(request, tmp_path, backend):
    """Several `meshplan serve` workers open one empty database at the same moment: none fails
    (PostgreSQL without the advisory lock: duplicate key in pg_type_typname_nsp_index)."""
    for trial in range(4):
        url = (
            f"sqlite:///{tmp_path / f'{trial}.db'}"
            if backend == "sqlite"
            else request.getfixturevalue("pg_server").new_database()
        )
        barrier = threading.Barrier(8)
        errors: list[str] = []

        def open_store(barrier: threading.Barrier = barrier, url: str = url, errors: list[str] = errors) -> None:
            barrier.wait()
            try:
                Store(url).close()
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(repr(exc)[:300])

        threads = [threading.Thread(target=open_store) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors


def test_serve_on_postgres_keeps_a_plan_across_a_restart(tmp_path, pg_url):
    server = LiveServer(tmp_path, tmp_path / "unused.db", database_url=pg_url).start()
    try:
        with MeshplanClient(server.url) as mc:
            assert mc.healthy()
            stored = mc.plan(plan_request())
            assert not stored.cached and stored.response.plans
    finally:
        server.stop()
    server.start()  # new process, same PostgreSQL database
    try:
        with MeshplanClient(server.url) as mc:
            again = mc.get_plan(stored.id)
            assert again.response == stored.response and again.created_at == stored.created_at
            assert mc.plan(plan_request()).cached and mc.list_plans().total == 1
            r = httpx.get(f"{server.url}/readyz", timeout=5)
            assert r.status_code == 200
    finally:
        server.stop()
    assert not (tmp_path / "unused.db").exists()
