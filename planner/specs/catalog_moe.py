"""The catalog's mixture-of-experts models (``planner.specs.catalog.MODELS`` holds them with the dense ones), each
from its released Hugging Face ``config.json`` (the copies under ``tests/data/hf_configs/`` for those we hold;
``tests/test_catalog_moe.py`` checks both the config's translation and the published total/active counts).

All are Llama-shaped (RMSNorm, SwiGLU experts, RoPE, GQA or latent attention), untied embeddings. Which layers
are MoE follows ``MoeSpec`` (first_dense_layers, moe_layer_freq). What a spec leaves out (no parameters, or none
the planner prices yet): Llama 4's NoPE layers and chunked attention, DeepSeek-V3's multi-token-prediction
module (14B, outside its published 671B) and routed scale."""

from __future__ import annotations

from planner.specs.model import MlaSpec, ModelSpec, MoeSpec, llama_like
from planner.specs.rope import yarn_attention_factor


def _moe(
    name: str,
    layers: int,
    hidden: int,
    heads: int,
    kv: int,
    ffn: int,
    vocab: int,
    seq: int,
    moe: MoeSpec,
    **extra: object,
) -> ModelSpec:
    return llama_like(name, layers, hidden, heads, kv, ffn, vocab, seq, moe=moe, **extra)


def _gpt_oss(name: str, layers: int, experts: int) -> ModelSpec:
    # openai/gpt-oss-{20b,120b} config.json: hidden 2880, 64 heads of 64, 8 KV heads, experts of 2880 (top-4),
    # vocab 201088, context 131072; biases on Q/K/V/O, the router and the experts; a sink logit per head; the
    # experts' SwiGLU clamped at 7 (swiglu_limit); layer_types: a 128-token sliding window on layers 0, 2, 4, …
    # (the others attend fully).
    return _moe(
        name,
        layers,
        2880,
        64,
        8,
        2880,
        201088,
        131072,
        MoeSpec(
            num_experts=experts,
            top_k=4,
            expert_ffn_hidden_size=2880,
            router_bias=True,
            expert_bias=True,
            swiglu_limit=7.0,
        ),
        attention_head_dim=64,
        qkv_bias=True,
        attention_out_bias=True,
        attention_sinks=True,
        sliding_window=128,
        window_layer_freq=2,
        rope_attention_factor=yarn_attention_factor(32.0),  # rope_scaling: yarn, factor 32, no mscale pair
    )


MOE_MODELS: list[ModelSpec] = [
    # mistralai/Mixtral-8x7B-v0.1 config.json (num_local_experts 8, num_experts_per_tok 2, intermediate 14336).
    _moe(
        "mixtral-8x7b",
        32,
        4096,
        32,
        8,
        14336,
        32000,
        32768,
        MoeSpec(num_experts=8, top_k=2, expert_ffn_hidden_size=14336),
    ),
    # mistralai/Mixtral-8x22B-v0.1 config.json (56 layers, hidden 6144, 48 heads, intermediate 16384, context 65536).
    _moe(
        "mixtral-8x22b",
        56,
        6144,
        48,
        8,
        16384,
        32000,
        65536,
        MoeSpec(num_experts=8, top_k=2, expert_ffn_hidden_size=16384),
    ),
    # Qwen/Qwen3-30B-A3B and Qwen3-235B-A22B config.json: head_dim 128 (query width ≠ hidden), QK-norm per head,
    # 128 experts top-8, no shared expert; context 40960 (the 2507 releases: 262144).
    _moe(
        "qwen3-30b-a3b",
        48,
        2048,
        32,
        4,
        6144,
        151936,
        40960,
        MoeSpec(num_experts=128, top_k=8, expert_ffn_hidden_size=768),
        attention_head_dim=128,
        qk_norm="head",
    ),  # fmt: skip
    _moe(
        "qwen3-235b-a22b",
        94,
        4096,
        64,
        4,
        12288,
        151936,
        40960,
        MoeSpec(num_experts=128, top_k=8, expert_ffn_hidden_size=1536),
        attention_head_dim=128,
        qk_norm="head",
    ),  # fmt: skip
    # deepseek-ai/DeepSeek-V3 config.json and arXiv 2412.19437 §2: 3 dense layers (18432) then 58 MoE layers of
    # 256 routed experts (2048, top-8, sigmoid, 8 groups / top-4) + 1 shared; latent attention.
    _moe(
        "deepseek-v3",
        61,
        7168,
        128,
        128,
        18432,
        129280,
        163840,
        MoeSpec(
            num_experts=256,
            top_k=8,
            expert_ffn_hidden_size=2048,
            shared_experts=1,
            first_dense_layers=3,
            router="sigmoid",
            router_groups=8,
            router_topk_groups=4,
        ),
        mla=MlaSpec(q_lora_rank=1536, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128),
    ),  # fmt: skip
    _gpt_oss("gpt-oss-20b", 24, 32),
    _gpt_oss("gpt-oss-120b", 36, 128),
    # allenai/OLMoE-1B-7B-0924 config.json: 64 experts of 1024, top-8, QK-norm over the projections.
    _moe(
        "olmoe-1b-7b",
        16,
        2048,
        16,
        16,
        1024,
        50304,
        4096,
        MoeSpec(num_experts=64, top_k=8, expert_ffn_hidden_size=1024),
        qk_norm="projection",
    ),  # fmt: skip
    # meta-llama/Llama-4-Scout-17B-16E text_config: 48 MoE layers of 16 experts (8192, top-1, sigmoid) + 1
    # shared expert (8192); 10M context. Maverick (17B-128E): 128 experts in every other layer
    # (interleave_moe_layer_step 2), the others dense of intermediate_size_mlp 16384; 1M context.
    _moe(
        "llama4-scout",
        48,
        5120,
        40,
        8,
        16384,
        202048,
        10485760,
        MoeSpec(num_experts=16, top_k=1, expert_ffn_hidden_size=8192, shared_experts=1, router="sigmoid"),
        attention_head_dim=128,
    ),  # fmt: skip
    _moe(
        "llama4-maverick",
        48,
        5120,
        40,
        8,
        16384,
        202048,
        1048576,
        MoeSpec(
            num_experts=128,
            top_k=1,
            expert_ffn_hidden_size=8192,
            shared_experts=1,
            router="sigmoid",
            moe_layer_freq=2,
        ),
        attention_head_dim=128,
    ),  # fmt: skip
    # Tiny mixtures of experts for tests and CPU runs of the bundled runtime (8 layers like tiny-llama, so pipelines
    # of up to 8 stages fit; 8 experts, so EP 2/4/8 divide them). tiny-moe: Mixtral-style (softmax router, top-2,
    # auxiliary balance loss, every layer MoE); tiny-moe-shared: DeepSeek-style (sigmoid router with aux-loss-free
    # expert bias, group-limited routing over 4 groups of which 2, one shared expert, a leading dense layer).
    _moe("tiny-moe", 8, 64, 8, 4, 192, 256, 128, MoeSpec(num_experts=8, top_k=2, expert_ffn_hidden_size=64)),
    _moe(
        "tiny-moe-shared",
        8,
        64,
        8,
        4,
        192,
        256,
        128,
        MoeSpec(
            num_experts=8,
            top_k=2,
            expert_ffn_hidden_size=32,
            shared_experts=1,
            shared_expert_ffn_hidden_size=64,
            first_dense_layers=1,
            router="sigmoid",
            router_groups=4,
            router_topk_groups=2,
        ),
    ),  # fmt: skip
]
