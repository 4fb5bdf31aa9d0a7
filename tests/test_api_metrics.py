"""/metrics: Prometheus text with request counts and latency by route template and status, solver
time and plan-cache hits, checked against the requests this test made."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.api_support import make_app, plan_request


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_count_requests_solves_and_cache_hits(tmp_path):
    with TestClient(make_app(tmp_path)) as c:
        assert c.post("/v1/plans", json=plan_request()).status_code == 201
        assert c.post("/v1/plans", json=plan_request()).status_code == 200
        assert c.post("/v1/plans", json=plan_request()).status_code == 200
        for plan_id in ("a" * 32, "b" * 32):
            assert c.get(f"/v1/plans/{plan_id}").status_code == 404
        assert c.get("/nowhere").status_code == 404
        r = c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    m = samples(r.text)
    req = "meshplan_http_requests_total"
    assert m[(req, (("method", "POST"), ("route", "/v1/plans"), ("status", "201")))] == 1
    assert m[(req, (("method", "POST"), ("route", "/v1/plans"), ("status", "200")))] == 2
    # Labelled by the route template, not the raw path (two ids, one series).
    assert m[(req, (("method", "GET"), ("route", "/v1/plans/{plan_id}"), ("status", "404")))] == 2
    assert not re.search(r'route="/v1/plans/a{32}"', r.text)
    assert m[("meshplan_http_request_duration_seconds_count", (("method", "POST"), ("route", "/v1/plans")))] == 3
    assert m[("meshplan_plan_cache_total", (("result", "hit"),))] == 2
    assert m[("meshplan_plan_cache_total", (("result", "miss"),))] == 1
    assert m[("meshplan_solver_duration_seconds_count", (("kind", "plan"),))] == 1
    assert m[("meshplan_solver_duration_seconds_sum", (("kind", "plan"),))] > 0
    assert m[("meshplan_solver_inflight", ())] == 0
