"""A Hugging Face config.json as a model (issue 23): the real files under tests/data/hf_configs/ (sources in its
README.md) read into ModelSpecs, through the Python API, the CLI (`--model FILE`) and REST
(`{"model": {"hf_config": ...}}`); an unsupported architecture or field is an error naming it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from planner.specs import PlanRequest
from planner.specs.catalog import MODELS
from planner.specs.errors import validation_errors
from planner.specs.hf import from_hf_config
from planner.workload.analytic import num_active_parameters, num_parameters
from tests.api_support import make_app

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "hf_configs"


def config(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


#: (file, the catalog model it is, fields in which the file's release differs from the catalog's)
SAME_AS_CATALOG = [
    ("llama-3.1-8b", "llama3.1-8b", {}),
    ("qwen3-30b-a3b", "qwen3-30b-a3b", {}),
    ("qwen3-235b-a22b", "qwen3-235b-a22b", {"max_seq_len": 262144}),  # the 2507 release's context
    ("olmoe-1b-7b-0125-instruct", "olmoe-1b-7b", {}),  # the 0125 release has the 0924 shapes
]


@pytest.mark.parametrize(("file", "catalog", "differs"), SAME_AS_CATALOG)
def test_config_reads_as_the_catalog_model(file: str, catalog: str, differs: dict) -> None:
    spec = from_hf_config(config(file), name=catalog)
    assert spec == MODELS[catalog].model_copy(update=differs)


#: (file, total parameters, active, published): the files of models not in the catalog, counted.
COUNTS = [
    # Qwen/Qwen3-8B model card: "Number of Parameters: 8.2B".
    ("qwen3-8b", 8_190_735_360, 8_190_735_360, 8.2e9),
    # meta-llama/Llama-3.2-3B model card: 3.21B parameters; tied embeddings.
    ("llama-3.2-3b-instruct", 3_212_749_824, 3_212_749_824, 3.21e9),
]


@pytest.mark.parametrize(("file", "total", "active", "published"), COUNTS)
def test_dense_config_counts(file: str, total: int, active: int, published: float) -> None:
    spec = from_hf_config(config(file))
    assert (num_parameters(spec), num_active_parameters(spec)) == (total, active)
    assert total == pytest.approx(published, rel=0.005)


#: (config.json, the key the error names, words of the message, words of the fix)
BAD = [
    ({"model_type": "phi3", "architectures": ["Phi3ForCausalLM"]}, "model_type", "model_type 'phi3'", "qwen3_moe"),
    ({**config("qwen3-8b"), "hidden_act": "gelu"}, "hidden_act", "'hidden_act' = 'gelu'", "ModelSpec"),
    ({**config("llama-3.1-8b"), "mlp_bias": True}, "mlp_bias", "'mlp_bias' = True", "ModelSpec"),
    ({**config("qwen3-30b-a3b"), "mlp_only_layers": [5]}, "mlp_only_layers", "'mlp_only_layers' = [5]", "ModelSpec"),
    (
        {k: v for k, v in config("qwen3-30b-a3b").items() if k != "num_experts"},
        "num_experts",
        "no 'num_experts'",
        "complete",
    ),
    # issue 23: top-k above the experts, MoE fields on a dense family, a width the spec refuses
    ({**config("qwen3-30b-a3b"), "num_experts_per_tok": 129}, "num_experts_per_tok", "top_k=129 exceeds", "top_k ≤"),
    ({**config("olmoe-1b-7b-0125-instruct"), "num_experts": 0}, "num_experts", "num_experts", ""),
    (
        {**config("qwen3-8b"), "num_experts": 8, "num_experts_per_tok": 2},
        "num_experts",
        "dense architecture",
        "qwen3_moe",
    ),
    ({**config("llama-3.1-8b"), "num_local_experts": 8}, "num_local_experts", "'llama' is a dense", "drop"),
    ({**config("qwen3-30b-a3b"), "moe_intermediate_size": 0}, "moe_intermediate_size", "", ""),
    ({**config("qwen3-8b"), "num_key_value_heads": 5}, "num_key_value_heads", "num_kv_heads=5", "divisor"),
]


@pytest.mark.parametrize(("hf", "key", "what", "in_fix"), BAD)
def test_unsupported_architecture_or_field_is_named(hf: dict, key: str, what: str, in_fix: str) -> None:
    body = {
        "model": {"hf_config": hf},
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
        "training": {"global_batch_size": 8, "seq_len": 1024},
    }
    with pytest.raises(ValidationError) as exc:
        PlanRequest.model_validate(body)
    [error] = validation_errors(exc.value, model=PlanRequest)
    assert error["field"] == f"model.hf_config.{key}" and what in error["message"] and in_fix in error["fix"], error


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "api.cli", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


CLUSTER = ["--gpu", "h100-sxm5-80gb", "--nodes", "1", "--gpus-per-node", "8", "--global-batch-size", "64"]


@pytest.mark.parametrize(
    ("file", "code", "says"),
    [
        ("llama-3.1-8b.json", 0, '"name": "llama-3.1-8b"'),  # a dense config estimates; named by its file
        ("qwen3-8b.json", 2, "model.qk_norm"),  # the default stack's runtime builds no per-head QK norm: refused
        ("qwen3-30b-a3b.json", 2, "training.stack"),  # an MoE on a stack without a MoE block: refused
        ("../../../README.md", 2, "--model"),  # not a JSON document
    ],
)
def test_cli_model_file(file: str, code: int, says: str) -> None:
    stack = ["--stack", "deepspeed"] if "a3b" in file else []  # the default stack (meshplan) runs MoE
    out = _cli("estimate", "--model", str(DATA / file), *CLUSTER, "--seq-len", "2048", "--tp", "8", "--json", *stack)
    assert out.returncode == code, out.stderr
    assert says in (out.stdout if code == 0 else out.stderr)


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with TestClient(make_app(tmp_path_factory.mktemp("hf")), raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize(
    ("model", "status", "field"),
    [
        ({"hf_config": config("llama-3.2-3b-instruct"), "name": "llama-3.2-3b"}, 200, None),
        ({"hf_config": config("olmoe-1b-7b-0125-instruct")}, 422, "training.stack"),
        ({"hf_config": {"model_type": "gemma3"}}, 422, "model.hf_config.model_type"),
        ({"hf_config": config("qwen3-8b"), "revision": "main"}, 422, "model"),
    ],
)
def test_rest_takes_hf_config(client, model: dict, status: int, field: str | None) -> None:
    body = {
        "model": model,
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
        "training": {"global_batch_size": 64, "seq_len": 2048},
        "parallel": {"tp": 8, "pp": 1, "micro_batch_size": 1},
    }
    if status == 422 and field == "training.stack":  # a stack without a MoE block (meshplan's runs MoE)
        body["training"]["stack"] = "deepspeed"
    r = client.post("/v1/estimates", json=body)
    assert r.status_code == status, r.text
    if field is None:
        assert r.json()["model"]["name"] == "llama-3.2-3b"
    else:
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["errors"][0]["field"] == field, r.json()
