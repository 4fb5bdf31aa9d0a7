"""`meshplan plan` / `meshplan estimate` in a subprocess: tables, --json read back by load_plan,
--request files, and bad input → exit code 2 with the field named and no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planner.io import load_plan
from planner.specs import Plan, PlanResponse

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--nodes", "1", "--gpus-per-node", "8",
         "--global-batch-size", "256", "--seq-len", "8192"]


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "api.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_plan_json_round_trips_through_load_plan(tmp_path: Path) -> None:
    out = run("plan", *SMALL, "--top-k", "2", "--json")
    assert out.returncode == 0, out.stderr
    resp = PlanResponse.model_validate_json(out.stdout)
    assert resp.solver.status == "OPTIMAL" and len(resp.plans) == 2
    f = tmp_path / "plan.json"
    f.write_text(out.stdout)
    assert load_plan(f) == resp.plans[0]


def test_plan_table_and_request_file(tmp_path: Path) -> None:
    req = {"model": "llama3-8b", "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
           "training": {"global_batch_size": 256, "seq_len": 8192}, "parallel": {"tp": 2}}
    f = tmp_path / "req.yaml"
    import yaml

    f.write_text(yaml.safe_dump(req))
    out = run("plan", "--request", str(f))
    assert out.returncode == 0, out.stderr
    assert "OPTIMAL" in out.stdout and "why:" in out.stdout and "step s" in out.stdout


def test_estimate_flags_and_json() -> None:
    out = run("estimate", *SMALL, "--tp", "2", "--pp", "2", "--micro-batch-size", "1", "--schedule", "gpipe",
              "--recompute", "full", "--zero-stage", "1", "--sequence-parallel", "--stage-layers", "15,17", "--json")
    assert out.returncode == 0, out.stderr
    p = Plan.model_validate_json(out.stdout)
    c = p.parallel
    assert (c.tp, c.pp, c.dp, c.schedule, c.recompute, c.zero_stage, c.sequence_parallel, c.stage_layers) == \
        (2, 2, 2, "gpipe", "full", 1, True, [15, 17])
    table = run("estimate", *SMALL, "--tp", "8")
    assert table.returncode == 0 and "compute" in table.stdout and "fits" in table.stdout


@pytest.mark.parametrize("args,field", [
    (["plan", *SMALL, "--tp", "3"], "--tp"),
    (["estimate", *SMALL, "--pp", "2", "--stage-layers", "1,x"], "--stage-layers"),
    (["plan", "--gpu", "h100-sxm5-80gb", "--global-batch-size", "8", "--seq-len", "128"], "--model"),
    (["plan", *SMALL[:2], "--gpu", "tpu-v9", "--global-batch-size", "8", "--seq-len", "128"], "--gpu"),
    (["estimate", *SMALL, "--schedule", "sideways"], "--schedule"),
    (["plan", "--request", "/nonexistent.json"], "--request"),
])
def test_bad_input_exits_2_naming_the_field(args: list[str], field: str) -> None:
    out = run(*args)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert field in out.stderr
    assert "Traceback" not in out.stderr + out.stdout


#: What the everyday commands must not load (start-up time: see bench/bench_cli_startup.py).
HEAVY = ("sqlalchemy", "fastapi", "starlette", "uvicorn", "pydantic_settings", "torch")
TINY = ["--model", "tiny-gpt", "--gpu", "h100-sxm5-80gb", "--global-batch-size", "32", "--seq-len", "128"]


@pytest.mark.parametrize("args", [["models"], ["gpus"], ["plan", *TINY, "--top-k", "1"], ["estimate", *TINY, "--tp", "2"],
                                  ["plan", "--help"]], ids=lambda a: " ".join(a[:2]))
def test_everyday_commands_do_not_import_the_service_or_torch(args: list[str]) -> None:
    """The command runs for real in a fresh interpreter (as the `meshplan` script does); afterwards
    none of the service's or the runtime's heavy packages is loaded."""
    code = ("import sys, api.cli\ntry:\n    api.cli.main(sys.argv[1:])\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout[-500:]
