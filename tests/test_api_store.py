"""Storage and settings: SQLite durability settings, content-hash ids, records surviving a new
Store on the same file, and start-up validation of every MESHPLAN_ variable."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from api.settings import load_settings
from api.store import Store, request_key
from planner.specs import PlanRequest, Profile, RunReport
from planner.specs.errors import MeshplanError
from tests.api_support import SlowSolver, plan_request, profile_body, run_report_body


def test_sqlite_runs_in_wal_with_full_sync(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/sub/dir/m.db")  # parent folders are created
    with store.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA synchronous")).scalar() == 2  # FULL
    store.close()


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (plan_request(), plan_request(), True),
        (plan_request(), {**plan_request(), "parallel": {}}, True),  # default written out
        (plan_request(), plan_request(training__precision="bf16"), True),  # default written out
        (plan_request(), dict(reversed(list(plan_request().items()))), True),  # key order
        (plan_request(), plan_request(top_k=3), False),
        (plan_request(), plan_request(training__seq_len=64), False),
        (plan_request(), plan_request(parallel={"tp": 2}), False),
    ],
)
def test_request_key_is_a_content_hash(a, b, same):
    ka, kb = request_key(PlanRequest.model_validate(a)), request_key(PlanRequest.model_validate(b))
    assert (ka == kb) is same and len(ka) == 32


def test_records_survive_a_new_store_on_the_same_file(tmp_path):
    url = f"sqlite:///{tmp_path}/m.db"
    first = Store(url)
    request = PlanRequest.model_validate(plan_request())
    response = SlowSolver().plan(request)
    plan, created = first.put_plan(request_key(request), request, response)
    profile, _ = first.put_profile(Profile.model_validate(profile_body()))
    run = first.put_run(RunReport.model_validate(run_report_body()))
    first.close()

    second = Store(url)
    assert created and second.get_plan(plan.id).response == response
    assert second.get_profile(profile.id).profile == profile.profile
    assert second.get_run(run.id).report == run.report
    again, created_again = second.put_plan(plan.id, request, response)
    assert not created_again and again.created_at == plan.created_at
    assert second.list_plans(model=None, gpu=None, limit=10, offset=0).total == 1
    second.close()


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("MESHPLAN_PORT", "0", "greater than or equal to 1"),
        ("MESHPLAN_PORT", "http", "valid integer"),
        ("MESHPLAN_WORKERS", "0", "greater than or equal to 1"),
        ("MESHPLAN_DATABASE_URL", "not a url", "not a SQLAlchemy URL"),
        ("MESHPLAN_MAX_BODY_BYTES", "10", "greater than or equal to 1024"),
        ("MESHPLAN_MAX_SOLVER_TIME_S", "-1", "greater than 0"),
        ("MESHPLAN_SOLVER_CONCURRENCY", "0", "greater than or equal to 1"),
        ("MESHPLAN_LOG_LEVEL", "loud", "'critical', 'error', 'warning', 'info' or 'debug'"),
        ("MESHPLAN_API_TOKEN", "abc", "at least 16 characters"),
    ],
)
def test_bad_setting_names_the_variable(monkeypatch, variable, value, message):
    monkeypatch.setenv(variable, value)
    with pytest.raises(MeshplanError) as err:
        load_settings()
    assert err.value.field == variable and message in err.value.message and variable in err.value.fix


@pytest.mark.parametrize(
    ("variable", "value", "attribute", "expected"),
    [
        ("MESHPLAN_PORT", "9000", "port", 9000),
        ("MESHPLAN_LOG_LEVEL", "DEBUG", "log_level", "debug"),
        ("MESHPLAN_MAX_TOP_K", "5", "max_top_k", 5),
        (
            "MESHPLAN_DATABASE_URL",
            "postgresql+psycopg://u:p@db.internal/meshplan",
            "database_url",
            "postgresql+psycopg://u:p@db.internal/meshplan",
        ),
    ],
)
def test_good_setting_is_read(monkeypatch, variable, value, attribute, expected):
    monkeypatch.setenv(variable, value)
    assert getattr(load_settings(), attribute) == expected


SERVICE_MODULES = [
    "app",
    "body_limit",
    "client",
    "deps",
    "metrics",
    "problems",
    "schemas",
    "serve_cli",
    "settings",
    "solver",
    "store",
    "routes/plans",
    "routes/exports",
    "routes/estimates",
    "routes/profiles",
    "routes/runs",
    "routes/catalog",
    "routes/health",
]


@pytest.mark.parametrize("module", SERVICE_MODULES)
def test_nothing_a_client_sends_is_executed_or_unpickled(module):
    from tests.api_support import ROOT

    source = (ROOT / "api" / f"{module}.py").read_text()
    for banned in (
        "pickle",
        "marshal",
        "eval(",
        "exec(",
        "yaml.load(",
        "yaml.unsafe_load",
        "subprocess",
        "os.system",
        "PickleType",
    ):
        assert banned not in source, f"api/{module}.py uses {banned}"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql+nosuchdriver://u:secret@127.0.0.1/db", "no database driver"),
        ("sqlite:////proc/no-such-dir/meshplan.db", "cannot open the database"),
    ],
)
def test_database_that_cannot_open_names_the_variable(url, message):
    with pytest.raises(MeshplanError) as err:
        Store(url)
    assert err.value.field == "MESHPLAN_DATABASE_URL" and message in err.value.message
    assert "secret" not in str(err.value)
