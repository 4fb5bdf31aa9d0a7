"""One declaration per external interface, checked: `meshplan run` and the worker `python -m
runtime.train` offer the same worker options (runtime.args), and the export options are the same on
the command line (`meshplan export`), in REST (the export route's query model) and in Python
(ExportOptions)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import typer
import typer.main
from fastapi.testclient import TestClient

from api.exporters import ExportOptions, export
from planner.answer.io import plan_from_data
from runtime.args import WORKER_ARGS, worker_argv
from tests.api_support import make_app, plan_request

#: The worker's options (the public surface of `python -m runtime.train` and of `meshplan run`).
WORKER_FLAGS = [
    "--plan",
    "--plan-index",
    "--steps",
    "--data",
    "--data-dtype",
    "--report",
    "--checkpoint-dir",
    "--save-every",
    "--resume",
    "--seed",
    "--lr",
    "--max-grad-norm",
    "--profile",
    "--network",
    "--compile",
]
LAUNCH_FLAGS = ["--nproc-per-node", "--nnodes", "--node-rank", "--rdzv-endpoint"]


def _click(register, name: str | None):
    """The click command `name` that ``register`` adds (None: the only one)."""
    app = typer.Typer(add_completion=False)
    register(app)
    return typer.main.get_command(app) if name is None else typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]


def test_run_and_worker_offer_the_same_worker_options():
    from runtime import cli as runtime_cli
    from runtime.args import parser

    worker = [o for a in parser()._actions for o in a.option_strings if o.startswith("--") and o != "--help"]
    run = [p.opts[0] for p in _click(runtime_cli.register, None).params if p.opts[0] != "--help"]
    assert worker == WORKER_FLAGS
    assert run == WORKER_FLAGS + LAUNCH_FLAGS


def test_meshplan_run_forwards_every_worker_option_to_the_worker():
    """Each worker option given to `meshplan run` (its own click parser) reaches the worker's argparse
    parser with the same value, through the argv `meshplan run` builds for torchrun."""
    from runtime import cli as runtime_cli
    from runtime.train import parse_args

    samples = {int: "3", float: "0.25", str: "uint32", Path: "some/file.json"}
    argv = [w for a in WORKER_ARGS for w in ((a.flag,) if a.type is bool else (a.flag, samples[a.type]))]
    ctx = _click(runtime_cli.register, None).make_context("meshplan run", argv)
    launch = {p[2:].replace("-", "_") for p in LAUNCH_FLAGS}
    worker = parse_args(worker_argv({k: v for k, v in ctx.params.items() if k not in launch}))
    for a in WORKER_ARGS:
        expected = True if a.type is bool else a.type(samples[a.type])  # a switch given is on
        assert str(getattr(worker, a.dest)) == str(expected), a.flag
    assert worker.max_grad_norm == 0.25  # was missing from `meshplan run`
    # A switch not given stays off on the worker too (no "--compile False" that argparse would reject).
    ctx = _click(runtime_cli.register, None).make_context("meshplan run", ["--plan", "p.json"])
    assert parse_args(worker_argv({k: v for k, v in ctx.params.items() if k not in launch})).compile is False


# ---- export options -------------------------------------------------------------------------


def test_export_cli_flags_are_the_export_options():
    from api.exporters import cli as export_cli

    command = _click(export_cli.register, "export")
    params = {p.opts[0]: p for p in command.params}
    assert set(export_cli.OPTION_FLAGS) == set(ExportOptions.model_fields)
    for field, flag in export_cli.OPTION_FLAGS.items():
        assert flag in params, flag
        assert params[flag].default == ExportOptions.model_fields[field].default, flag


@pytest.fixture(scope="module")
def client():
    with TestClient(make_app(Path(tempfile.mkdtemp(prefix="meshplan-iface-"))), raise_server_exceptions=False) as c:
        yield c


def test_export_query_parameters_are_the_export_options(client):
    op = client.get("/openapi.json").json()["paths"]["/v1/plans/{plan_id}/export/{fmt}"]["get"]
    query = {p["name"]: p for p in op["parameters"] if p["in"] == "query"}
    assert set(query) == set(ExportOptions.model_fields) | {"index"}
    for name, info in ExportOptions.model_fields.items():
        assert query[name]["schema"].get("default") == info.default, name
        assert query[name].get("description") or query[name]["schema"].get("description"), name


def test_export_query_gives_the_same_export_as_the_options(client):
    stored = client.post("/v1/plans", json=plan_request()).json()
    plan = plan_from_data(stored["response"], index=1)
    given = {
        "job_name": "tiny-run",
        "partition": "gpu",
        "image": "reg.example/meshplan:1",
        "rdzv_port": 1234,
        "max_restarts": 2,
        "time_limit": "1:00:00",
        "plan_path": "/plans/p.json",
        "command": "train.py --x 1",
        "nodes": plan.cluster.num_nodes,
        "gpus_per_node": plan.cluster.gpus_per_node,
        "rdzv_endpoint": "node0",
        "namespace": "ml",
        "runtime_ref": "torch-rt",
        "strict": "false",
    }
    assert set(given) == set(ExportOptions.model_fields)
    for fmt in ("slurm", "torchrun", "kubeflow-trainjob"):
        r = client.get(f"/v1/plans/{stored['id']}/export/{fmt}", params={**given, "index": 1, "unknown": "ignored"})
        assert r.status_code == 200, r.text
        assert r.text == export(plan, fmt, ExportOptions(**given)).content
