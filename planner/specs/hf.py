"""A Hugging Face ``config.json`` as a ``ModelSpec`` (issue 23): ``--model config.json`` in the CLI and
``{"model": {"hf_config": {...}}}`` in a request.

Read per ``model_type`` (transformers' ``configuration_<type>.py`` field names): llama, mistral, qwen2, qwen3
(dense); qwen3_moe, mixtral, deepseek_v3, gpt_oss, olmoe (mixtures of experts). Fields that do not change what
the planner counts are not read (token ids, RoPE scaling, dropout, initialisation, a checkpoint's
``quantization_config``, DeepSeek-V3's multi-token-prediction module ``num_nextn_predict_layers``, sliding
windows). A field the spec cannot express (another activation, MLP biases, an irregular MoE layer pattern) and an
unsupported ``model_type`` are errors naming the field: "what; fix", as the specs' validators write them."""

from __future__ import annotations

from typing import Any

from planner.specs.model import MlaSpec, ModelSpec, MoeSpec

DENSE = ("llama", "mistral", "qwen2", "qwen3")
MOE = ("qwen3_moe", "mixtral", "deepseek_v3", "gpt_oss", "olmoe")
SUPPORTED = DENSE + MOE


def is_hf_config(data: object) -> bool:
    """Whether a document is a Hugging Face model config rather than a ModelSpec."""
    return isinstance(data, dict) and "family" not in data and ("model_type" in data or "architectures" in data)


def _get(cfg: dict[str, Any], key: str, default: Any = ...) -> Any:
    value = cfg.get(key, default)
    if value is ...:
        raise ValueError(
            f"hf_config has no {key!r} (model_type {cfg.get('model_type')!r} needs it); "
            "give the model's complete config.json"
        )
    return value


def _expect(cfg: dict[str, Any], key: str, allowed: tuple[Any, ...], why: str) -> None:
    value = cfg.get(key, allowed[0])
    if value not in allowed:
        raise ValueError(
            f"hf_config field {key!r} = {value!r} is not supported ({why}); meshplan models "
            f"{' or '.join(repr(a) for a in allowed)} here: describe the model as a ModelSpec instead"
        )


def _name(cfg: dict[str, Any], name: str | None) -> str:
    if name:
        return name[:128]
    path = cfg.get("_name_or_path")
    if isinstance(path, str) and path.strip():
        return path.strip()[:128]
    return f"hf-{cfg.get('model_type')}"


def from_hf_config(cfg: dict[str, Any], name: str | None = None) -> ModelSpec:
    """The ModelSpec of a Hugging Face ``config.json`` (a dict). Raises ValueError("what; fix") naming the field
    on an unsupported architecture or field; ModelSpec's own validation applies to the result."""
    model_type = cfg.get("model_type")
    if model_type not in SUPPORTED:
        arch = cfg.get("architectures")
        raise ValueError(
            f"hf_config model_type {model_type!r} (architectures {arch!r}) is not a supported architecture; "
            f"use a config.json of model_type {', '.join(SUPPORTED)}, or describe the model as a ModelSpec"
        )
    _expect(cfg, "hidden_act", ("silu",), "the experts and MLPs are SwiGLU")
    _expect(cfg, "mlp_bias", (False,), "MLP linears without biases")
    heads = _get(cfg, "num_attention_heads")
    hidden = _get(cfg, "hidden_size")
    spec: dict[str, Any] = dict(
        name=_name(cfg, name),
        family="llama",
        num_layers=_get(cfg, "num_hidden_layers"),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=cfg.get("num_key_value_heads") or heads,
        ffn_hidden_size=_get(cfg, "intermediate_size"),
        vocab_size=_get(cfg, "vocab_size"),
        activation="swiglu",
        norm="rmsnorm",
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_seq_len=_get(cfg, "max_position_embeddings"),
    )
    head_dim = cfg.get("head_dim")
    if head_dim is not None and (hidden % heads or head_dim != hidden // heads):
        spec["attention_head_dim"] = head_dim
    if model_type == "qwen2":
        spec["qkv_bias"] = True  # Qwen2Attention: q/k/v with bias, o without
    elif cfg.get("attention_bias"):  # llama, mistral, qwen3(_moe), olmoe, gpt_oss: every attention projection
        spec["qkv_bias"] = spec["attention_out_bias"] = True
    if model_type in ("qwen3", "qwen3_moe"):
        spec["qk_norm"] = "head"
    spec.update(_MOE_READERS[model_type](cfg) if model_type in _MOE_READERS else {})
    return ModelSpec.model_validate(spec)


def _qwen3_moe(cfg: dict[str, Any]) -> dict[str, Any]:
    n = _get(cfg, "num_hidden_layers")
    step = cfg.get("decoder_sparse_step", 1)
    dense = sorted(cfg.get("mlp_only_layers") or [])
    if dense != list(range(len(dense))) or (dense and step != 1):
        raise ValueError(
            f"hf_config field 'mlp_only_layers' = {dense} with decoder_sparse_step {step} is not supported (dense "
            "layers must lead: 0, 1, …, with every later layer MoE); describe the model as a ModelSpec instead"
        )
    if len(dense) >= n:
        raise ValueError(
            f"hf_config field 'mlp_only_layers' makes all {n} layers dense; use model_type 'qwen3' for a dense model"
        )
    moe = MoeSpec(
        num_experts=_get(cfg, "num_experts"),
        top_k=_get(cfg, "num_experts_per_tok"),
        expert_ffn_hidden_size=_get(cfg, "moe_intermediate_size"),
        first_dense_layers=len(dense),
        moe_layer_freq=step,
    )
    return {"moe": moe}


def _mixtral(cfg: dict[str, Any]) -> dict[str, Any]:
    experts = MoeSpec(
        num_experts=_get(cfg, "num_local_experts"),
        top_k=_get(cfg, "num_experts_per_tok"),
        expert_ffn_hidden_size=_get(cfg, "intermediate_size"),
    )
    return {"moe": experts}


def _olmoe(cfg: dict[str, Any]) -> dict[str, Any]:
    experts = MoeSpec(
        num_experts=_get(cfg, "num_experts"),
        top_k=_get(cfg, "num_experts_per_tok"),
        expert_ffn_hidden_size=_get(cfg, "intermediate_size"),
    )
    return {"moe": experts, "qk_norm": "projection"}  # OlmoeAttention: q_norm(h), k_norm(kv_heads·d)


def _gpt_oss(cfg: dict[str, Any]) -> dict[str, Any]:
    experts = MoeSpec(
        num_experts=_get(cfg, "num_local_experts"),
        top_k=_get(cfg, "num_experts_per_tok"),
        expert_ffn_hidden_size=_get(cfg, "intermediate_size"),
        router_bias=True,  # GptOssTopKRouter and GptOssExperts carry biases
        expert_bias=True,
    )
    return {"moe": experts, "attention_sinks": True}


def _deepseek_v3(cfg: dict[str, Any]) -> dict[str, Any]:
    _expect(cfg, "moe_layer_freq", (1,), "every layer after the first_k_dense_replace dense ones is MoE")
    groups, topk_groups = cfg.get("n_group") or 1, cfg.get("topk_group") or 1
    scoring = cfg.get("scoring_func", "sigmoid")
    if scoring not in ("softmax", "sigmoid"):
        raise ValueError(f"hf_config field 'scoring_func' = {scoring!r} is not supported; use softmax or sigmoid")
    experts = MoeSpec(
        num_experts=_get(cfg, "n_routed_experts"),
        top_k=_get(cfg, "num_experts_per_tok"),
        expert_ffn_hidden_size=_get(cfg, "moe_intermediate_size"),
        shared_experts=cfg.get("n_shared_experts") or 0,
        first_dense_layers=cfg.get("first_k_dense_replace", 0),
        router=scoring,
        router_groups=groups if groups > 1 else None,
        router_topk_groups=topk_groups if groups > 1 else None,
    )
    mla = MlaSpec(
        q_lora_rank=cfg.get("q_lora_rank"),
        kv_lora_rank=_get(cfg, "kv_lora_rank"),
        qk_rope_head_dim=_get(cfg, "qk_rope_head_dim"),
        qk_nope_head_dim=_get(cfg, "qk_nope_head_dim"),
        v_head_dim=_get(cfg, "v_head_dim"),
    )
    heads = _get(cfg, "num_attention_heads")
    return {"moe": experts, "mla": mla, "num_kv_heads": heads, "attention_head_dim": None}


_MOE_READERS = {
    "qwen3_moe": _qwen3_moe,
    "mixtral": _mixtral,
    "olmoe": _olmoe,
    "gpt_oss": _gpt_oss,
    "deepseek_v3": _deepseek_v3,
}
