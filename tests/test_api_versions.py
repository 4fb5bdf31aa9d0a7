"""The store's schema is Alembic's (migrations applied at start-up), and its answers are versioned by
the planner's cost model. Every case runs on a SQLite file and on a real PostgreSQL server
(tests/pg_support.py): a database made by the schema before Alembic is upgraded with its rows kept
and its plans marked stale; the first revision is that schema exactly and the last one is the
models'; after the cost model changes, the same request is solved again instead of being served
from the store."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import setuptools
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, inspect, text

from api.app import create_app
from api.settings import Settings
from api.store import (
    FIRST_REVISION,
    Base,
    Store,
    alembic_config,
    canonical_json,
    content_id,
    make_engine,
    migrate,
    request_key,
)
from planner.specs import PlanRequest, version
from tests.api_support import plan_request
from tests.pg_support import pg_server, pg_url  # noqa: F401 - fixtures

GOLDEN = Path(__file__).parent / "golden"
BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(params=BACKENDS)
def url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'meshplan.db'}"
    return request.getfixturevalue("pg_url")


def old_schema(url: str) -> None:
    """Create the tables with the DDL meshplan ran before Alembic (Base.metadata.create_all of schema 1)."""
    engine = create_engine(url)
    ddl = (GOLDEN / "store" / f"schema-0001.{engine.dialect.name}.sql").read_text()
    with engine.begin() as conn:
        for statement in ddl.split(";"):
            sql = "\n".join(line for line in statement.splitlines() if not line.startswith("--")).strip()
            if sql:
                conn.exec_driver_sql(sql)
    engine.dispose()


#: The request behind tests/golden/plans/schema1-tiny-gpt-response.json (written by meshplan before schema 2).
OLD_REQUEST = {
    "model": "tiny-gpt",
    "cluster": {"gpu": "a100-sxm4-40gb", "num_nodes": 2, "gpus_per_node": 2},
    "training": {"global_batch_size": 16, "seq_len": 128},
    "parallel": {"tp": 2, "pp": 2},
    "top_k": 1,
}


def insert_old_plan(url: str) -> str:
    """One row as the old store wrote it (id = hash of the request alone, response of schema 1)."""
    request = PlanRequest.model_validate(OLD_REQUEST).model_dump(mode="json")
    response = (GOLDEN / "plans" / "schema1-tiny-gpt-response.json").read_text()
    best = json.loads(response)["plans"][0]["estimate"]
    row = {
        "id": content_id(request),
        "created_at": "2026-11-01T00:00:00.000000Z",
        "model": "tiny-gpt",
        "gpu": "a100-sxm4-40gb",
        "num_gpus": 4,
        "status": "OPTIMAL",
        "step_time_s": best["step_time_s"],
        "tokens_per_s": best["tokens_per_s"],
        "mfu": best["mfu"],
        "fits": True,
        "request_json": canonical_json(request),
        "response_json": response,
    }
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text(f"INSERT INTO plans ({', '.join(row)}) VALUES ({', '.join(':' + k for k in row)})"), row)
    engine.dispose()
    return row["id"]


def schema_of(url: str) -> dict:
    engine = create_engine(url)
    with engine.connect() as conn:
        insp = inspect(conn)
        tables = sorted(t for t in insp.get_table_names() if t != "alembic_version")
        out = {
            t: {
                "columns": [(c["name"], str(c["type"]), c["nullable"]) for c in insp.get_columns(t)],
                "pk": insp.get_pk_constraint(t)["constrained_columns"],
                "indexes": sorted(
                    (i["name"], tuple(i["column_names"]), bool(i["unique"])) for i in insp.get_indexes(t)
                ),
            }
            for t in tables
        }
    engine.dispose()
    return out


def head_revision() -> str:
    return ScriptDirectory.from_config(alembic_config(None)).get_current_head()


def test_a_database_of_the_schema_before_alembic_is_upgraded_and_its_plan_marked_stale(url):
    old_schema(url)
    old_id = insert_old_plan(url)
    store = Store(url)  # start-up: stamp at the first revision, upgrade to the head
    try:
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == head_revision()
        old = store.get_plan(old_id)
        assert old is not None and old.stale and old.cost_model_version == 0
        plan = old.response.plans[0]  # the schema-1 plan, read as schema 2
        assert plan.mesh.shape == [2, 1, 2] and plan.gpu.id == "a100-sxm4-40gb" and plan.inputs.cost_model_version == 0
        [summary] = store.list_plans(model=None, gpu=None, limit=10, offset=0).items
        assert summary.id == old_id and summary.stale and summary.cost_model_version == 0
    finally:
        store.close()
    # The service does not serve the old answer for the same request: it solves and stores a current one.
    with TestClient(create_app(Settings(database_url=url)), raise_server_exceptions=False) as client:
        r = client.post("/v1/plans", json=OLD_REQUEST)
        assert r.status_code == 201, r.text
        new = r.json()
        assert new["id"] != old_id and not new["cached"] and not new["stale"]
        assert new["cost_model_version"] == version.COST_MODEL_VERSION
        assert new["response"]["plans"][0]["parallel"]["tp"] == 2
        again = client.get(f"/v1/plans/{old_id}").json()
        assert again["stale"] and again["request"] == new["request"]
        listed = {p["id"]: p["stale"] for p in client.get("/v1/plans").json()["items"]}
        assert listed == {old_id: True, new["id"]: False}
        assert client.get(f"/v1/plans/{old_id}/trace").status_code == 200  # still readable and drawable


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_first_revision_is_the_schema_before_alembic_and_the_last_is_the_models(request, tmp_path, backend):
    def fresh(name: str) -> str:
        return (
            f"sqlite:///{tmp_path / name}"
            if backend == "sqlite"
            else request.getfixturevalue("pg_server").new_database()
        )

    migrated, made_by_ddl = fresh("a.db"), fresh("b.db")
    engine = make_engine(migrated)
    migrate(engine, FIRST_REVISION)
    old_schema(made_by_ddl)
    assert schema_of(migrated) == schema_of(made_by_ddl)
    migrate(engine)
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    engine.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
def test_after_the_cost_model_changes_the_same_request_is_solved_again(request, tmp_path, monkeypatch, backend):
    db = f"sqlite:///{tmp_path / 'm.db'}" if backend == "sqlite" else request.getfixturevalue("pg_url")
    with TestClient(create_app(Settings(database_url=db)), raise_server_exceptions=False) as client:
        first = client.post("/v1/plans", json=plan_request())
        assert first.status_code == 201 and not first.json()["stale"]
        assert client.post("/v1/plans", json=plan_request()).status_code == 200  # same model: from the store
        monkeypatch.setattr(version, "COST_MODEL_VERSION", version.COST_MODEL_VERSION + 1)  # the cost model changes
        second = client.post("/v1/plans", json=plan_request())
        assert second.status_code == 201, second.text  # solved, not served from the store
        body = second.json()
        assert body["id"] != first.json()["id"] and not body["cached"] and not body["stale"]
        assert body["cost_model_version"] == body["response"]["cost_model_version"] == version.COST_MODEL_VERSION
        assert all(p["inputs"]["cost_model_version"] == version.COST_MODEL_VERSION for p in body["response"]["plans"])
        old = client.get(f"/v1/plans/{first.json()['id']}").json()
        assert old["stale"] and old["cost_model_version"] == version.COST_MODEL_VERSION - 1
        assert client.post("/v1/plans", json=plan_request()).status_code == 200  # the new answer is now the cached one


def test_the_request_key_includes_the_cost_model_version():
    request = PlanRequest.model_validate(plan_request())
    keys = {v: request_key(request, v) for v in (0, 1, 2, version.COST_MODEL_VERSION)}
    assert len(set(keys.values())) == len({0, 1, 2, version.COST_MODEL_VERSION})
    assert request_key(request) == keys[version.COST_MODEL_VERSION]


def test_the_migrations_ship_inside_the_package():
    """An installed wheel and the Docker image (`pip install .`) carry the migrations Store applies."""
    root = Path(__file__).resolve().parents[1]
    setuptools_cfg = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = set(setuptools.find_packages(str(root), include=setuptools_cfg["packages"]["find"]["include"]))
    assert {"api.migrations", "api.migrations.versions"} <= packages
    assert "migrations/script.py.mako" in setuptools_cfg["package-data"]["api"]
    revisions = sorted(p.name for p in (root / "api" / "migrations" / "versions").glob("0*.py"))
    assert revisions[0].startswith(FIRST_REVISION) and len(revisions) >= 2
    assert any(r.startswith(head_revision()) for r in revisions)
