"""Training stacks (planner/stacks.py) and the per-op physics they feed (planner/kernels.py, analytic.py)."""

from __future__ import annotations

import pytest

import planner
from planner.analytic import saved_activation_bytes
from planner.catalog import get_model, sm_count
from planner.kernels import wave_efficiency
from planner.specs import ModelSpec, TrainingSpec
from planner.stacks import OVERRIDABLE, STACKS, resolve

GPT = ModelSpec(
    name="gpt-test",
    family="gpt",
    num_layers=2,
    hidden_size=4096,
    num_attention_heads=32,
    num_kv_heads=32,
    ffn_hidden_size=16384,
    vocab_size=51200,
    activation="gelu",
    norm="layernorm",
    tie_embeddings=True,
    max_seq_len=2048,
)


@pytest.mark.parametrize(
    "m, n, sms, batch, expected",
    [
        # 4096×4096 output: 32·32 = 1024 tiles of 128×128 on 108 SMs: ⌈1024/108⌉ = 10 waves → 1024/1080
        (4096, 4096, 108, 1, 1024 / 1080),
        # 256×4096 on 132 SMs: 2·32 = 64 tiles in one wave of 132 → 64/132
        (256, 4096, 132, 1, 64 / 132),
        # 200×128: padded to 256×128 (200/256), 2 tiles on 132 SMs
        (200, 128, 132, 1, (200 / 256) * 2 / 132),
        # batched: 16 heads of 1024×1024 = 16·64 tiles = 1024 on 132 SMs: 8 waves (1056 slots)
        (1024, 1024, 132, 16, 1024 / 1056),
        (4096, 4096, None, 1, 1.0),  # unknown SM count: tile padding only
    ],
)
def test_wave_quantization_hand_examples(m, n, sms, batch, expected):
    assert wave_efficiency(m, n, sms, batch) == pytest.approx(expected)


@pytest.mark.parametrize(
    "gpu, sms",
    [
        ("a100-sxm4-80gb", 108),
        ("h100-sxm5-80gb", 132),
        ("h200-sxm-141gb", 132),
        ("b200-sxm-192gb", 148),
        ("h100-96gb-custom", 132),
        ("mi300x", None),
    ],
)
def test_sm_count(gpu, sms):
    assert sm_count(gpu) == sms


@pytest.mark.parametrize(
    "field, value",
    [
        ("attention", "unfused"),
        ("dropout", True),
        ("activations", "te"),
        ("kernels", "fused"),
        ("overlap_grad_reduce", False),
    ],
)
def test_override_changes_exactly_the_field_it_names(field, value):
    base = STACKS["meshplan"]
    got = resolve(TrainingSpec(global_batch_size=1, seq_len=8, stack={"base": "meshplan", field: value}).stack)
    assert getattr(got, field) == value
    for other in OVERRIDABLE:
        if other != field:
            assert getattr(got, other) == getattr(base, other)
    assert got.id.startswith("meshplan+")


def test_preset_ids_and_default():
    assert resolve(TrainingSpec(global_batch_size=1, seq_len=8).stack) is STACKS["meshplan"]
    assert set(STACKS) == {"meshplan", "megatron", "torchtitan", "deepspeed"}
    with pytest.raises(ValueError):
        TrainingSpec(global_batch_size=1, seq_len=8, stack="nope")


S, B = 2048, 1


@pytest.mark.parametrize(
    "tp, sp, attention, dropout, korthikanti",
    [
        # Korthikanti et al. 2022 (MLSys'23) Table 2 / §4: bytes per layer
        (1, False, "unfused", True, lambda s, b, h, a, t: s * b * h * 34 + 5 * a * s * s * b),
        (8, False, "unfused", True, lambda s, b, h, a, t: s * b * h * (10 + 24 / t) + 5 * a * s * s * b / t),
        (8, True, "unfused", True, lambda s, b, h, a, t: (s * b * h * 34 + 5 * a * s * s * b) / t),
        # flash attention, no dropout (TE today): 34 − 2 masks = 32, plus the fp32 log-sum-exp 4·s·b·a/t
        (8, True, "flash", False, lambda s, b, h, a, t: s * b * h * 32 / t + 4 * s * b * a / t),
    ],
)
def test_te_activations_match_korthikanti(tp, sp, attention, dropout, korthikanti):
    got = saved_activation_bytes(
        GPT,
        "transformer_block",
        B,
        S,
        tp,
        sp,
        "fp16",
        resolve({"base": "megatron", "attention": attention, "dropout": dropout}),
    ).none
    want = korthikanti(S, B, GPT.hidden_size, GPT.num_attention_heads, tp)
    assert got == pytest.approx(want, rel=0.01)  # LayerNorm's fp32 statistics (16 B/token) are the rest


def test_te_keeps_less_than_the_zoo_for_llama():
    m = get_model("llama3-70b")
    zoo = saved_activation_bytes(m, "transformer_block", 1, 4096, 4, True, "bf16").none
    te = saved_activation_bytes(m, "transformer_block", 1, 4096, 4, True, "bf16", STACKS["megatron"]).none
    # TE formula (sbh/t)(12 + 4g/a + 6f/h) + 4·T·a/t (perf-model note §6: 281 MB vs 575 MB eager)
    h, f, a, g, t, T, d, e = 8192, 28672, 64, 8, 4, 4096, 128, 2
    assert te == pytest.approx(T * h / t * (12 + 4 * g / a + 6 * f / h) + 4 * T * a / t, rel=0.01)
    # The bundled runtime since its fused RMSNorm (input + fp32 1/rms) and GQA SDPA on unrepeated K/V:
    # 445 MB (575 MB with the composite norm and repeated K/V). What TE still saves over it: QKV and FFN
    # inputs kept sequence-sharded, SwiGLU's 3 tensors instead of 4.
    lean = (
        2 * T / t * (h * e + 4)  # two RMSNorms: input + fp32 1/rms, sequence-sharded
        + 2 * T * h * e  # QKV and FFN inputs, gathered
        + T * (a + 2 * g) * d / t * e  # Q at a/t heads, K and V at g/t heads
        + 2 * 2 * 4096 * (d // 2) * 4  # RoPE cos/sin tables (fp32), two calls
        + T * a * d / t * e  # attention output
        + T * a / t * 4  # log-sum-exp
        + 4 * T * f / t * e  # SwiGLU: w1 out, silu out, w3 out, product
    )
    assert zoo == lean
    assert te < 0.65 * zoo


REQ = {
    "model": "llama3-8b",
    "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
    "training": {"global_batch_size": 32, "seq_len": 4096},
}


@pytest.mark.parametrize(
    "stack, field, fix",
    [
        ("nope", "training.stack", "meshplan, megatron, torchtitan, deepspeed"),
        ({"base": "megatron", "attention": "sdpa"}, "training.stack.attention", "flash, unfused"),
        ({"base": "titan"}, "training.stack.base", "torchtitan"),
        ({"base": "megatron", "fused": True}, "training.stack.fused", "attention"),
    ],
)
def test_bad_stack_names_the_field_and_the_fix(stack, field, fix):
    """One error per mistake, naming the field and the fix (what the CLI prints with exit 2 and the
    service returns as a 422 problem body: both go through ``planner.errors.validation_errors``)."""
    from pydantic import ValidationError

    from planner.errors import validation_errors
    from planner.specs import PlanRequest

    with pytest.raises(ValidationError) as info:
        PlanRequest.model_validate({**REQ, "training": {**REQ["training"], "stack": stack}})
    errors = validation_errors(info.value, model=PlanRequest)
    assert len(errors) == 1 and errors[0]["field"] == field and fix in errors[0]["fix"], errors


def test_a_stack_moves_the_estimate_and_is_named_in_the_explanation():
    """Same configuration, three stacks: TE's activations are smaller than the eager runtime's, unfused
    attention is slower than flash; the plan's explanation says which stack priced it."""
    pins = {"tp": 2, "pp": 1, "dp": 4, "micro_batch_size": 1, "sequence_parallel": True, "zero_stage": 1}
    est = {}
    for name, stack in [("meshplan", "meshplan"), ("megatron", "megatron"), ("unfused", {"attention": "unfused"})]:
        req = {**REQ, "training": {**REQ["training"], "stack": stack}, "parallel": pins}
        est[name] = planner.estimate_plan(req)
    assert est["megatron"].estimate.peak_memory_gib < est["meshplan"].estimate.peak_memory_gib
    assert est["unfused"].estimate.step_time_s > est["meshplan"].estimate.step_time_s
    planned = planner.plan({**REQ, "training": {**REQ["training"], "stack": "megatron"}, "top_k": 1})
    assert any("priced for the training stack megatron" in d for d in planned.plans[0].explanation.details)
