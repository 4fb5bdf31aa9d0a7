"""Property-based fuzz of every operation against the app's own OpenAPI schema (schemathesis): no
5xx, and every response conforms to the schema (status code, content type, body, headers).

Examples per operation are bounded so the run stays inside the test budget; the real planner
answers, with the server's solver time capped at 1 s."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.api_support import make_app

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]

_folder = tempfile.mkdtemp(prefix="meshplan-fuzz-")
atexit.register(shutil.rmtree, _folder, ignore_errors=True)
app = make_app(
    Path(_folder), max_solver_time_s=1.0, max_solver_workers=1, max_gpus=64, max_layers=64
)  # big searches are refused (422) rather than run
schema = schemathesis.openapi.from_asgi("/openapi.json", app)


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_server_error_and_responses_match_the_schema(case):
    case.call_and_validate(checks=CHECKS)
