"""torchtitan's TP collectives as its 2025-06 code issues them (cost model 41): FP8 tensorwise all-gathers the
sequence-parallel activations in FP8 with their casts on the local shard (torchao ``Float8ColwiseParallel`` /
``Float8RowwiseParallel`` / ``PrepareFloat8ModuleInput`` at 6243040; torchtitan ``apply_tp`` at 820504e), and op-level
selective checkpointing reruns the forward's two all-gathers in backward (torchtitan ``_save_list`` at 820504e).
Checked against hand counts of the bytes each collective and cast moves."""

from __future__ import annotations

import pytest

from planner.answer.request import context, parse_request
from planner.specs import ModelSpec
from planner.specs.stacks import resolve
from planner.workload.collectives import Issuing, rerun_sp_gathers, tp_comms
from planner.workload.fp8 import cast_ops, fp8_tp_gather


def request(recipe: str | None = "tensorwise", tp: int = 8, sp: bool = True, stack: str = "torchtitan"):
    training = {"global_batch_size": 8, "seq_len": 8192, "precision": "fp8" if recipe else "bf16", "stack": stack}
    if recipe is not None:
        training["fp8_recipe"] = recipe
    parallel = {"tp": tp, "pp": 1, "dp": 8 // tp, "micro_batch_size": 1, "zero_stage": 3, "recompute": "full"}
    parallel["sequence_parallel"] = sp
    return {
        "model": "llama3-8b",
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
        "training": training,
        "parallel": parallel,
    }


def ctx_of(req):
    return context(parse_request(req))


@pytest.mark.parametrize(
    ("recipe", "tp", "sp", "expected"),
    [
        ("tensorwise", 8, True, True),  # Float8ColwiseParallel & co.: enable_float8_tensorwise_tp
        ("tensorwise", 2, True, True),
        ("rowwise", 8, True, False),  # plain ColwiseParallel / RowwiseParallel: 16-bit gathers
        ("tensorwise", 1, False, False),  # no TP, no gather
        ("tensorwise", 8, False, False),  # no sequence-parallel all-gather to run in FP8
        (None, 8, True, False),  # bf16
    ],
)
def test_fp8_tp_gather_by_recipe(recipe, tp, sp, expected):
    assert fp8_tp_gather(ctx_of(request(recipe, tp, sp)), tp, sp) is expected


MODEL = ModelSpec(
    name="m",
    family="llama",
    num_layers=2,
    hidden_size=1024,
    num_attention_heads=8,
    num_kv_heads=8,
    ffn_hidden_size=4096,
    vocab_size=32000,
    activation="swiglu",
    norm="rmsnorm",
    max_seq_len=8192,
)
MEGATRON = Issuing("megatron", "buckets", False)


def _bytes(comms):
    return sum(c.nbytes * c.count for c in comms)


@pytest.mark.parametrize(
    ("recompute", "rerun", "fp8", "fwd", "bwd"),
    [
        # (forward, backward) bytes of a block's collectives in units of one 16-bit residual-stream tensor A: per
        # pair one reduce-scatter (A) and one all-gather (A, or A/2 in FP8)
        ("none", False, False, 2 + 2, 2 + 2),
        ("none", False, True, 2 + 1, 2 + 1),
        ("selective", True, False, 2 + 2, 2 + 2 + 2),  # + the two forward all-gathers rerun
        ("selective", True, True, 2 + 1, 2 + 1 + 1),
        ("full", False, False, 2 + 2, 4 + 4),  # the whole forward rerun
        ("full", True, True, 2 + 1, 4 + 2),  # full recompute already reruns them: nothing more
    ],
)
def test_block_tp_bytes(recompute, rerun, fp8, fwd, bwd):
    act = 2.0 * 8192 * 1024
    gather = act / 2 if fp8 else act
    comms = tp_comms(MODEL, MEGATRON, act, 8, True, recompute, 8192, gather, rerun)
    assert _bytes(comms.fwd[0]) == pytest.approx(fwd * act)
    assert _bytes(comms.bwd[0]) == pytest.approx(bwd * act)


@pytest.mark.parametrize(
    ("stack", "recompute", "expected"),
    [
        ("torchtitan", "selective", True),  # selective_ac "op" (the preset's)
        ({"base": "torchtitan", "selective_ac": 2}, "selective", False),  # whole blocks: their forward reruns whole
        ("torchtitan", "full", False),
        ("torchtitan", "none", False),
        ("megatron", "selective", False),  # Megatron's selective recompute reruns the attention core alone
    ],
)
def test_rerun_sp_gathers_by_stack(stack, recompute, expected):
    assert rerun_sp_gathers(resolve(stack), recompute) is expected


@pytest.mark.parametrize(("tp", "sp"), [(8, True), (8, False), (2, True), (1, False)])
def test_casts_on_the_local_shard(tp, sp):
    """Tensorwise under torchtitan: the inputs of wq/wk/wv and of w1/w3 (the two gathered inputs) and the output
    gradients of wo and w2 are cast on T/tp rows where the gather runs in FP8; every other cast on T rows. 5 bytes an
    element (amax read 2, cast read 2 + write 1)."""
    ctx = ctx_of(request("tensorwise", tp, sp))
    fwd, bwd = cast_ops(ctx, "transformer_block", 1, tp, sp)
    m, t = ctx.model, 8192
    h, q, kv, f = m.hidden_size, m.num_attention_heads * m.head_dim, m.num_kv_heads * m.head_dim, m.ffn_hidden_size
    local = t // tp if tp > 1 and sp else t
    # distinct inputs: the attention input (h), wo's (q/tp), the FFN input (h), w2's (f/tp)
    inputs = local * h + t * q // tp + local * h + t * f // tp
    # output gradients: wq, wk, wv, w1, w3 (column-parallel, n/tp) on T rows; wo, w2 (n = h) on the shard
    grads = t * (q // tp + 2 * kv // tp + 2 * f // tp) + 2 * local * h
    assert next(o for o in fwd if o.name == "fp8_cast_input").nbytes == pytest.approx(5.0 * inputs)
    assert next(o for o in bwd if o.name == "fp8_cast_grad").nbytes == pytest.approx(5.0 * grads)
