"""The model a request describes: ``ModelSpec`` — a decoder-only transformer, dense or a mixture of experts
(``MoeSpec``), with standard or multi-head latent attention (``MlaSpec``).

Dense models leave ``moe``, ``mla`` and the attention extras unset and validate (and serialise) exactly as
before. A validator writes "what is wrong; how to fix it", which ``planner.specs.errors`` turns into a message
and a fix naming the field."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, PrivateAttr, SerializerFunctionWrapHandler, model_serializer, model_validator

from planner.specs.common import MAX_HIDDEN, MAX_SEQ_LEN, MAX_VOCAB, Activation, Family, Norm, Spec
from planner.specs.config import MAX_LAYERS
from planner.specs.errors import FieldValueError

Router = Literal["softmax", "sigmoid"]
#: ``MoeSpec.drop_policy``: Megatron-core's ``--moe-token-drop-policy`` values.
DropPolicy = Literal["probs", "position"]

#: ModelSpec's fields beyond a dense GPT/Llama and their defaults: left out of its dump when at the default, so
#: a dense model serialises (and hashes, in the service's store) exactly as before they existed.
_EXTRAS: dict[str, Any] = {
    "attention_head_dim": None,
    "qk_norm": None,
    "attention_out_bias": False,
    "attention_sinks": False,
    "mla": None,
    "moe": None,
    "sliding_window": None,
    "window_first_layer": 0,
    "window_layer_freq": 1,
    "rope_attention_factor": 1.0,
}


class MoeSpec(Spec):
    """Mixture-of-experts MLPs (Shazeer et al. 2017; GShard; Switch; DeepSeekMoE): each MoE layer replaces the
    dense MLP by a router (a linear of h → num_experts), ``num_experts`` routed SwiGLU experts of which each
    token visits ``top_k``, and ``shared_experts`` experts every token visits. Which layers are MoE: layer i
    (from 0) is when i ≥ ``first_dense_layers`` and (i − first_dense_layers + 1) is a multiple of
    ``moe_layer_freq`` (1: every layer after the dense ones; 2: every other layer, as Llama 4 Maverick's
    ``interleave_moe_layer_step``); the other layers keep the dense MLP of ``ffn_hidden_size``."""

    # never assigned to once built (``workload.ops.linears`` memoises by the model)
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    num_experts: int = Field(ge=1, le=65_536, description="Routed experts per MoE layer.")
    top_k: int = Field(ge=1, le=1024, description="Routed experts each token visits.")
    expert_ffn_hidden_size: int = Field(ge=1, le=8 * MAX_HIDDEN, description="FFN width of one routed expert.")
    shared_experts: int = Field(default=0, ge=0, le=64, description="Experts every token visits (DeepSeek, Llama 4).")
    shared_expert_ffn_hidden_size: int | None = Field(
        default=None,
        ge=1,
        le=8 * MAX_HIDDEN,
        description="FFN width of one shared expert; unset: expert_ffn_hidden_size.",
    )
    first_dense_layers: int = Field(default=0, ge=0, le=MAX_LAYERS, description="Leading layers with a dense MLP.")
    moe_layer_freq: int = Field(default=1, ge=1, le=MAX_LAYERS, description="Every n-th layer after those is MoE.")
    router: Router = Field(
        default="softmax", description="Gate scores: softmax (Mixtral, Qwen) or sigmoid (DeepSeek-V3)."
    )
    router_groups: int | None = Field(
        default=None, ge=1, le=65_536, description="Group-limited routing: expert groups (DeepSeek-V3 n_group)."
    )
    router_topk_groups: int | None = Field(
        default=None, ge=1, le=65_536, description="Groups a token may route to (DeepSeek-V3 topk_group)."
    )
    router_bias: bool = Field(default=False, description="A bias on the router linear (gpt-oss).")
    expert_bias: bool = Field(
        default=False,
        description="Biases on the routed experts' linears: gate, up (f each) and down (h) per expert (gpt-oss).",
    )
    swiglu_limit: float | None = Field(
        default=None,
        gt=0,
        le=1e4,
        description="gpt-oss's clamped SwiGLU in the routed experts (config.json swiglu_limit): gate clamped to "
        "≤ limit, up to [−limit, limit], output (up + 1)·gate·σ(1.702·gate); null: SwiGLU silu(gate)·up.",
    )
    capacity_factor: float | None = Field(
        default=None, gt=0, le=64, description="Tokens an expert takes, × its fair share; null: dropless."
    )
    drop_policy: DropPolicy = Field(
        default="probs",
        description="Which assignments an expert over its capacity keeps (Megatron-core --moe-token-drop-policy): "
        "probs, those of highest routing probability; position, those earliest in the rank's tokens (sequence "
        "position first, then the micro-batch row). Only with capacity_factor.",
    )
    pad_to_capacity: bool = Field(
        default=False,
        description="Pad every expert's input to its capacity (Megatron-core --moe-pad-expert-input-to-capacity): "
        "each expert computes, and the all-to-all moves, capacity rows whatever the load. Only with capacity_factor.",
    )
    load_imbalance: float = Field(
        default=1.0,
        ge=1.0,
        le=64,
        description="Routed tokens of the busiest expert-parallel rank ÷ its fair share (the planner prices that "
        "rank's expert GEMMs and all-to-all; capped by capacity_factor). 1: balanced, as benchmark runs force.",
    )

    @model_serializer(mode="wrap")
    def _drop_default_limit(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if data.get("swiglu_limit", 0) is None:  # left out at its default: MoE dumps (and hashes) as before
            del data["swiglu_limit"]
        if data.get("drop_policy") == "probs":  # likewise
            del data["drop_policy"]
        if data.get("pad_to_capacity") is False:  # likewise
            del data["pad_to_capacity"]
        return data

    @property
    def shared_ffn(self) -> int:
        return self.shared_expert_ffn_hidden_size or self.expert_ffn_hidden_size

    @model_validator(mode="after")
    def _check_routing(self) -> MoeSpec:
        if self.drop_policy != "probs" and self.capacity_factor is None:
            raise FieldValueError(
                "drop_policy",
                f"drop_policy={self.drop_policy!r} but no capacity_factor: a dropless mixture of experts drops "
                "nothing; set capacity_factor, or leave drop_policy at 'probs'",
            )
        if self.pad_to_capacity and self.capacity_factor is None:
            raise FieldValueError(
                "pad_to_capacity",
                "pad_to_capacity=true but no capacity_factor: an expert's input is padded to its capacity, which "
                "only a capacity factor sets (Megatron-core refuses it too); set capacity_factor, or drop "
                "pad_to_capacity",
            )
        if (
            self.pad_to_capacity
            and self.capacity_factor is not None
            and self.top_k * self.capacity_factor > self.num_experts
        ):
            raise FieldValueError(
                "pad_to_capacity",
                f"pad_to_capacity=true with capacity_factor={self.capacity_factor:g} × top_k={self.top_k} > "
                f"num_experts={self.num_experts}: the capacity exceeds the tokens an expert can get, so nothing is "
                "dropped and Megatron-core's drop-and-pad path (core_v0.16.1 moe_utils.permute) gathers fewer rows "
                "than the capacity × experts it sizes; use capacity_factor ≤ num_experts / top_k, or drop "
                "pad_to_capacity",
            )
        if self.top_k > self.num_experts:
            raise FieldValueError(
                "top_k",
                f"top_k={self.top_k} exceeds num_experts={self.num_experts}; route each token to at most "
                "num_experts experts (top_k ≤ num_experts)",
            )
        if (self.router_groups is None) != (self.router_topk_groups is None):
            raise ValueError(
                "router_groups and router_topk_groups go together; give both (group-limited routing) or neither"
            )
        if self.router_groups is not None and self.router_topk_groups is not None:
            if self.num_experts % self.router_groups:
                raise FieldValueError(
                    "router_groups",
                    f"router_groups={self.router_groups} does not divide num_experts={self.num_experts}; "
                    "use a divisor of num_experts",
                )
            if self.router_topk_groups > self.router_groups:
                raise FieldValueError(
                    "router_topk_groups",
                    f"router_topk_groups={self.router_topk_groups} exceeds router_groups={self.router_groups}; "
                    "use at most router_groups",
                )
            reachable = self.router_topk_groups * (self.num_experts // self.router_groups)
            if self.top_k > reachable:
                raise FieldValueError(
                    "top_k",
                    f"top_k={self.top_k} exceeds the {reachable} experts of router_topk_groups="
                    f"{self.router_topk_groups} groups; raise router_topk_groups or lower top_k",
                )
        return self


class MlaSpec(Spec):
    """Multi-head latent attention (DeepSeek-V2/V3, arXiv 2405.04434 §2.1): queries through a low-rank
    bottleneck of ``q_lora_rank`` (null: a full-rank query projection), keys and values through one of
    ``kv_lora_rank`` shared by all heads, plus a decoupled RoPE key of ``qk_rope_head_dim``; each head's query
    and key are qk_nope_head_dim + qk_rope_head_dim wide, its value ``v_head_dim``."""

    # never assigned to once built (``workload.ops.linears`` memoises by the model)
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    q_lora_rank: int | None = Field(default=None, ge=1, le=MAX_HIDDEN, description="Query bottleneck; null: none.")
    kv_lora_rank: int = Field(ge=1, le=MAX_HIDDEN, description="Key/value latent width.")
    qk_rope_head_dim: int = Field(ge=0, le=4096, description="Per-head rotary part of queries and keys.")
    qk_nope_head_dim: int = Field(ge=0, le=4096, description="Per-head non-rotary part of queries and keys.")
    v_head_dim: int = Field(ge=1, le=4096, description="Per-head value width.")

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


class ModelSpec(Spec):
    """A decoder-only transformer (GPT or Llama family), dense or a mixture of experts (``moe``)."""

    # never assigned to once built (``workload.ops.linears`` memoises by the model)
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    #: the stack's vocabulary padding multiple (``planner.specs.vocab``), set on the request's copy only
    _vocab_multiple: int = PrivateAttr(default=0)

    name: str = Field(min_length=1, max_length=128, description="Model id, e.g. 'llama3-70b'.")
    family: Family = Field(
        description="'gpt' (LayerNorm, GELU, learned positions) or 'llama' (RMSNorm, SwiGLU, RoPE, GQA)."
    )
    num_layers: int = Field(ge=1, le=MAX_LAYERS, description="Transformer blocks.")
    hidden_size: int = Field(ge=1, le=MAX_HIDDEN)
    num_attention_heads: int = Field(ge=1, le=4096)
    num_kv_heads: int = Field(ge=1, le=4096, description="Key/value heads (GQA); equal to num_attention_heads for MHA.")
    ffn_hidden_size: int = Field(ge=1, le=8 * MAX_HIDDEN, description="FFN width of the dense layers.")
    vocab_size: int = Field(ge=1, le=MAX_VOCAB)
    activation: Activation
    norm: Norm
    tie_embeddings: bool = False
    qkv_bias: bool = Field(
        default=False,
        description="Biases on the query/key/value projections only (Qwen2/2.5); "
        "GPT has biases on every linear whatever this says.",
    )
    max_seq_len: int = Field(
        ge=1,
        le=MAX_SEQ_LEN,
        description="Longest context the model was trained for (its config's max_position_embeddings).",
    )
    attention_head_dim: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="Width of one attention head when the query width (heads × head dim) is not hidden_size "
        "(Qwen3, gpt-oss, Llama 4: HF head_dim); unset: hidden_size / num_attention_heads.",
    )
    qk_norm: Literal["head", "projection"] | None = Field(
        default=None,
        description="RMSNorm on queries and keys: per head (Qwen3) or over the whole projection (OLMoE).",
    )
    attention_out_bias: bool = Field(default=False, description="A bias on the attention output projection (gpt-oss).")
    attention_sinks: bool = Field(default=False, description="A learned sink logit per head (gpt-oss).")
    sliding_window: int | None = Field(
        default=None,
        ge=1,
        le=MAX_SEQ_LEN,
        description="Sliding-window attention (Mistral 7B v0.1: 4096 on every layer; gpt-oss: 128 on every other "
        "layer): a windowed layer's query i attends keys i − w + 1 … i, min(i + 1, w) of them (transformers' "
        "sliding_window); null: every layer attends all earlier tokens.",
    )
    window_first_layer: int = Field(
        default=0,
        ge=0,
        le=MAX_LAYERS,
        description="First layer with the window (Qwen2's max_window_layers): layers before it attend fully.",
    )
    window_layer_freq: int = Field(
        default=1,
        ge=1,
        le=MAX_LAYERS,
        description="Every n-th layer from window_first_layer has the window (gpt-oss: 2, layers 0, 2, 4, …); "
        "1: all of them.",
    )
    rope_attention_factor: float = Field(
        default=1.0,
        ge=1.0,
        le=10.0,
        description="YaRN's attention factor on RoPE's cos and sin (gpt-oss: factor 32, 1 + 0.1·ln 32; "
        "workload.rope); 1: plain RoPE, or YaRN whose mscale equals mscale_all_dim (DeepSeek-V3).",
    )
    mla: MlaSpec | None = Field(default=None, description="Multi-head latent attention (DeepSeek-V3); null: MHA/GQA.")
    moe: MoeSpec | None = Field(default=None, description="Mixture-of-experts MLPs; null: a dense model.")

    @model_validator(mode="after")
    def _check_shapes(self) -> ModelSpec:
        if self.attention_head_dim is None and self.mla is None and self.hidden_size % self.num_attention_heads:
            raise FieldValueError(
                "num_attention_heads",
                f"num_attention_heads={self.num_attention_heads} must divide hidden_size={self.hidden_size}; "
                "choose a head count that divides the hidden size, or give attention_head_dim",
            )
        if self.num_attention_heads % self.num_kv_heads:
            raise FieldValueError(
                "num_kv_heads",
                f"num_kv_heads={self.num_kv_heads} must divide num_attention_heads={self.num_attention_heads}; "
                "use a divisor of the head count (equal to it for multi-head attention)",
            )
        if self.moe is not None:
            if self.family != "llama" or self.activation != "swiglu":
                raise FieldValueError(
                    "moe",
                    f"moe is given on a {self.family} model with {self.activation} MLPs; mixture-of-experts models "
                    "are of the llama family with SwiGLU experts: set family 'llama' and activation 'swiglu', or "
                    "drop moe",
                )
            if self.moe.first_dense_layers >= self.num_layers:
                raise FieldValueError(
                    "moe.first_dense_layers",
                    f"moe.first_dense_layers={self.moe.first_dense_layers} leaves no MoE layer of num_layers="
                    f"{self.num_layers}; use fewer dense layers than num_layers, or drop moe",
                )
        if self.mla is not None and self.num_kv_heads != self.num_attention_heads:
            raise FieldValueError(
                "num_kv_heads",
                f"mla is given with num_kv_heads={self.num_kv_heads} ≠ num_attention_heads="
                f"{self.num_attention_heads}; latent attention decompresses keys and values for every head: set "
                "num_kv_heads to num_attention_heads",
            )
        self._check_window()
        return self

    def _check_window(self) -> None:
        if self.sliding_window is None:
            for name in ("window_first_layer", "window_layer_freq"):
                if getattr(self, name) != _EXTRAS[name]:
                    raise FieldValueError(
                        name,
                        f"{name}={getattr(self, name)} is given without sliding_window; set sliding_window (the "
                        f"window in tokens) or drop {name}",
                    )
            return
        if self.window_first_layer >= self.num_layers:
            raise FieldValueError(
                "window_first_layer",
                f"window_first_layer={self.window_first_layer} leaves no windowed layer of num_layers="
                f"{self.num_layers}; use a layer below num_layers, or drop sliding_window",
            )
        if self.mla is not None:
            raise FieldValueError(
                "sliding_window",
                "sliding_window is given with latent attention (mla); no latent-attention model has windowed layers "
                "and meshplan does not price them: drop sliding_window or mla",
            )

    @model_serializer(mode="wrap")
    def _drop_default_extras(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for name, default in _EXTRAS.items():
            if name in data and data[name] == default:
                del data[name]
        return data

    @property
    def head_dim(self) -> int:
        if self.attention_head_dim is not None:
            return self.attention_head_dim
        return self.hidden_size // self.num_attention_heads

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer ``index`` (from 0) has MoE MLPs (``MoeSpec``'s rule)."""
        moe = self.moe
        if moe is None or index < moe.first_dense_layers:
            return False
        return (index - moe.first_dense_layers + 1) % moe.moe_layer_freq == 0

    def is_window_layer(self, index: int) -> bool:
        """Whether layer ``index`` (from 0) attends over the sliding window: index ≥ ``window_first_layer`` and
        (index − window_first_layer) a multiple of ``window_layer_freq``."""
        if self.sliding_window is None or index < self.window_first_layer:
            return False
        return (index - self.window_first_layer) % self.window_layer_freq == 0

    def window_at(self, seq_len: int) -> int | None:
        """The window of the windowed layers at sequences of ``seq_len`` tokens: None when no layer has one or
        the window spans the whole sequence (w ≥ s: the layer is plainly causal)."""
        w = self.sliding_window
        return w if w is not None and w < seq_len else None

    def window_layers(self) -> int:
        """How many layers have the window."""
        return sum(self.is_window_layer(i) for i in range(self.num_layers))


def llama_like(
    name: str, layers: int, hidden: int, heads: int, kv: int, ffn: int, vocab: int, seq: int, **extra: object
) -> ModelSpec:
    """A Llama-shaped model (RMSNorm, SwiGLU, untied embeddings) of the catalog; ``extra``: any other field (a QKV
    bias, ``moe``, ``mla``, the attention extras)."""
    return ModelSpec.model_validate(
        dict(
            name=name,
            family="llama",
            num_layers=layers,
            hidden_size=hidden,
            num_attention_heads=heads,
            num_kv_heads=kv,
            ffn_hidden_size=ffn,
            vocab_size=vocab,
            activation="swiglu",
            norm="rmsnorm",
            tie_embeddings=False,
            max_seq_len=seq,
            **extra,
        )
    )
