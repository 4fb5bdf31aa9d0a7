"""The mixture-of-experts model types of a Hugging Face ``config.json`` (``planner.specs.hf``): each reader returns
the ModelSpec fields its keys give (``moe``, and what the type's attention adds), per transformers'
``configuration_<type>.py`` and modelling code."""

from __future__ import annotations

from typing import Any

from planner.specs.errors import FieldValueError
from planner.specs.hf_keys import expect, get
from planner.specs.rope import yarn_attention_factor

#: The model types that spell their experts as DeepSeek-V3 does (``n_routed_experts``, ``moe_intermediate_size``,
#: ``n_shared_experts`` of that width, ``first_k_dense_replace``, ``n_group`` / ``topk_group``).
ROUTED = ("deepseek_v3", "kimi_k2", "glm4_moe")


def _experts(cfg: dict[str, Any], count: str, width: str = "intermediate_size", **more: Any) -> dict[str, Any]:
    """The MoeSpec fields every model type gives: the routed experts (``count``: the key that counts them), top-k
    (``num_experts_per_tok``) and their width (``width``), with the type's ``more``."""
    return dict(
        num_experts=get(cfg, count),
        top_k=get(cfg, "num_experts_per_tok"),
        expert_ffn_hidden_size=get(cfg, width),
        **more,
    )


def _qwen3_moe(cfg: dict[str, Any]) -> dict[str, Any]:
    n = get(cfg, "num_hidden_layers")
    step = cfg.get("decoder_sparse_step", 1)
    dense = sorted(cfg.get("mlp_only_layers") or [])
    if dense != list(range(len(dense))) or (dense and step != 1):
        raise FieldValueError(
            "hf_config.mlp_only_layers",
            f"hf_config field 'mlp_only_layers' = {dense} with decoder_sparse_step {step} is not supported (dense "
            "layers must lead: 0, 1, …, with every later layer MoE); describe the model as a ModelSpec instead",
        )
    if len(dense) >= n:
        raise FieldValueError(
            "hf_config.mlp_only_layers",
            f"hf_config field 'mlp_only_layers' makes all {n} layers dense; use model_type 'qwen3' for a dense model",
        )
    moe = _experts(
        cfg,
        "num_experts",
        "moe_intermediate_size",
        first_dense_layers=len(dense),
        moe_layer_freq=step,
    )
    return {"moe": moe}


def _mixtral(cfg: dict[str, Any]) -> dict[str, Any]:
    return {"moe": _experts(cfg, "num_local_experts")}


def _olmoe(cfg: dict[str, Any]) -> dict[str, Any]:
    return {
        "moe": _experts(cfg, "num_experts"),
        "qk_norm": "projection",
    }  # OlmoeAttention: q_norm(h), k_norm(kv_heads·d)


def _gpt_oss(cfg: dict[str, Any]) -> dict[str, Any]:
    experts = _experts(
        cfg,
        "num_local_experts",
        router_bias=True,  # GptOssTopKRouter and GptOssExperts carry biases
        expert_bias=True,
        swiglu_limit=float(cfg.get("swiglu_limit", 7.0)),  # GptOssExperts.limit (its alpha 1.702 is fixed)
    )
    return {"moe": experts, "attention_sinks": True, "rope_attention_factor": _yarn_factor(cfg)}


def _yarn_factor(cfg: dict[str, Any]) -> float:
    """YaRN's attention factor from ``rope_scaling`` (``specs.rope.yarn_attention_factor``); 1 without YaRN."""
    rs = cfg.get("rope_scaling") or {}
    if rs.get("rope_type", rs.get("type")) != "yarn":
        return 1.0
    return yarn_attention_factor(float(rs.get("factor", 1.0)), rs.get("mscale"), rs.get("mscale_all_dim"))


def _routed(cfg: dict[str, Any], scoring: str, first_dense: int) -> dict[str, Any]:
    """The MoeSpec of DeepSeek-V3's keys; ``first_dense``: ``first_k_dense_replace`` when the file omits it (the
    model type's default)."""
    groups, topk_groups = cfg.get("n_group") or 1, cfg.get("topk_group") or 1
    return _experts(
        cfg,
        "n_routed_experts",
        "moe_intermediate_size",
        shared_experts=cfg.get("n_shared_experts") or 0,
        first_dense_layers=cfg.get("first_k_dense_replace", first_dense),
        router=scoring,
        router_groups=groups if groups > 1 else None,
        router_topk_groups=topk_groups if groups > 1 else None,
    )


def _glm4_moe(cfg: dict[str, Any]) -> dict[str, Any]:
    """GLM-4.5/4.6/4.7 (transformers ``Glm4MoeConfig``): grouped-query attention of ``head_dim`` (96 × 128 = 12,288
    wide on a 5,120 model), q/k/v biases with ``attention_bias``, q/k norms with ``use_qk_norm``, and DeepSeek-V3's
    expert layout and sigmoid router (``Glm4MoeTopkRouter``; ``first_k_dense_replace`` defaults to 1). Partial RoPE
    (``partial_rotary_factor``) moves no FLOP or byte the planner prices; the multi-token-prediction layer
    (``num_nextn_predict_layers``) is not read, as DeepSeek-V3's."""
    bias = bool(cfg.get("attention_bias"))  # Glm4MoeAttention: q/k/v with it, o_proj never
    out = {"moe": _routed(cfg, "sigmoid", 1), "qkv_bias": bias, "attention_out_bias": False}
    return out | ({"qk_norm": "head"} if cfg.get("use_qk_norm") else {})  # q_norm, k_norm over head_dim


def _deepseek_v3(cfg: dict[str, Any]) -> dict[str, Any]:
    expect(cfg, "moe_layer_freq", (1,), "every layer after the first_k_dense_replace dense ones is MoE")
    scoring = cfg.get("scoring_func", "sigmoid")
    if scoring not in ("softmax", "sigmoid"):
        raise FieldValueError(
            "hf_config.scoring_func",
            f"hf_config field 'scoring_func' = {scoring!r} is not supported; use softmax or sigmoid",
        )
    experts = _routed(cfg, scoring, 0)
    mla = dict(
        q_lora_rank=cfg.get("q_lora_rank"),
        kv_lora_rank=get(cfg, "kv_lora_rank"),
        qk_rope_head_dim=get(cfg, "qk_rope_head_dim"),
        qk_nope_head_dim=get(cfg, "qk_nope_head_dim"),
        v_head_dim=get(cfg, "v_head_dim"),
    )
    heads = get(cfg, "num_attention_heads")
    return {"moe": experts, "mla": mla, "num_kv_heads": heads, "attention_head_dim": None}


#: Multimodal model types whose text decoder is their ``text_config`` (what the planner plans: the vision tower is
#: not priced), and the model types that decoder may have (the first when it names none).
WRAPPED = {"llama4": ("llama4_text",), "kimi_k25": ("kimi_k2", "deepseek_v3")}


def text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The text decoder of a ``WRAPPED`` model type's file (Llama 4's ``Llama4Config.text_config``, Kimi K2.5's
    ``KimiK25Config.text_config``: DeepSeek-V3's architecture), named as the file is where it has no name of its own."""
    outer, text = cfg.get("model_type"), cfg.get("text_config")
    kinds = WRAPPED[str(outer)]
    if not isinstance(text, dict) or text.get("model_type", kinds[0]) not in kinds:
        raise FieldValueError(
            "hf_config.text_config",
            f"hf_config of model_type {outer!r} needs its text decoder's config as 'text_config' (model_type "
            f"{' or '.join(map(repr, kinds))}), not {text!r}; give the model's complete config.json",
        )
    name = text.get("_name_or_path") or cfg.get("_name_or_path") or f"hf-{outer}"
    return {**text, "_name_or_path": name, "model_type": text.get("model_type", kinds[0])}


def _llama4_text(cfg: dict[str, Any]) -> dict[str, Any]:
    """Llama 4's text decoder (transformers ``Llama4TextConfig``): ``num_local_experts`` experts of
    ``intermediate_size`` (top ``num_experts_per_tok``, sigmoid-gated: ``Llama4Router``) and one shared expert of that
    width (``Llama4TextMoe.shared_expert``) on the layers ``moe_layers`` names, by default every
    ``interleave_moe_layer_step``-th from layer step − 1 (Maverick's 1, 3, 5, …); dense layers of
    ``intermediate_size_mlp``. Its QK norm is a parameter-free L2 norm (``Llama4TextL2Norm``: nothing the planner
    counts). Chunked attention (``attention_chunk_size`` on three layers in four) is priced as causal attention over
    the whole sequence: exact up to the chunk (8,192 tokens), above it the chunked layers' attention is overpriced."""
    n, step = get(cfg, "num_hidden_layers"), cfg.get("interleave_moe_layer_step", 1)
    layers = cfg.get("moe_layers")
    if layers is not None and list(layers) != list(range(step - 1, n, step)):
        raise FieldValueError(
            "hf_config.moe_layers",
            f"hf_config field 'moe_layers' = {layers} is not every interleave_moe_layer_step-th layer ({step}) from "
            f"layer {step - 1}, the pattern ModelSpec's moe_layer_freq expresses; describe the model as a ModelSpec "
            "instead",
        )
    experts = _experts(
        cfg,
        "num_local_experts",
        shared_experts=1,
        moe_layer_freq=step,
        router="sigmoid",
    )
    return {"moe": experts, "ffn_hidden_size": get(cfg, "intermediate_size_mlp")}  # the dense layers' width


READERS = {
    "qwen3_moe": _qwen3_moe,
    "mixtral": _mixtral,
    "olmoe": _olmoe,
    "gpt_oss": _gpt_oss,
    "deepseek_v3": _deepseek_v3,
    "kimi_k2": _deepseek_v3,  # Moonshot AI ships Kimi K2 as DeepseekV3ForCausalLM under its own model_type
    "glm4_moe": _glm4_moe,
    "llama4_text": _llama4_text,
}
