"""Bad mixture-of-experts input (issue 23) is a clear error naming the field, the same table through the service
(a 422 problem body from ``POST /v1/estimates``) and the CLI (exit 2 from ``meshplan estimate --request FILE``, and
``--model config.json`` naming the config.json key): EP not dividing the experts or the data-parallel ranks, top-k
above the experts, MoE fields on a dense family (a Hugging Face config.json of a dense model_type, a ModelSpec of the
GPT family), EP on a dense model, an ETP that is neither 1 nor tp, an unsupported architecture or field, a MoE model
on a stack without a MoE block. Each row also runs once unchanged but for the fault, which must be accepted, so a
row cannot pass on an error it did not make."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from planner.specs.catalog import MODELS
from tests.api_support import make_app

ROOT = Path(__file__).resolve().parents[1]
HF = ROOT / "tests" / "data" / "hf_configs"


def hf(name: str, **changes: Any) -> dict:
    cfg = json.loads((HF / f"{name}.json").read_text())
    return {"hf_config": {**cfg, **changes}}


def spec(name: str, **changes: Any) -> dict:
    return {**MODELS[name].model_dump(mode="json"), **changes}


def body(model: Any, stack: str = "megatron", **parallel: Any) -> dict:
    return {
        "model": model,
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 2, "gpus_per_node": 8},
        "training": {"global_batch_size": 256, "seq_len": 4096, "stack": stack},
        "parallel": {"tp": 1, "pp": 1, "micro_batch_size": 1, **parallel},
    }


Q3 = "qwen3-30b-a3b"
MIXTRAL = spec("mixtral-8x7b")
# fmt: off
#: id → (the request with the fault, the same request without it, the field the error names)
TABLE: dict[str, tuple[dict, dict, str]] = {
    "ep-not-dividing-experts": (body(hf(Q3), ep=3, dp=16), body(hf(Q3), ep=4, dp=16), "parallel.ep"),
    "ep-not-dividing-dp": (
        body(MIXTRAL, tp=8, dp=2, ep=4, sequence_parallel=True), body(MIXTRAL, tp=8, dp=2, ep=2, sequence_parallel=True),
        "parallel.ep",
    ),
    "top-k-above-experts-hf": (
        body(hf(Q3, num_experts_per_tok=129)), body(hf(Q3, num_experts_per_tok=128)), "model.hf_config.num_experts_per_tok"
    ),
    "top-k-above-experts-spec": (
        body({**MIXTRAL, "moe": {**MIXTRAL["moe"], "top_k": 9}}), body({**MIXTRAL, "moe": {**MIXTRAL["moe"], "top_k": 8}}),
        "model.moe.top_k",
    ),
    "moe-fields-on-dense-hf-family": (
        body(hf("qwen3-8b", num_experts=8, num_experts_per_tok=2)), body(hf("qwen3-8b")), "model.hf_config.num_experts"
    ),
    "moe-on-dense-spec-family": (
        body({**MIXTRAL, "family": "gpt", "activation": "gelu", "norm": "layernorm"}), body(MIXTRAL), "model.moe"
    ),
    "ep-on-dense-model": (body("llama3-8b", ep=2, dp=16), body("llama3-8b", ep=1, dp=16), "parallel.ep"),
    "etp-neither-1-nor-tp": (
        body(MIXTRAL, tp=4, dp=4, ep=2, etp=2, sequence_parallel=True),
        body(MIXTRAL, tp=4, dp=4, ep=2, etp=4, sequence_parallel=True),
        "parallel.etp",
    ),
    "unsupported-architecture": (body(hf(Q3, model_type="jamba")), body(hf(Q3)), "model.hf_config.model_type"),
    "unsupported-field": (body(hf(Q3, hidden_act="gelu")), body(hf(Q3)), "model.hf_config.hidden_act"),
    "moe-on-a-stack-without-moe": (body(hf(Q3), stack="deepspeed"), body(hf(Q3)), "training.stack"),
}
# fmt: on


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with TestClient(make_app(tmp_path_factory.mktemp("moe-inputs")), raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize("case", list(TABLE))
def test_rest_problem_names_the_field(client, case: str) -> None:
    bad, good, field = TABLE[case]
    ok = client.post("/v1/estimates", json=good)
    assert ok.status_code == 200, ok.text
    r = client.post("/v1/estimates", json=bad)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    error = r.json()["errors"][0]
    assert error["field"] == field, r.json()
    assert error["message"] and error["fix"], error


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "api.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("case", list(TABLE))
def test_cli_exits_2_naming_the_field(tmp_path, case: str) -> None:
    bad, good, field = TABLE[case]
    (tmp_path / "good.json").write_text(json.dumps(good))
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    ok = _cli("estimate", "--request", str(tmp_path / "good.json"), "--json")
    assert ok.returncode == 0, ok.stderr
    out = _cli("estimate", "--request", str(tmp_path / "bad.json"))
    assert out.returncode == 2, out.stdout + out.stderr
    # the CLI names a pin by its flag (a request file's value is that flag's default), a model field by its path in
    # the file
    named = f"error: {FLAGS[field]}:" if field in FLAGS else f"error: {field} (in {tmp_path / 'bad.json'}):"
    assert named in out.stderr and "Fix:" in out.stderr, out.stderr


#: the fields the CLI names by their flag
FLAGS = {"parallel.ep": "--ep", "parallel.etp": "--etp", "training.stack": "--stack"}


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"num_experts_per_tok": 129}, "num_experts_per_tok"),
        ({"model_type": "jamba"}, "model_type"),
        ({"num_experts": 12}, "num_experts"),  # 12 experts: top-8 fits, but EP 8 (pinned) does not divide them
    ],
)
def test_cli_model_config_json_names_the_key(tmp_path, changes: dict, key: str) -> None:
    """``--model config.json``: the error names the file and the config.json key (or the flag the fault is in)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(hf(Q3, **changes)["hf_config"]))
    args = ["--gpu", "h100-sxm5-80gb", "--nodes", "2", "--global-batch-size", "256", "--seq-len", "4096"]
    out = _cli("estimate", "--model", str(path), *args, "--stack", "megatron", "--tp", "1", "--ep", "8")
    assert out.returncode == 2, out.stdout + out.stderr
    where = f"--model {path} field {key}:" if key != "num_experts" else "--ep: ep=8 does not divide the model's 12"
    assert where in out.stderr, out.stderr
