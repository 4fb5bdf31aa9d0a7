"""Cost model 54: the Megatron-family presets' padded vocabulary over TP, fp32 main grads under FP8, apex's
parameter remainders; each against a hand count (planner/specs/vocab.py, workload/collectives.py grad_bytes,
compose/memory.py state_bytes)."""

from __future__ import annotations

import pytest

import planner.api as api
from planner.compose.memory import main_grad_bytes, state_bytes
from planner.specs.catalog import get_model
from planner.specs.stacks import STACKS, resolve
from planner.specs.vocab import local_vocab, padded_vocab, vocab_parallel, with_padding
from planner.workload.collectives import grad_bytes

# (stack, V, tp, rows on one TP rank by hand): Megatron pads V up to a multiple of 128 · tp, then splits it
VOCABS = [
    ("megatron", 50257, 1, 50304),  # 393 · 128
    ("megatron", 50257, 4, 12672),  # 99 · 512 = 50688, / 4
    ("megatron", 50257, 8, 6400),  # 50 · 1024 = 51200, / 8
    ("megatron", 128256, 8, 16128),  # 126 · 1024 = 129024, / 8 (Llama 3)
    ("megatron", 51200, 8, 6400),  # already a multiple: unchanged
    ("megatron-2020", 50257, 2, 25216),  # 197 · 256 = 50432, / 2
    ("megatron-2021", 50257, 8, 6400),
    ("megatron-2022", 32000, 8, 4096),  # 32 · 1024 = 32768, / 8
    ("nemo-2407", 256000, 8, 32000),  # Nemotron's 256000 = 250 · 1024
    ("nemo-2407", 32003, 4, 8064),  # 63 · 512 = 32256, / 4
    ("meshplan", 50257, 8, 50257),  # the bundled runtime's tp_plan: replicated when t does not divide V
    ("meshplan", 128256, 8, 16032),
    ("torchtitan", 50257, 4, 50257),
    ("deepspeed", 50257, 2, 50257),
]


@pytest.mark.parametrize("stack,vocab,tp,rows", VOCABS)
def test_local_vocab(stack, vocab, tp, rows):
    model = with_padding(get_model("llama3-8b").model_copy(update={"vocab_size": vocab}), STACKS[stack])
    assert local_vocab(model, tp) == rows
    pads = stack.startswith(("megatron", "nemo"))
    assert vocab_parallel(model, tp) == (tp > 1 and (pads or vocab % tp == 0))
    assert padded_vocab(model, tp) - vocab < (128 * tp if pads else 1)
    assert model.vocab_size == vocab  # the tokenizer's, for the source's own FLOP accounting


def test_an_overridden_megatron_stack_still_pads():
    stack = resolve({"base": "megatron", "dropout": True})
    model = with_padding(get_model("llama3-8b").model_copy(update={"vocab_size": 50257}), stack)
    assert stack.id.startswith("megatron+") and local_vocab(model, 8) == 6400


def _request(stack: str | dict, vocab: int, tp: int, precision: str = "bf16", zero: int = 0) -> dict:
    model = {
        "name": f"v{vocab}",
        "family": "llama",
        "num_layers": 4,
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "num_kv_heads": 8,
        "ffn_hidden_size": 8192,
        "vocab_size": vocab,
        "activation": "swiglu",
        "norm": "rmsnorm",
        "max_seq_len": 4096,
    }
    return {
        "model": model,
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
        "training": {"global_batch_size": 16, "seq_len": 2048, "precision": precision, "stack": stack},
        "parallel": {"tp": tp, "pp": 1, "micro_batch_size": 1, "zero_stage": zero},
        "options": {"memory_headroom": 0.0},
    }


# (stack, tokenizer V, tp, the V whose plain estimate it must equal: Megatron's padded one, or V itself)
SAME_AS = [
    ("megatron", 50257, 8, 51200),
    ("megatron", 50257, 4, 50688),
    ("nemo-2407", 50257, 8, 51200),
]


@pytest.mark.parametrize("stack,vocab,tp,padded", SAME_AS)
def test_a_padded_run_prices_as_the_padded_vocabulary(stack, vocab, tp, padded):
    """Step time and every memory figure of V on a padding stack equal those of the model with V_pad itself."""
    a, b = api.estimate(_request(stack, vocab, tp)), api.estimate(_request(stack, padded, tp))
    assert a.step_time_s == pytest.approx(b.step_time_s, rel=1e-12)
    assert a.memory_per_stage[0].model_dump() == b.memory_per_stage[0].model_dump()


def test_the_runtime_keeps_an_indivisible_vocabulary_whole():
    """meshplan: 50257 at TP 8 is replicated, so its weights hold 8 × the embedding and head rows of 51200 / 8 (less
    the 943 rows 51200 has more): weights(50257) − weights(51200) = 2 · h · (50257 − 6400) · 6 bytes by hand (the
    runtime's FSDP2 mixed precision at ZeRO-0: fp32 parameters and their bf16 copy)."""
    a, b = api.estimate(_request("meshplan", 50257, 8)), api.estimate(_request("meshplan", 51200, 8))
    diff = (a.memory_per_stage[0].weights_gib - b.memory_per_stage[0].weights_gib) * 2**30
    assert diff == pytest.approx(2 * 2048 * (50257 - 6400) * 6, rel=1e-6)


# (stack, precision, reduce bytes by hand): Megatron-core keeps fp32 main grads under --bf16, FP8 included
# (core_v0.16.1 arguments.py:711-724), unless --grad-reduce-in-bf16 (reduce_dtype param)
GRADS = [
    ("megatron", "bf16", 4),
    ("megatron", "fp8", 4),
    ("megatron", "fp16", 2),
    ("nemo-2407", "fp8", 4),  # apex's default grad_sync_dtype = optim.dtype fp32
    ({"base": "megatron", "reduce_dtype": "param"}, "fp8", 2),
    ({"base": "nemo-2407", "reduce_dtype": "param"}, "fp8", 2),  # the launcher's grad_sync_dtype=bf16
    ("megatron-2021", "fp16", 2),
    ("torchtitan", "fp8", 4),
    ("deepspeed", "fp8", 2),
]


@pytest.mark.parametrize("stack,precision,wire", GRADS)
def test_gradient_dtype(stack, precision, wire):
    s = resolve(stack)
    ge = grad_bytes(s, precision, 2)
    assert ge == wire
    assert main_grad_bytes(s, ge) == (wire if s.grad_add != "autograd" else 0)


@pytest.mark.parametrize("reduce,ratio", [(None, 2.0), ("param", 1.0)])
def test_fp8_megatron_gradients_are_fp32_main_grads(reduce, ratio):
    """ZeRO-1 on the megatron preset: the whole main-grad buffer over the 2-byte weights is 4 / 2 in fp32, 2 / 2
    with --grad-reduce-in-bf16."""
    stack = {"base": "megatron"} | ({"reduce_dtype": reduce} if reduce else {})
    m = api.estimate(_request(stack, 51200, 2, "fp8", zero=1)).memory_per_stage[0]
    assert m.gradients_gib / m.weights_gib == pytest.approx(ratio, rel=1e-9)


def apex(grad_sync: int, d: int, remainders: bool = True) -> float:
    """apex 810ffae DistributedFusedAdam buffers at an activation peak, bytes per parameter: the bf16 parameter, the
    whole contiguous grad buffer (grad_sync_dtype), per DP shard the int16 remainder (store_param_remainders) and the
    fp32 exp_avg and exp_avg_sq; an fp32 master copy (4) instead of the remainder with store_params."""
    return 2 + grad_sync + ((2 if remainders else 4) + 4 + 4) / d


# (precision, zero stage, dp, main-grad bytes, optimizer dtype, bytes per parameter by hand)
STATES = [
    ("bf16", 1, 8, 2, "remainders", apex(2, 8)),  # GPT3-20B-like: grad_sync_dtype bf16, K = 10
    ("fp8", 1, 32, 4, "remainders", apex(4, 32)),  # Nemotron-8B-like: apex's fp32 grad_sync default
    ("bf16", 1, 8, 2, "fp32", apex(2, 8, remainders=False)),  # store_params (fp8_params): fp32 masters, 12
    ("bf16", 0, 8, 4, "remainders", 2 + 4 + 12),  # ZeRO-0 runs fused_adam with fp32 masters
    ("fp16", 1, 8, 2, "remainders", apex(2, 8, remainders=False)),  # remainders need bf16 parameters
    ("bf16", 1, 2, 2, "param", 2 + 2 + (2 + 2) / 2),  # bf16 moments, no master, no gradient shard at the peak
]


@pytest.mark.parametrize("precision,zero,dp,main,dtype,expected", STATES)
def test_apex_states(precision, zero, dp, main, dtype, expected):
    assert state_bytes(precision, "adam", zero, dp, "master", 0, main, dtype).total == pytest.approx(expected)


def test_nemo_preset_keeps_remainders_by_default():
    assert STACKS["nemo-2407"].optimizer_dtype == "remainders" and STACKS["megatron"].optimizer_dtype == "fp32"
