"""A Hugging Face ``config.json`` as a ``ModelSpec`` (issue 23): ``--model config.json`` in the CLI and
``{"model": {"hf_config": {...}}}`` in a request.

Read per ``model_type`` (transformers' ``configuration_<type>.py`` field names): llama, mistral, qwen2, qwen3
(dense); qwen3_moe, mixtral, deepseek_v3, gpt_oss, olmoe, kimi_k2 (Kimi K2: DeepSeek-V3's architecture and keys,
``architectures`` ``DeepseekV3ForCausalLM``, read as deepseek_v3; kimi_k25, Kimi K2.5, its ``text_config``), glm4_moe
(GLM-4.5 to 4.7), llama4 (its ``text_config``: the text decoder; the vision towers are not planned) and llama4_text
(mixtures of experts: ``hf_moe``). Fields that do not change what the planner counts are not read (token ids, RoPE scaling, dropout,
initialisation, a checkpoint's ``quantization_config``, DeepSeek-V3's multi-token-prediction module
``num_nextn_predict_layers``). Sliding windows are read as transformers builds them (``_window``: ``sliding_window``
with mistral's and mixtral's every layer, qwen2/qwen3's ``use_sliding_window`` and ``max_window_layers``, gpt_oss's
``layer_types``). A field the spec cannot express (another activation, MLP biases, an irregular MoE layer pattern)
and an unsupported ``model_type`` are errors naming the field: "what; fix", as the specs' validators write them,
raised as ``FieldValueError`` with the field's path (``hf_config.<key>``; ``hf_config.text_config.<key>`` in a
Llama 4 file), so a request's problem names ``model.hf_config.<key>``; so are MoE fields on a dense ``model_type``
and a value the ModelSpec refuses (top-k above the experts, …), named by the config.json key it came from."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from planner.specs.errors import FieldValueError
from planner.specs.hf_keys import expect, get
from planner.specs.hf_moe import READERS, ROUTED, WRAPPED, text_config
from planner.specs.model import ModelSpec

DENSE = ("llama", "mistral", "qwen2", "qwen3")
MOE = (
    "qwen3_moe",
    "mixtral",
    "deepseek_v3",
    "gpt_oss",
    "olmoe",
    "kimi_k2",
    "kimi_k25",
    "glm4_moe",
    "llama4",
    "llama4_text",
)
SUPPORTED = DENSE + MOE
#: config.json keys of transformers' MoE configs (experts, routing, MoE layer pattern): on a dense model_type they
#: would be ignored by transformers and by meshplan alike, so they are refused.
MOE_KEYS = (
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "n_shared_experts",
    "shared_expert_intermediate_size",
    "first_k_dense_replace",
    "decoder_sparse_step",
    "mlp_only_layers",
)
#: The ModelSpec / MoeSpec field each config.json key becomes (every model_type's spelling), to name the key when
#: the spec refuses its value.
SPEC_KEYS = {
    "num_layers": "num_hidden_layers",
    "hidden_size": "hidden_size",
    "num_attention_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
    "ffn_hidden_size": "intermediate_size",
    "vocab_size": "vocab_size",
    "max_seq_len": "max_position_embeddings",
    "attention_head_dim": "head_dim",
    "moe.top_k": "num_experts_per_tok",
    "moe.first_dense_layers": "first_k_dense_replace",
    "moe.router_groups": "n_group",
    "moe.router_topk_groups": "topk_group",
    "moe.shared_experts": "n_shared_experts",
}


def is_hf_config(data: object) -> bool:
    """Whether a document is a Hugging Face model config rather than a ModelSpec."""
    return isinstance(data, dict) and "family" not in data and ("model_type" in data or "architectures" in data)


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
    if model_type in WRAPPED:
        text = text_config(cfg)
        try:
            return from_hf_config(text, name)
        except FieldValueError as exc:  # named under text_config, where the key is
            raise FieldValueError(exc.sub.replace("hf_config.", "hf_config.text_config.", 1), str(exc)) from None
    if model_type not in SUPPORTED:
        arch = cfg.get("architectures")
        raise FieldValueError(
            "hf_config.model_type",
            f"hf_config model_type {model_type!r} (architectures {arch!r}) is not a supported architecture; "
            f"use a config.json of model_type {', '.join(SUPPORTED)}, or describe the model as a ModelSpec",
        )
    if model_type in DENSE:
        _no_moe_fields(cfg, model_type)
    expect(cfg, "hidden_act", ("silu",), "the experts and MLPs are SwiGLU")
    expect(cfg, "mlp_bias", (False,), "MLP linears without biases")
    heads = get(cfg, "num_attention_heads")
    hidden = get(cfg, "hidden_size")
    spec: dict[str, Any] = dict(
        name=_name(cfg, name),
        family="llama",
        num_layers=get(cfg, "num_hidden_layers"),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=cfg.get("num_key_value_heads") or heads,
        ffn_hidden_size=get(cfg, "intermediate_size"),
        vocab_size=get(cfg, "vocab_size"),
        activation="swiglu",
        norm="rmsnorm",
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_seq_len=get(cfg, "max_position_embeddings"),
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
    spec.update(READERS[model_type](cfg) if model_type in READERS else {})  # the MoE type's own fields, last
    spec.update(_window(cfg, model_type))
    try:
        return ModelSpec.model_validate(spec)
    except ValidationError as exc:
        raise _refused(exc, model_type) from None


#: transformers' default ``sliding_window`` per model_type when config.json omits the key (huggingface/transformers
#: @ 008e574391258935f3ecc3035c882e73bbcac419 ``configuration_{mistral,qwen2,qwen3}.py``: 4096; gpt_oss @
#: 02b8f42b4240dddea1b27c45d2dc95fb2682f841: 128; ``MixtralConfig``: None), and qwen2/qwen3's ``max_window_layers``
#: default (28).
WINDOW_DEFAULTS = {"mistral": 4096, "qwen2": 4096, "qwen3": 4096, "qwen3_moe": 4096, "gpt_oss": 128, "mixtral": None}
QWEN = ("qwen2", "qwen3", "qwen3_moe")


def _window(cfg: dict[str, Any], model_type: str) -> dict[str, Any]:
    """The ModelSpec's sliding-window fields, as transformers builds each model_type's layers (a windowed layer's
    query i attends keys j with i − window < j ≤ i: ``masking_utils.sliding_window_overlay``):

    * mistral, mixtral: ``sliding_window`` on every layer (``MistralAttention``; a ``layer_types`` key is only
      warned about by ``MistralConfig`` and not read); null: none;
    * qwen2, qwen3, qwen3_moe: none unless ``use_sliding_window``; then ``layer_types`` if given, else the layers
      i ≥ ``max_window_layers`` (``Qwen2Config.__post_init__``);
    * gpt_oss: ``layer_types`` (default: ``sliding_attention`` on the even layers 0, 2, 4, …).

    A pattern of windowed layers other than "every n-th from layer k" is refused, naming ``hf_config.layer_types``."""
    if model_type not in WINDOW_DEFAULTS:
        return {}
    n = get(cfg, "num_hidden_layers")
    window = cfg.get("sliding_window", WINDOW_DEFAULTS[model_type])
    types = cfg.get("layer_types")
    if model_type in QWEN:
        if not cfg.get("use_sliding_window", False):
            window = None
        elif types is None:
            first = cfg.get("max_window_layers", 28)
            types = ["sliding_attention" if i >= first else "full_attention" for i in range(n)]
    elif model_type == "gpt_oss":
        if types is None:
            types = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)]
    else:
        types = None
    if window is None:
        return {}
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise FieldValueError(
            "hf_config.sliding_window",
            f"hf_config field 'sliding_window' = {window!r} is not a window in tokens; give a positive integer, or "
            "null for attention over every earlier token",
        )
    if types is None:
        return {"sliding_window": window}
    if not isinstance(types, list) or len(types) != n:
        raise FieldValueError(
            "hf_config.layer_types",
            f"hf_config field 'layer_types' has {len(types) if isinstance(types, list) else types!r} entries for "
            f"num_hidden_layers={n}; give one per layer",
        )
    windowed = [i for i, t in enumerate(types) if t == "sliding_attention"]
    other = sorted({t for t in types if t not in ("sliding_attention", "full_attention")})
    if other:
        raise FieldValueError(
            "hf_config.layer_types",
            f"hf_config field 'layer_types' holds {', '.join(map(repr, other))}; meshplan models 'sliding_attention' "
            "and 'full_attention' layers: describe the model as a ModelSpec instead",
        )
    if not windowed:
        return {}
    first = windowed[0]
    freq = windowed[1] - first if len(windowed) > 1 else n - first
    if windowed != list(range(first, n, freq)):
        raise FieldValueError(
            "hf_config.layer_types",
            f"hf_config field 'layer_types' puts sliding_attention on layers {windowed}, not every n-th layer from "
            "the first windowed one (the pattern ModelSpec's window_first_layer and window_layer_freq express); "
            "describe the model as a ModelSpec instead",
        )
    out: dict[str, Any] = {"sliding_window": window}
    if first:
        out["window_first_layer"] = first
    if freq != 1:
        out["window_layer_freq"] = freq
    return out


def _no_moe_fields(cfg: dict[str, Any], model_type: str) -> None:
    """A dense model_type with experts configured is a mistake (transformers builds it dense): refused, naming the key."""
    for key in MOE_KEYS:
        value = cfg.get(key)
        if value not in (None, 0, False, [], 1 if key == "decoder_sparse_step" else None):
            raise FieldValueError(
                f"hf_config.{key}",
                f"hf_config field {key!r} = {value!r} configures experts, but model_type {model_type!r} is a dense "
                f"architecture (transformers builds it without experts); use the config.json of the mixture-of-experts "
                f"model_type ({', '.join(MOE)}), or drop {key!r} for the dense model",
            )


def _refused(exc: ValidationError, model_type: str) -> FieldValueError:
    """The ModelSpec's first objection to what the config.json became, naming the config.json key it came from."""
    err = exc.errors(include_url=False)[0]
    sub = getattr((err.get("ctx") or {}).get("error"), "sub", None)
    path = ".".join(str(p) for p in err.get("loc", ())) + (f".{sub}" if sub else "")
    path = path.strip(".")
    key = SPEC_KEYS.get(path)
    if path == "moe.num_experts":  # every model_type names the expert count and width its own way
        key = (
            "n_routed_experts"
            if model_type in ROUTED
            else {"qwen3_moe": "num_experts", "olmoe": "num_experts"}.get(model_type, "num_local_experts")
        )
    elif path == "moe.expert_ffn_hidden_size":
        key = "moe_intermediate_size" if model_type in ("qwen3_moe", *ROUTED) else "intermediate_size"
    elif path == "ffn_hidden_size" and model_type == "llama4_text":
        key = "intermediate_size_mlp"  # its dense layers' width (intermediate_size is the experts')
    elif path.startswith("mla."):
        key = path.removeprefix("mla.")
    error = (err.get("ctx") or {}).get("error")
    text = str(error) if error is not None else f"{path or 'the model'}: {err.get('msg')}"
    what, _, fix = text.partition("; ")
    return FieldValueError(f"hf_config.{key}" if key else "hf_config", f"{what}; {fix or 'correct the config.json'}")
