"""Two plans side by side (issue 13): `meshplan diff PLAN_A PLAN_B` and `GET /v1/plans/{id}/compare/{other_id}`
show settings, step time by cause and memory per stage of two real plans; every value is the plans'
own; unknown ids are 404 problems."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import planner
from api.client import MeshplanAPIError, MeshplanClient
from planner.answer.compare import PlanComparison, compare_plans
from planner.specs import Plan, PlanResponse, TimeBreakdown
from tests.api_support import make_app, plan_request

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = "application/problem+json"


def _expected(a: Plan, b: Plan) -> dict[str, tuple]:
    """What the comparison must say, read off the plans directly (written apart from planner.answer.compare)."""
    out = {
        "tp": (a.parallel.tp, b.parallel.tp),
        "pp": (a.parallel.pp, b.parallel.pp),
        "dp": (a.parallel.dp, b.parallel.dp),
        "micro_batch_size": (a.parallel.micro_batch_size, b.parallel.micro_batch_size),
        "zero_stage": (a.parallel.zero_stage, b.parallel.zero_stage),
        "ep": (a.parallel.ep, b.parallel.ep),
        "schedule": (a.parallel.schedule, b.parallel.schedule),
        "stage_layers": (a.parallel.stage_layers, b.parallel.stage_layers),
        "step_time_s": (a.estimate.step_time_s, b.estimate.step_time_s),
        "compute_s": (a.estimate.breakdown.compute_s, b.estimate.breakdown.compute_s),
        "tp_comm_s": (a.estimate.breakdown.tp_comm_s, b.estimate.breakdown.tp_comm_s),
        "pp_bubble_s": (a.estimate.breakdown.pp_bubble_s, b.estimate.breakdown.pp_bubble_s),
        "dp_sync_s": (a.estimate.breakdown.dp_sync_s, b.estimate.breakdown.dp_sync_s),
        "peak_memory_gib": (a.estimate.peak_memory_gib, b.estimate.peak_memory_gib),
    }
    for i in range(max(a.parallel.pp, b.parallel.pp)):
        out[f"stage {i} total_gib"] = tuple(
            p.estimate.memory_per_stage[i].total_gib if i < p.parallel.pp else None for p in (a, b)
        )
    return out


def _check(comparison: PlanComparison, a: Plan, b: Plan) -> None:
    rows = {r.name: r for r in [*comparison.settings, *comparison.time, *comparison.memory]}
    for name, (va, vb) in _expected(a, b).items():
        assert (rows[name].a, rows[name].b) == (va, vb), name
        assert rows[name].same == (va == vb), name
    step = rows["step_time_s"]
    assert step.delta == pytest.approx(b.estimate.step_time_s - a.estimate.step_time_s)
    assert step.ratio == pytest.approx(b.estimate.step_time_s / a.estimate.step_time_s)
    # the time rows are the whole breakdown: they add up to each plan's step time
    causes = [r for r in comparison.time if r.name in TimeBreakdown.model_fields]
    assert len(causes) == len(TimeBreakdown.model_fields) == 8  # cp_comm_s since cost model 14, ep_comm_s since 16
    assert sum(r.a for r in causes) == pytest.approx(a.estimate.step_time_s, rel=1e-6)
    assert sum(r.b for r in causes) == pytest.approx(b.estimate.step_time_s, rel=1e-6)


@pytest.fixture(scope="module")
def plans() -> tuple[PlanResponse, Plan]:
    """A searched response (top 2) and an estimate with a deeper pipeline: two real, different plans."""
    response = planner.plan(plan_request())
    other = planner.estimate_plan(plan_request(parallel={"tp": 2, "pp": 4, "micro_batch_size": 1}))
    assert response.plans and other.parallel.pp != response.plans[0].parallel.pp
    return response, other


def test_compare_plans_holds_the_plans_own_numbers(plans):
    response, other = plans
    for a, b in [(response.plans[0], other), (other, response.plans[1]), (response.plans[0], response.plans[0])]:
        _check(compare_plans(a, b), a, b)
    same = compare_plans(response.plans[0], response.plans[0])
    assert not same.differences


def _cli(*args: str, columns: str = "100") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": columns}
    return subprocess.run(
        [sys.executable, "-m", "api.cli", *args],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_meshplan_diff_of_two_files(plans, tmp_path: Path):
    response, other = plans
    fa, fb = tmp_path / "response.json", tmp_path / "other.yaml"
    fa.write_text(response.model_dump_json())
    fb.write_text(__import__("yaml").safe_dump(other.model_dump(mode="json")))
    out = _cli("diff", str(fa), str(fb), "--index", "1", "--json")
    assert out.returncode == 0, out.stderr
    comparison = PlanComparison.model_validate_json(out.stdout)
    _check(comparison, response.plans[1], other)
    assert comparison.a.endswith("#1")
    table = _cli("diff", str(fa), str(fb), columns="80")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()

    def row(name: str) -> str:
        return next(line for line in lines if line.startswith(f"│ {name} "))

    a, b = response.plans[0], other
    assert f"{a.estimate.step_time_s:.4g}" in row("step_time_s") and f"{b.estimate.step_time_s:.4g}" in row(
        "step_time_s"
    )
    assert ",".join(map(str, b.parallel.stage_layers)) in row("stage_layers")
    assert f"{b.estimate.memory_per_stage[3].total_gib:.2f}" in row("stage 3 total_gib")
    assert "…" not in table.stdout


@pytest.mark.parametrize(
    "args, field",
    [
        (["/nonexistent.json", "{b}"], "PLAN_A"),
        (["{a}", "{a}", "--other-index", "7"], "PLAN_B"),
    ],
)
def test_meshplan_diff_bad_input_names_the_argument(plans, tmp_path: Path, args, field):
    fa = tmp_path / "a.json"
    fa.write_text(plans[0].model_dump_json())
    out = _cli("diff", *[x.format(a=fa, b=fa) for x in args])
    assert out.returncode == 2 and field in out.stderr and "Traceback" not in out.stderr


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with TestClient(make_app(tmp_path_factory.mktemp("compare")), raise_server_exceptions=False) as c:
        yield c


def test_compare_route_and_client(client):
    a = client.post("/v1/plans", json=plan_request()).json()
    b = client.post("/v1/plans", json=plan_request(parallel={"pp": 4})).json()
    r = client.get(f"/v1/plans/{a['id']}/compare/{b['id']}", params={"index": 1, "other_index": 0})
    assert r.status_code == 200, r.text
    pa, pb = (PlanResponse.model_validate(x["response"]) for x in (a, b))
    _check(PlanComparison.model_validate(r.json()), pa.plans[1], pb.plans[0])
    mc = MeshplanClient(http=client)
    typed = mc.compare(a["id"], b["id"], index=1)
    assert typed == PlanComparison.model_validate(r.json()) and typed.a == f"{a['id']}#1"
    schema = client.get("/openapi.json").json()
    op = schema["paths"]["/v1/plans/{plan_id}/compare/{other_id}"]["get"]
    assert op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/PlanComparison")
    assert {p["name"] for p in op["parameters"]} >= {"plan_id", "other_id", "index", "other_index"}


@pytest.mark.parametrize(
    "which, query, field", [("a", {}, None), ("b", {}, None), (None, {"other_index": 9}, "query.other_index")]
)
def test_compare_route_errors_are_problems(client, which, query, field):
    known = client.post("/v1/plans", json=plan_request()).json()["id"]
    ids = {"a": ("0" * 16, known), "b": (known, "f" * 16), None: (known, known)}[which]
    r = client.get(f"/v1/plans/{ids[0]}/compare/{ids[1]}", params=query)
    assert r.status_code == (404 if which or field else 200) and r.headers["content-type"].startswith(PROBLEM), r.text
    body = r.json()
    assert body["status"] == 404 and body["detail"]
    if which:
        assert ("0" * 16 if which == "a" else "f" * 16) in body["detail"]
    if field:
        assert body["errors"][0]["field"] == field
    with pytest.raises(MeshplanAPIError) as err:
        MeshplanClient(http=client).compare(*ids, **query)
    assert err.value.status == 404
