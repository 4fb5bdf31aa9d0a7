"""Every bad input gets a message and a fix, on the command line (exit code 2, naming the flag the user
typed) and over REST (422 problem body naming the field path): one table of bad inputs × both."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.api_support import make_app, plan_request

ROOT = Path(__file__).resolve().parents[1]
CLI_BASE = ["--model", "tiny-gpt", "--gpu", "h100-sxm5-80gb", "--global-batch-size", "32", "--seq-len", "128"]

CASES = [
    # (id, command, flags, request change (path → value), flag named, field path named, words the fix must hold)
    (
        "batch-zero",
        "plan",
        ["--global-batch-size", "0"],
        {"training__global_batch_size": 0},
        "--global-batch-size",
        "training.global_batch_size",
        ["from 1 to", "sequences per optimizer step"],
    ),
    (
        "seq-len-not-a-number",
        "plan",
        ["--seq-len", "abc"],
        {"training__seq_len": "abc"},
        "--seq-len",
        "training.seq_len",
        ["whole number"],
    ),
    (
        "nodes-zero",
        "estimate",
        ["--nodes", "0"],
        {"cluster__num_nodes": 0},
        "--nodes",
        "cluster.num_nodes",
        ["from 1 to"],
    ),
    ("top-k-too-big", "plan", ["--top-k", "99"], {"top_k": 99}, "--top-k", "top_k", ["from 1 to 20"]),
    (
        "time-limit-zero",
        "plan",
        ["--time-limit-s", "0"],
        {"options__time_limit_s": 0},
        "--time-limit-s",
        "options.time_limit_s",
        ["> 0", "≤ 600"],
    ),
    (
        "unknown-schedule",
        "estimate",
        ["--schedule", "sideways"],
        {"parallel__schedule": "sideways"},
        "--schedule",
        "parallel.schedule",
        ["one of", "gpipe", "1f1b"],
    ),
    (
        "unknown-precision",
        "plan",
        ["--precision", "fp64"],
        {"training__precision": "fp64"},
        "--precision",
        "training.precision",
        ["bf16", "fp32"],
    ),
    (
        "zero-stage-4",
        "estimate",
        ["--zero-stage", "4"],
        {"parallel__zero_stage": 4},
        "--zero-stage",
        "parallel.zero_stage",
        ["from 0 to 3"],
    ),
    (
        "stage-layers-entry",
        "estimate",
        ["--pp", "2", "--stage-layers", "4,x"],
        {"parallel__pp": 2, "parallel__stage_layers": [4, "x"]},
        "--stage-layers",
        "parallel.stage_layers.1",
        ["whole number"],
    ),
    (
        "tp-not-dividing-heads",
        "estimate",
        ["--tp", "3"],
        {"parallel__tp": 3},
        "--tp",
        "parallel.tp",
        ["choose a tp that divides"],
    ),
    (
        "seq-len-over-model",
        "plan",
        ["--seq-len", "100000"],
        {"training__seq_len": 100000},
        "--seq-len",
        "training.seq_len",
        ["≤"],
    ),
]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with TestClient(make_app(tmp_path_factory.mktemp("fixes")), raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize("command, flags, change, flag, path, words", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_cli_names_the_flag_and_the_fix(command, flags, change, flag, path, words):
    out = subprocess.run(
        [sys.executable, "-m", "api.cli", command, *CLI_BASE, *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"},
        timeout=120,
    )
    assert out.returncode == 2, (out.stdout, out.stderr)
    line = next((x for x in out.stderr.splitlines() if x.startswith(f"error: {flag}:")), None)
    assert line is not None, out.stderr  # one line per error (not wrapped at 80 columns when piped)
    message, _, fix = line.partition(". Fix: ")
    assert fix and all(w in fix or w in message for w in words), line
    assert (
        "Traceback" not in out.stderr and "Input should" not in out.stderr
    )  # pydantic's own words do not reach the user


@pytest.mark.parametrize("command, flags, change, flag, path, words", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_rest_names_the_field_path_and_the_fix(client, command, flags, change, flag, path, words):
    r = client.post("/v1/plans" if command == "plan" else "/v1/estimates", json=plan_request(**change))
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json", r.text
    errors = {e["field"]: e for e in r.json()["errors"]}
    assert path in errors, r.json()
    e = errors[path]
    assert e["fix"] and all(w in e["fix"] or w in e["message"] for w in words), e
    assert "Input should" not in r.text


QUERY_CASES = [
    ("/v1/plans?limit=0", "query.limit", "from 1 to 500"),
    ("/v1/plans?offset=-1", "query.offset", "from 0 to"),
    ("/v1/plans/x/trace?index=-1", "query.index", "from 0 to 19"),
]


@pytest.mark.parametrize("url, field, words", QUERY_CASES)
def test_rest_query_parameters_name_the_fix(client, url, field, words):
    r = client.get(url)
    assert r.status_code == 422, r.text
    e = {e["field"]: e for e in r.json()["errors"]}[field]
    assert words in e["fix"], e


def test_a_misspelt_field_is_named_with_the_likely_intended_one(client, tmp_path):
    r = client.post("/v1/plans", json=plan_request(training__optimzer="adam"))
    assert r.status_code == 422
    e = {e["field"]: e for e in r.json()["errors"]}["training.optimzer"]
    assert "'optimizer'" in e["fix"], e
    f = tmp_path / "req.json"
    f.write_text(__import__("json").dumps(plan_request(training__optimzer="adam")))
    out = subprocess.run(
        [sys.executable, "-m", "api.cli", "plan", "--request", str(f)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert out.returncode == 2 and f"error: training.optimzer (in {f})" in out.stderr and "'optimizer'" in out.stderr, (
        out.stderr
    )


@pytest.mark.parametrize(
    "option, value, words",
    [
        ("job_name", "Bad_Name", "lowercase letters"),
        ("rdzv_port", "0", "from 1 to 65535"),
        ("command", "'unclosed", "quote"),
    ],
)
def test_export_options_name_the_flag_or_query_parameter_and_the_fix(client, tmp_path, option, value, words):
    from api.exporters.cli import OPTION_FLAGS

    stored = client.post("/v1/plans", json=plan_request()).json()
    r = client.get(f"/v1/plans/{stored['id']}/export/slurm", params={option: value})
    assert r.status_code == 422
    e = {e["field"]: e for e in r.json()["errors"]}[f"query.{option}"]
    assert words in e["fix"] + e["message"], e
    plan = tmp_path / "plan.json"
    plan.write_text(__import__("json").dumps(stored["response"]))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "api.cli",
            "export",
            "--plan",
            str(plan),
            "--format",
            "slurm",
            OPTION_FLAGS[option],
            value,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert out.returncode == 2 and f"error: {OPTION_FLAGS[option]}:" in out.stderr and "Fix: " in out.stderr, out.stderr
    assert words in out.stderr and "Traceback" not in out.stderr
