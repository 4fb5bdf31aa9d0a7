"""``/v1/calibrations`` and ``calibration_id`` (issue 11 §4): calibrations are stored content-addressed,
listed and read back (SQLite and PostgreSQL), a request naming one is priced exactly as the same request
carrying it inline, and bad input is a 4xx problem naming the field and the fix that loses nothing
stored. Real planner, real store."""

from __future__ import annotations

import json
import re

import pytest
from fastapi.testclient import TestClient

from api.client import MeshplanAPIError, MeshplanClient
from api.deps import get_solver
from api.solver import PlannerSolver
from api.store import Store
from planner.api import estimate_plan
from planner.specs import Calibration, Plan, PlanRequest
from tests.api_support import make_app, plan_request, profile_body
from tests.pg_support import pg_server, pg_url  # noqa: F401 - fixtures

PROBLEM = "application/problem+json"
PINS = {"tp": 2, "pp": 2, "dp": 2, "micro_batch_size": 1}


def calibration_body(**changes: object) -> dict:
    """What `meshplan calibrate --out cal.json` writes: residuals fitted on measured runs."""
    body: dict = {
        "gpu": "h100-sxm5-80gb",
        "stack": "meshplan",
        "residuals": {"compute_scale": 1.25, "memory_scale": 1.1, "kernel_overhead_us": 12.0, "comm_scale": 1.5},
        "runs": [
            {
                "label": "tiny-gpt tp2 pp2 dp2",
                "measured_step_time_s": 0.02,
                "predicted_before_s": 0.015,
                "predicted_after_s": 0.019,
            },
            {
                "label": "tiny-gpt tp1 pp1 dp8",
                "measured_step_time_s": 0.01,
                "predicted_before_s": 0.008,
                "predicted_after_s": 0.0105,
            },
        ],
        "in_sample_mape": 0.05,
        "cross_validated_mape": 0.08,
        "notes": ["fitted on 2 runs"],
    }
    body.update(changes)
    return body


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    app = make_app(tmp_path_factory.mktemp("calibrations"))
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


@pytest.fixture(scope="module")
def stored(client) -> dict:
    r = client.post("/v1/calibrations", json=calibration_body())
    assert r.status_code in (200, 201), r.text
    return r.json()


# ---- store, list, read ---------------------------------------------------------------------


def test_a_calibration_is_stored_with_its_id_and_read_back(client, stored):
    assert re.fullmatch(r"[0-9a-f]{32}", stored["id"]) and stored["created_at"]
    sent = Calibration.model_validate(calibration_body())
    back = Calibration.model_validate(stored)
    assert back.model_copy(update={"id": None, "created_at": None}) == sent  # nothing else changed
    r = client.get(f"/v1/calibrations/{stored['id']}")
    assert r.status_code == 200 and r.json() == stored


@pytest.mark.parametrize(
    ("name", "body", "same"),
    [
        ("the same fit again", calibration_body(), True),
        ("keys in another order", dict(reversed(list(calibration_body().items()))), True),
        (
            "defaults written out",
            calibration_body(schema_version=1, residuals={**calibration_body()["residuals"], "step_overhead_s": 0.0}),
            True,
        ),
        ("uploaded as fetched (id, created_at)", "stored", True),
        ("another residual", calibration_body(residuals={"compute_scale": 1.3}), False),
        ("another gpu", calibration_body(gpu="a100-sxm4-80gb"), False),
        ("another stack", calibration_body(stack="megatron"), False),
    ],
)
def test_ids_are_content_hashes(client, stored, name, body, same):
    r = client.post("/v1/calibrations", json=stored if body == "stored" else body)
    assert r.status_code == (200 if same else 201), r.text
    assert (r.json()["id"] == stored["id"]) is same
    if same:
        assert r.json() == stored  # the stored one, unchanged (its created_at too)


@pytest.mark.parametrize(
    ("query", "expect"),
    [
        ("", {"h100-sxm5-80gb/meshplan", "a100-sxm4-80gb/meshplan", "h100-sxm5-80gb/megatron"}),
        ("?gpu=h100-sxm5-80gb", {"h100-sxm5-80gb/meshplan", "h100-sxm5-80gb/megatron"}),
        ("?stack=megatron", {"h100-sxm5-80gb/megatron"}),
        ("?gpu=a100-sxm4-80gb&stack=megatron", set()),
        ("?gpu=cpu", set()),
    ],
)
def test_list_shows_gpu_stack_runs_and_errors(client, stored, query, expect):
    for body in (calibration_body(gpu="a100-sxm4-80gb"), calibration_body(stack="megatron")):
        assert client.post("/v1/calibrations", json=body).status_code in (200, 201)
    page = client.get(f"/v1/calibrations{query}").json()
    assert {f"{i['gpu']}/{i['stack']}" for i in page["items"]} >= expect
    assert all(f"{i['gpu']}/{i['stack']}" in expect for i in page["items"]) and page["total"] == len(page["items"])
    for item in page["items"]:
        full = client.get(f"/v1/calibrations/{item['id']}").json()
        assert set(item) == {"id", "created_at", "gpu", "stack", "runs", "in_sample_mape", "cross_validated_mape"}
        assert item["runs"] == len(full["runs"]) == 2
        assert (item["in_sample_mape"], item["cross_validated_mape"]) == (
            full["in_sample_mape"],
            full["cross_validated_mape"],
        )


def test_list_pages_newest_first(tmp_path):
    with TestClient(make_app(tmp_path)) as c:
        ids = [c.post("/v1/calibrations", json=calibration_body(notes=[f"fit {i}"])).json()["id"] for i in range(3)]
        first, second = c.get("/v1/calibrations?limit=2").json(), c.get("/v1/calibrations?limit=2&offset=2").json()
        assert [i["id"] for i in first["items"] + second["items"]] == ids[::-1]
        assert (first["total"], first["limit"], second["offset"]) == (3, 2, 2)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_calibrations_survive_a_new_store_on_both_backends(request, tmp_path, backend):
    url = f"sqlite:///{tmp_path / 'c.db'}" if backend == "sqlite" else request.getfixturevalue("pg_url")
    cal = Calibration.model_validate(calibration_body(gpu="h100\x00odd", notes=["naïve ✓"]))
    first = Store(url)
    try:
        stored, created = first.put_calibration(cal)
        assert created and first.put_calibration(cal) == (stored, False)
    finally:
        first.close()
    second = Store(url)
    try:
        assert second.get_calibration(stored.id) == stored and stored.gpu == "h100\x00odd"  # exact in the JSON
        [item] = second.list_calibrations(gpu="h100\x00odd", stack=None, limit=10, offset=0).items
        assert (item.id, item.runs, item.cross_validated_mape) == (stored.id, 2, 0.08)
        assert second.get_calibration("0" * 32) is None
    finally:
        second.close()


# ---- calibration_id on plans and estimates ------------------------------------------------


def test_an_estimate_naming_a_calibration_is_priced_as_with_it_inline(client, stored):
    """The service's answer for ``calibration_id`` is planner.api.estimate_plan of the same request
    carrying the stored calibration inline (whatever the cost model does with it)."""
    r = client.post("/v1/estimates", json=plan_request(parallel=PINS, calibration_id=stored["id"]))
    assert r.status_code == 200, r.text
    inline = PlanRequest.model_validate(plan_request(parallel=PINS, calibration=stored))
    assert Plan.model_validate(r.json()) == estimate_plan(inline)
    inline_r = client.post("/v1/estimates", json=plan_request(parallel=PINS, calibration=stored))
    assert inline_r.status_code == 200 and inline_r.json() == r.json()


def test_a_plan_naming_a_calibration_hands_the_solver_the_stored_one(tmp_path):
    seen: list[PlanRequest] = []

    class Recording(PlannerSolver):  # the real planner; records what it was handed
        def plan(self, request):
            seen.append(request)
            return super().plan(request)

    app = make_app(tmp_path)
    app.dependency_overrides[get_solver] = Recording
    with TestClient(app) as c:
        cal = c.post("/v1/calibrations", json=calibration_body()).json()
        other = c.post("/v1/calibrations", json=calibration_body(residuals={"compute_scale": 2.0})).json()
        r = c.post("/v1/plans", json=plan_request(calibration_id=cal["id"]))
        assert r.status_code == 201, r.text
        assert r.json()["request"]["calibration_id"] == cal["id"] and r.json()["request"]["calibration"] is None
        assert seen[-1].calibration == Calibration.model_validate(cal) and seen[-1].calibration_id is None
        again = c.post("/v1/plans", json=plan_request(calibration_id=cal["id"]))
        assert (again.status_code, again.json()["id"]) == (200, r.json()["id"]) and len(seen) == 1  # from the store
        uncalibrated = c.post("/v1/plans", json=plan_request())
        recalibrated = c.post("/v1/plans", json=plan_request(calibration_id=other["id"]))
        assert len({r.json()["id"], uncalibrated.json()["id"], recalibrated.json()["id"]}) == 3
        assert seen[-1].calibration == Calibration.model_validate(other)


# ---- bad input: 4xx problems naming the field and the fix, nothing stored lost ------------

ERROR_CASES = [
    # (name, method, path, body, status, field)
    (
        "both calibration and id (plan)",
        "POST",
        "/v1/plans",
        plan_request(calibration=calibration_body(), calibration_id="ab" * 16),
        422,
        "calibration_id",
    ),
    (
        "both calibration and id (estimate)",
        "POST",
        "/v1/estimates",
        plan_request(parallel=PINS, calibration=calibration_body(), calibration_id="ab" * 16),
        422,
        "calibration_id",
    ),
    (
        "unknown calibration id (plan)",
        "POST",
        "/v1/plans",
        plan_request(calibration_id="feedface"),
        422,
        "calibration_id",
    ),
    (
        "unknown calibration id (estimate)",
        "POST",
        "/v1/estimates",
        plan_request(parallel=PINS, calibration_id="feedface"),
        422,
        "calibration_id",
    ),
    ("calibration id too long", "POST", "/v1/plans", plan_request(calibration_id="x" * 65), 422, "calibration_id"),
    (
        "bad inline residual",
        "POST",
        "/v1/estimates",
        plan_request(parallel=PINS, calibration=calibration_body(residuals={"comm_scale": 0})),
        422,
        "calibration.residuals.comm_scale",
    ),
    (
        "missing gpu",
        "POST",
        "/v1/calibrations",
        {k: v for k, v in calibration_body().items() if k != "gpu"},
        422,
        "gpu",
    ),
    (
        "zero compute scale",
        "POST",
        "/v1/calibrations",
        calibration_body(residuals={"compute_scale": 0}),
        422,
        "residuals.compute_scale",
    ),
    (
        "negative overhead",
        "POST",
        "/v1/calibrations",
        calibration_body(residuals={"kernel_overhead_us": -1}),
        422,
        "residuals.kernel_overhead_us",
    ),
    ("unknown residual", "POST", "/v1/calibrations", calibration_body(residuals={"fudge": 2}), 422, "residuals.fudge"),
    ("negative error", "POST", "/v1/calibrations", calibration_body(in_sample_mape=-0.1), 422, "in_sample_mape"),
    (
        "run without a measurement",
        "POST",
        "/v1/calibrations",
        calibration_body(runs=[{"label": "x", "predicted_before_s": 1, "predicted_after_s": 1}]),
        422,
        "runs.0.measured_step_time_s",
    ),
    ("gpu too long", "POST", "/v1/calibrations", calibration_body(gpu="g" * 65), 422, "gpu"),
    ("not an object", "POST", "/v1/calibrations", [1, 2], 422, None),
    ("bad list query", "GET", "/v1/calibrations?limit=0", None, 422, "query.limit"),
    ("unknown calibration", "GET", "/v1/calibrations/0123456789abcdef", None, 404, None),
    ("id too long", "GET", "/v1/calibrations/" + "a" * 65, None, 422, "path.calibration_id"),
]


@pytest.mark.parametrize(
    ("name", "method", "path", "body", "status", "field"), ERROR_CASES, ids=[c[0] for c in ERROR_CASES]
)
def test_bad_input_is_a_problem_naming_the_field_and_nothing_stored_is_lost(
    client, stored, name, method, path, body, status, field
):
    before = client.get("/v1/calibrations?limit=500").json()
    r = client.request(method, path, json=body)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == PROBLEM
    problem = r.json()
    assert problem["status"] == status and problem["detail"]
    if field is not None:
        [error] = [e for e in problem["errors"] if e["field"] == field] or [None]
        assert error is not None, problem
        assert error["message"] and error["fix"], error
    if field == "calibration_id" and "unknown" in name:
        assert "POST /v1/calibrations" in problem["errors"][0]["fix"]
    assert client.get("/v1/calibrations?limit=500").json() == before
    assert client.get(f"/v1/calibrations/{stored['id']}").json() == stored


NON_FINITE = [
    # (path, body with the number 123.25 where the bad one goes, field named)
    ("/v1/calibrations", calibration_body(in_sample_mape=123.25), "in_sample_mape"),
    ("/v1/calibrations", calibration_body(residuals={"compute_scale": 123.25}), "residuals.compute_scale"),
    (
        "/v1/plans",
        plan_request(calibration=calibration_body(cross_validated_mape=123.25)),
        "calibration.cross_validated_mape",
    ),
    (
        "/v1/plans",
        plan_request(
            calibration=calibration_body(runs=[{**calibration_body()["runs"][0], "measured_step_time_s": 123.25}])
        ),
        "calibration.runs.0.measured_step_time_s",
    ),
    (
        "/v1/profiles",
        {**profile_body(), "layers": [{**profile_body()["layers"][0], "fwd_time_s": 123.25}]},
        "layers.0.fwd_time_s",
    ),
    (
        "/v1/plans",
        plan_request(
            profile={
                **profile_body("NVIDIA H100 80GB HBM3"),
                "layers": [{**layer, "bwd_time_s": 123.25} for layer in profile_body()["layers"]],
            }
        ),
        "profile.layers.0.bwd_time_s",
    ),
]


@pytest.mark.parametrize("literal", ["Infinity", "-Infinity", "NaN", "1e999"])
@pytest.mark.parametrize(("path", "body", "field"), NON_FINITE)
def test_numbers_json_cannot_hold_are_refused_not_500(client, literal, path, body, field):
    """Python's JSON reader takes Infinity, NaN and 1e999 (→ inf); a field without an upper bound keeps
    it, and the content hash (canonical JSON) cannot: a 422 naming the field, never a 500."""
    raw = json.dumps(body).replace("123.25", literal)
    assert literal in raw
    r = client.post(path, content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.headers["content-type"] == PROBLEM, r.text
    errors = r.json()["errors"]
    assert field in [e["field"] for e in errors], errors
    assert all(e["fix"] for e in errors)


# ---- the Python client -------------------------------------------------------------------


def test_client_uploads_lists_and_reads_calibrations(client, stored):
    mc = MeshplanClient(http=client)
    cal = mc.upload_calibration(calibration_body())
    assert cal.id == stored["id"] and cal == Calibration.model_validate(stored)
    assert mc.get_calibration(cal.id) == cal
    assert cal.id in [i.id for i in mc.list_calibrations(gpu="h100-sxm5-80gb", stack="meshplan").items]
    plan = mc.estimate(PlanRequest.model_validate(plan_request(parallel=PINS, calibration_id=cal.id)))
    assert plan == estimate_plan(PlanRequest.model_validate(plan_request(parallel=PINS, calibration=stored)))
    with pytest.raises(MeshplanAPIError) as err:
        mc.get_calibration("0" * 32)
    assert err.value.status == 404
    with pytest.raises(MeshplanAPIError) as err:
        mc.upload_calibration(calibration_body(residuals={"compute_scale": 0}))
    assert err.value.status == 422 and err.value.problem.errors[0].field == "residuals.compute_scale"
