"""A Hugging Face config.json as a model (issue 23): the real files under tests/data/hf_configs/ (sources in its
README.md) read into ModelSpecs, through the Python API, the CLI (`--model FILE`) and REST
(`{"model": {"hf_config": ...}}`); an unsupported architecture or field is an error naming it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal
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
    ("qwen2.5-7b", "qwen2.5-7b", {}),  # qwen2: q/k/v biases
    ("mixtral-8x7b-v0.1", "mixtral-8x7b", {}),
    ("mixtral-8x22b-v0.1", "mixtral-8x22b", {}),
    ("deepseek-v3", "deepseek-v3", {}),  # MLA, sigmoid group-limited routing, 3 dense layers, 1 shared expert
    ("gpt-oss-20b", "gpt-oss-20b", {}),  # attention sinks, router and expert biases
    ("gpt-oss-120b", "gpt-oss-120b", {}),
    # llama4: the text_config's decoder; head_dim 128 = 5120 / 40 is read as the default (the catalog spells it out)
    ("llama-4-scout-17b-16e-instruct", "llama4-scout", {"attention_head_dim": None}),
    ("llama-4-maverick-17b-128e-instruct", "llama4-maverick", {"attention_head_dim": None}),  # MoE on layers 1, 3, …
]


@pytest.mark.parametrize(("file", "catalog", "differs"), SAME_AS_CATALOG)
def test_config_reads_as_the_catalog_model(file: str, catalog: str, differs: dict) -> None:
    spec = from_hf_config(config(file), name=catalog)
    assert spec == MODELS[catalog].model_copy(update=differs)


def test_kimi_k2_reads_as_deepseek_v3_with_its_own_shapes() -> None:
    """Kimi K2 ships DeepSeek-V3's architecture (``DeepseekV3ForCausalLM``) under model_type kimi_k2: the same spec as
    the catalog's DeepSeek-V3 but for the shapes its file changes (half the heads, 384 experts, one dense layer, no
    router groups, its vocabulary and context)."""
    v3 = MODELS["deepseek-v3"]
    moe = v3.moe.model_copy(
        update={"num_experts": 384, "first_dense_layers": 1, "router_groups": None, "router_topk_groups": None}
    )
    changed = {"name": "kimi-k2", "num_attention_heads": 64, "num_kv_heads": 64, "vocab_size": 163840}
    expected = v3.model_copy(update={**changed, "max_seq_len": 131072, "moe": moe})
    assert from_hf_config(config("kimi-k2-instruct"), name="kimi-k2") == expected


def test_kimi_k25_reads_its_text_decoder_as_kimi_k2() -> None:
    """Kimi K2.5 (model_type kimi_k25) wraps Kimi K2's decoder in ``text_config`` (beside its vision tower, which is not
    planned): the same spec as the Kimi K2 file but for the context the 2.5 release extends (262,144 tokens). This file
    is NVIDIA's NVFP4 checkpoint's, so its ``quantization_config`` sits inside ``text_config``, unread."""
    k25 = from_hf_config(config("kimi-k2.5-nvfp4"), name="kimi")
    assert k25 == from_hf_config(config("kimi-k2-instruct"), name="kimi").model_copy(update={"max_seq_len": 262144})
    assert from_hf_config(config("kimi-k2.5-nvfp4")).name == "hf-kimi_k25"  # the file names neither


def test_glm4_moe_reads_its_wide_grouped_query_attention_and_experts() -> None:
    """GLM-4.7's file, key by key: 96 query heads of 128 (12,288 wide on a 5,120 model) over 8 KV heads, three dense
    layers of 12,288, then 160 routed experts of 1,536 (8 a token) and one shared; no attention biases or QK norms in
    this file (``attention_bias``, ``use_qk_norm`` absent: transformers' defaults, False)."""
    spec = from_hf_config(config("glm-4.7-fp8"))
    got = (spec.num_layers, spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads, spec.attention_head_dim)
    assert got == (92, 5120, 96, 8, 128)
    assert (spec.ffn_hidden_size, spec.qkv_bias, spec.qk_norm, spec.tie_embeddings) == (12288, False, None, False)
    m = spec.moe
    assert (m.num_experts, m.top_k, m.expert_ffn_hidden_size, m.shared_experts, m.first_dense_layers) == (
        160,
        8,
        1536,
        1,
        3,
    )
    assert (m.router, m.router_groups) == ("sigmoid", None)
    both = from_hf_config({**config("glm-4.7-fp8"), "attention_bias": True, "use_qk_norm": True})
    assert (both.qkv_bias, both.attention_out_bias, both.qk_norm) == (True, False, "head")  # o_proj has no bias


#: (file, total parameters, active, published): the files of models not in the catalog, counted.
COUNTS = [
    # Qwen/Qwen3-8B model card: "Number of Parameters: 8.2B".
    ("qwen3-8b", 8_190_735_360, 8_190_735_360, 8.2e9),
    # meta-llama/Llama-3.2-3B model card: 3.21B parameters; tied embeddings.
    ("llama-3.2-3b-instruct", 3_212_749_824, 3_212_749_824, 3.21e9),
    # mistralai/Mistral-7B-Instruct-v0.3: the hub shows 7.25B parameters for v0.3 checkpoints, and its
    # consolidated.safetensors is 14.5 GB of BF16 (7.25B × 2 bytes). Mistral AI's own "7.3B" (the Mistral 7B
    # announcement) is not the count of these shapes: 7.24B for v0.1's 32000-token vocabulary, 7.25B for v0.3's 32768.
    ("mistral-7b-instruct-v0.3", 7_248_023_552, 7_248_023_552, 7.25e9),
    # Qwen/Qwen2.5-7B model card: "Number of Parameters: 7.61B"; q/k/v biases, untied embeddings.
    ("qwen2.5-7b", 7_615_616_512, 7_615_616_512, 7.61e9),
]


@pytest.mark.parametrize(("file", "total", "active", "published"), COUNTS)
def test_dense_config_counts(file: str, total: int, active: int, published: float) -> None:
    spec = from_hf_config(config(file))
    assert (num_parameters(spec), num_active_parameters(spec)) == (total, active)
    assert total == pytest.approx(published, rel=0.005)


def independent_count(cfg: dict) -> tuple[int, int]:
    """Total and active parameters of a config.json, counted from its keys as transformers' modules of its
    model_type hold them (weights, biases, norms; DeepSeek-V3's routing-bias buffer is not a parameter): a count
    that shares nothing with the planner's op lists, to check them."""
    cfg = cfg["text_config"] if cfg["model_type"] in ("llama4", "kimi_k25") else cfg  # the decoder, not the vision
    t, h, v, heads = cfg["model_type"], cfg["hidden_size"], cfg["vocab_size"], cfg["num_attention_heads"]
    kv, d = cfg.get("num_key_value_heads") or heads, cfg.get("head_dim") or h // heads
    total = active = v * h * (1 if cfg.get("tie_word_embeddings") else 2) + h  # embedding(s), final norm
    mla = t in ("deepseek_v3", "kimi_k2")  # Kimi K2 is DeepSeek-V3's architecture
    routed = mla or t == "glm4_moe"  # DeepSeek-V3's expert keys: first_k_dense_replace, n_shared_experts
    for layer in range(cfg["num_hidden_layers"]):
        if mla:  # q_a, q_a_norm, q_b, kv_a (latent + rope key), kv_a_norm, kv_b, o
            q, lat = cfg["q_lora_rank"], cfg["kv_lora_rank"]
            rope, nope, vd = cfg["qk_rope_head_dim"], cfg["qk_nope_head_dim"], cfg["v_head_dim"]
            attn = h * q + q + q * heads * (nope + rope) + h * (lat + rope) + lat + lat * heads * (nope + vd)
            attn += heads * vd * h
        else:
            attn = 2 * h * heads * d + 2 * h * kv * d
            if t == "qwen2" or (t == "glm4_moe" and cfg.get("attention_bias")):  # biases on q, k, v only
                attn += heads * d + 2 * kv * d
            elif cfg.get("attention_bias"):
                attn += heads * d + 2 * kv * d + h
            attn += {"qwen3": 2 * d, "qwen3_moe": 2 * d, "olmoe": (heads + kv) * d, "gpt_oss": heads}.get(t, 0)
            attn += 2 * d if t == "glm4_moe" and cfg.get("use_qk_norm") else 0
        dense = t in ("llama", "mistral", "qwen2", "qwen3")
        step = cfg.get("interleave_moe_layer_step", 1)  # llama4_text: MoE on layers step − 1, 2·step − 1, …
        if t == "llama4_text" and (layer + 1) % step:
            mlp = act = 3 * h * cfg["intermediate_size_mlp"]
        elif dense or (routed and layer < cfg["first_k_dense_replace"]):
            mlp = act = 3 * h * cfg["intermediate_size"]
        else:
            e = cfg.get("num_local_experts") or cfg.get("num_experts") or cfg["n_routed_experts"]
            own = ("mixtral", "olmoe", "gpt_oss", "llama4_text")
            inter = cfg["intermediate_size"] if t in own else cfg["moe_intermediate_size"]
            expert = 3 * h * inter + (2 * inter + h if t == "gpt_oss" else 0)  # gpt-oss: gate_up and down biases
            router = h * e + (e if t == "gpt_oss" else 0)
            shared = 3 * h * inter * (cfg.get("n_shared_experts", 0) if routed else t == "llama4_text")
            mlp, act = router + e * expert + shared, router + cfg["num_experts_per_tok"] * expert + shared
        total += attn + mlp + 2 * h
        active += attn + act + 2 * h
    return total, active


FILES = sorted(f.stem for f in DATA.glob("*.json"))


@pytest.mark.parametrize("file", FILES)
def test_counts_match_an_independent_count_of_the_config(file: str) -> None:
    spec = from_hf_config(config(file))
    assert (num_parameters(spec), num_active_parameters(spec)) == independent_count(config(file))


def within_published(ours: int, published: str) -> bool:
    """0.5 % of the figure, or half a unit of its last published digit when coarser (as tests/test_catalog_moe.py)."""
    d = Decimal(published)
    half_unit = float(Decimal(1).scaleb(d.normalize().as_tuple().exponent)) / 2
    return abs(ours - float(d)) <= max(0.005 * float(d), half_unit)


#: (file, published total, published active or None, whether that active count leaves out the input embedding)
MOE_PUBLISHED = [
    # https://mistral.ai/news/mixtral-of-experts/: 46.7B total, 12.9B per token
    ("mixtral-8x7b-v0.1", "46.7e9", "12.9e9", False),
    # https://mistral.ai/news/mixtral-8x22b/: 141B, 39B active
    ("mixtral-8x22b-v0.1", "141e9", "39e9", False),
    # arXiv 2412.19437: 671B total (MTP module apart); its 37B active is a known gap (tests/test_catalog_moe.py)
    ("deepseek-v3", "671e9", None, False),
    # gpt-oss model card (arXiv 2508.10925) Table 1: 20.91B / 3.61B and 116.83B / 5.13B, active without the embedding
    ("gpt-oss-20b", "20.91e9", "3.61e9", True),
    ("gpt-oss-120b", "116.83e9", "5.13e9", True),
]


@pytest.mark.parametrize(("file", "total", "active", "no_embedding"), MOE_PUBLISHED)
def test_moe_config_counts_match_published(file: str, total: str, active: str | None, no_embedding: bool) -> None:
    spec = from_hf_config(config(file))
    assert within_published(num_parameters(spec), total), num_parameters(spec)
    if active is not None:
        ours = num_active_parameters(spec) - (spec.vocab_size * spec.hidden_size if no_embedding else 0)
        assert within_published(ours, active), ours


SCOUT_TEXT = config("llama-4-scout-17b-16e-instruct")["text_config"]
MAVERICK_TEXT = config("llama-4-maverick-17b-128e-instruct")["text_config"]

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
    # the families read from their released files: what each cannot express, named by its key
    ({**config("deepseek-v3"), "moe_layer_freq": 2}, "moe_layer_freq", "'moe_layer_freq' = 2", "ModelSpec"),
    ({**config("deepseek-v3"), "scoring_func": "sqrtsoftplus"}, "scoring_func", "'sqrtsoftplus'", "sigmoid"),
    ({**config("deepseek-v3"), "n_group": 7}, "n_group", "router_groups=7 does not divide", "divisor"),
    (
        {k: v for k, v in config("deepseek-v3").items() if k != "kv_lora_rank"},
        "kv_lora_rank",
        "no 'kv_lora_rank'",
        "complete",
    ),
    ({**config("mixtral-8x7b-v0.1"), "num_experts_per_tok": 9}, "num_experts_per_tok", "top_k=9 exceeds", "top_k ≤"),
    ({**config("gpt-oss-20b"), "hidden_act": "gelu"}, "hidden_act", "'hidden_act' = 'gelu'", "ModelSpec"),
    (
        {**config("mistral-7b-instruct-v0.3"), "num_local_experts": 8},
        "num_local_experts",
        "'mistral' is a dense",
        "drop",
    ),
    ({**config("qwen2.5-7b"), "num_experts": 64}, "num_experts", "'qwen2' is a dense", "mixtral"),
    ({**config("kimi-k2-instruct"), "moe_layer_freq": 2}, "moe_layer_freq", "'moe_layer_freq' = 2", "ModelSpec"),
    (
        {k: v for k, v in config("glm-4.7-fp8").items() if k != "n_routed_experts"},
        "n_routed_experts",
        "no 'n_routed_experts'",
        "complete",
    ),
    ({**config("glm-4.7-fp8"), "num_experts_per_tok": 161}, "num_experts_per_tok", "top_k=161 exceeds", "top_k ≤"),
    ({**config("glm-4.7-fp8"), "moe_intermediate_size": 0}, "moe_intermediate_size", "", ""),
    (
        {**config("kimi-k2.5-nvfp4"), "text_config": {**config("qwen3-8b")}},
        "text_config",
        "'kimi_k2' or 'deepseek_v3'",
        "complete",
    ),
    # llama4: its text_config, named under it
    ({**config("llama-4-scout-17b-16e-instruct"), "text_config": None}, "text_config", "text_config", "complete"),
    (
        {**config("llama-4-maverick-17b-128e-instruct"), "text_config": {**MAVERICK_TEXT, "moe_layers": [1, 2]}},
        "text_config.moe_layers",
        "'moe_layers' = [1, 2]",
        "ModelSpec",
    ),
    (
        {**config("llama-4-maverick-17b-128e-instruct"), "text_config": {**MAVERICK_TEXT, "hidden_act": "gelu"}},
        "text_config.hidden_act",
        "'hidden_act' = 'gelu'",
        "ModelSpec",
    ),
    (
        {**config("llama-4-scout-17b-16e-instruct"), "text_config": {**SCOUT_TEXT, "intermediate_size_mlp": 0}},
        "text_config.intermediate_size_mlp",
        "",
        "",
    ),
    (
        {**config("llama-4-scout-17b-16e-instruct"), "text_config": {**SCOUT_TEXT, "num_experts_per_tok": 17}},
        "text_config.num_experts_per_tok",
        "top_k=17 exceeds",
        "top_k ≤",
    ),
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
    ("file", "args", "code", "says"),
    [
        ("llama-3.1-8b.json", [], 0, '"name": "llama-3.1-8b"'),  # a dense config estimates; named by its file
        ("mistral-7b-instruct-v0.3.json", [], 0, '"name": "mistral-7b-instruct-v0.3"'),
        ("qwen2.5-7b.json", ["--tp", "4"], 0, '"qkv_bias": true'),  # 28 heads: tp 4
        ("qwen3-8b.json", [], 0, '"qk_norm": "head"'),  # the default stack's runtime builds Qwen3's per-head QK norm
        ("qwen3-30b-a3b.json", ["--stack", "deepspeed"], 2, "training.stack"),  # an MoE on a stack without MoE
        ("mixtral-8x7b-v0.1.json", ["--sequence-parallel"], 0, '"num_experts": 8'),  # MoE on the default stack
        # the default stack builds gpt-oss: its sinks, attention biases, experts' biases and clamped SwiGLU
        ("gpt-oss-20b.json", ["--sequence-parallel"], 0, '"swiglu_limit": 7.0'),
        ("deepseek-v3.json", ["--stack", "megatron"], 0, '"kv_lora_rank": 512'),  # MLA on a stack that runs it
        ("kimi-k2-instruct.json", ["--stack", "megatron"], 0, '"num_experts": 384'),  # DeepSeek-V3's architecture
        ("glm-4.7-fp8.json", ["--stack", "megatron"], 0, '"attention_head_dim": 128'),  # 96 heads of 128 on 5,120
        (
            "llama-4-maverick-17b-128e-instruct.json",
            ["--sequence-parallel"],
            0,
            '"moe_layer_freq": 2',
        ),  # MoE every other layer
        ("../../../README.md", [], 2, "--model"),  # not a JSON document
    ],
)
def test_cli_model_file(file: str, args: list[str], code: int, says: str) -> None:
    tp = [] if "--tp" in args else ["--tp", "8"]
    out = _cli("estimate", "--model", str(DATA / file), *CLUSTER, "--seq-len", "2048", *tp, "--json", *args)
    assert out.returncode == code, out.stderr
    assert says in (out.stdout if code == 0 else out.stderr)


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with TestClient(make_app(tmp_path_factory.mktemp("hf")), raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize(
    ("model", "training", "status", "field"),
    [
        ({"hf_config": config("llama-3.2-3b-instruct"), "name": "llama-3.2-3b"}, {}, 200, None),
        # a stack without a MoE block (meshplan's runs MoE)
        ({"hf_config": config("olmoe-1b-7b-0125-instruct")}, {"stack": "deepspeed"}, 422, "training.stack"),
        ({"hf_config": {"model_type": "gemma3"}}, {}, 422, "model.hf_config.model_type"),
        ({"hf_config": config("qwen3-8b"), "revision": "main"}, {}, 422, "model"),
        ({"hf_config": config("gpt-oss-120b"), "name": "gpt-oss-120b"}, {"stack": "megatron"}, 200, None),
        ({"hf_config": config("mixtral-8x22b-v0.1"), "name": "mixtral-8x22b"}, {"stack": "torchtitan"}, 200, None),
        # torchtitan has no priced latent attention (megatron and meshplan's runtime do)
        ({"hf_config": config("deepseek-v3")}, {"stack": "torchtitan"}, 422, "training.stack"),
        ({"hf_config": config("kimi-k2-instruct")}, {"stack": "torchtitan"}, 422, "training.stack"),
        ({"hf_config": config("glm-4.7-fp8"), "name": "glm-4.7"}, {"stack": "megatron"}, 200, None),
        (
            {"hf_config": config("llama-4-scout-17b-16e-instruct"), "name": "llama4-scout"},
            {"stack": "torchtitan"},
            200,
            None,
        ),
    ],
)
def test_rest_takes_hf_config(client, model: dict, training: dict, status: int, field: str | None) -> None:
    body = {
        "model": model,
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
        "training": {"global_batch_size": 64, "seq_len": 2048, **training},
        "parallel": {"tp": 8, "pp": 1, "micro_batch_size": 1},
    }
    r = client.post("/v1/estimates", json=body)
    assert r.status_code == status, r.text
    if field is None:
        assert r.json()["model"]["name"] == model["name"]
        assert r.json()["model"] == from_hf_config(model["hf_config"], name=model["name"]).model_dump(mode="json")
    else:
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["errors"][0]["field"] == field, r.json()
        if model["hf_config"].get("model_type") in ("deepseek_v3", "kimi_k2"):
            assert "model.mla" in r.json()["detail"], r.json()  # the stack refuses it for its latent attention
