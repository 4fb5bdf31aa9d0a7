"""The cost oracle (``bench/cost_oracle.py``) that refactors of the planner are checked against: it prices
every class of a request, so it must be a function of the request alone — the same bytes twice, in one
process or a fresh one — and it must see the host's measured classes (a host request whose dispatch is set
prices differently from the same request without it)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.bench_support import ROOT, bench_module

oracle = bench_module("cost_oracle")

REQUESTS = dict(oracle.requests())


def test_the_oracle_is_a_function_of_the_request(tmp_path):
    name = "tiny-gpt host 4"
    first = json.dumps(oracle.oracle(name, REQUESTS[name]), sort_keys=True, default=str)
    again = json.dumps(oracle.oracle(name, REQUESTS[name]), sort_keys=True, default=str)
    assert first == again
    out = tmp_path / "o.json"
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "cost_oracle.py"), "--only", name, "--out", str(out)],
        check=True,
        capture_output=True,
    )
    fresh = json.loads(out.read_text())
    assert json.dumps(fresh[0], sort_keys=True, default=str) == first


def test_the_oracle_sees_the_hosts_measured_classes():
    name = "tiny-gpt host 4"
    body = REQUESTS[name]
    plain = {**body, "cluster": {**body["cluster"], "gpu": {**body["cluster"]["gpu"], "host_dispatch": None}}}
    measured, unmeasured = oracle.oracle(name, body), oracle.oracle(name, plain)
    assert len(measured["classes"]) == len(unmeasured["classes"]) > 0
    assert measured["classes"] != unmeasured["classes"]
