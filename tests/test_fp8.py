"""FP8 training (issue 24): the recipe checks, which GEMMs run in FP8, the casts priced as memory-bound ops, FP8
FSDP all-gathers and FP8 state in memory, and the exports."""

from __future__ import annotations

import pytest

from api.exporters import export
from api.exporters.base import ExportOptions
from planner.answer.request import context, parse_request
from planner.api import estimate, estimate_plan
from planner.pricing.gpu import FP8_GEMM_EFFICIENCY, gemm_time
from planner.specs.errors import MeshplanError
from planner.workload.fp8 import cast_ops, fp8_linears, fp8_state_bytes, gathered_params


def request(
    precision: str = "fp8", recipe: str | None = None, stack: str = "torchtitan", gpu: str = "h100-sxm5-80gb", **par
):
    training = {"global_batch_size": 64, "seq_len": 8192, "precision": precision, "stack": stack}
    if recipe is not None:
        training["fp8_recipe"] = recipe
    parallel = {"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 1, "zero_stage": 3, "recompute": "full"} | par
    return {
        "model": "llama3-8b",
        "cluster": {"gpu": gpu, "num_nodes": 1, "gpus_per_node": 8},
        "training": training,
        "parallel": parallel,
    }


def ctx_of(req):
    return context(parse_request(req))


@pytest.mark.parametrize(
    ("kwargs", "field", "words"),
    [
        ({"gpu": "a100-sxm4-80gb"}, "training.precision", "h100-sxm5-80gb"),
        ({"gpu": "v100-sxm3-32gb"}, "training.precision", "no FP8"),
        ({"recipe": "mxfp8"}, "training.fp8_recipe", "Blackwell"),
        ({"recipe": "delayed"}, "training.fp8_recipe", "megatron"),
        ({"stack": "deepspeed", "zero_stage": 1}, "training.precision", "does not train in FP8"),
        ({"stack": "meshplan", "recipe": "delayed"}, "training.fp8_recipe", "tensorwise, rowwise"),
    ],
)
def test_refusals_name_the_field(kwargs, field, words):
    with pytest.raises(MeshplanError) as err:
        estimate(request(**kwargs))
    assert err.value.field == field
    assert words in err.value.message + err.value.fix


def test_recipe_without_fp8_is_a_validation_error():
    with pytest.raises(ValueError, match="training.fp8_recipe"):
        parse_request(request(precision="bf16", recipe="rowwise"))


def test_mxfp8_on_blackwell():
    est = estimate(request(recipe="mxfp8", gpu="b200-sxm-192gb"))
    assert est.step_time_s > 0


def test_block_linears_in_fp8_head_not():
    ctx = ctx_of(request())
    assert ctx.fp8_recipe == "tensorwise"  # torchtitan's default
    assert all(lin.fp8 for lin in fp8_linears(ctx, "transformer_block", 1))
    assert not any(lin.fp8 for lin in fp8_linears(ctx, "lm_head", 1))
    assert not any(lin.fp8 for lin in fp8_linears(ctx_of(request(precision="bf16")), "transformer_block", 1))


def test_fp8_gemm_rate():
    ctx = ctx_of(request())
    big = 8192
    ratio = gemm_time(ctx, big, big, big) / gemm_time(ctx, big, big, big, fp8=True)
    # 2× peak × (0.709 ÷ 0.80): the measured best-shape FP8/BF16 ratio 1.77× (mamf-finder)
    assert ratio == pytest.approx(2 * FP8_GEMM_EFFICIENCY["h100"] / 0.80, rel=1e-3)


def test_casts_by_recipe():
    tw = ctx_of(request(recipe="tensorwise"))
    rw = ctx_of(request(recipe="rowwise"))
    fwd_tw, bwd_tw = cast_ops(tw, "transformer_block", 1, 1)
    fwd_rw, bwd_rw = cast_ops(rw, "transformer_block", 1, 1)
    assert sum(o.nbytes for o in fwd_tw) == sum(o.nbytes for o in fwd_rw)
    assert sum(o.nbytes for o in bwd_rw) > sum(o.nbytes for o in bwd_tw)  # rowwise casts the other axis again
    assert cast_ops(tw, "lm_head", 1, 1) == ((), ())
    # the input of wq/wk/wv and of w1/w3 is cast once: 4 distinct inputs, T × (h + q + h + f) elements
    m, t = tw.model, 8192
    inputs = t * (2 * m.hidden_size + m.num_attention_heads * m.head_dim + m.ffn_hidden_size)
    assert fwd_tw[0].nbytes == pytest.approx(5.0 * inputs)


def test_fp8_faster_than_bf16_and_rowwise_slower_than_tensorwise():
    bf16 = estimate(request(precision="bf16")).step_time_s
    tw = estimate(request(recipe="tensorwise")).step_time_s
    rw = estimate(request(recipe="rowwise")).step_time_s
    # torchtitan Llama 3.1 8B, 8 H100, FSDP + compile: 1.28× with Float8 (benchmarks/llama3_h100_202412_torchtitan.md)
    assert 1.1 < bf16 / tw < 1.6
    assert tw < rw < bf16


def test_fp8_all_gather_and_state():
    tw = ctx_of(request(recipe="tensorwise"))
    rw = ctx_of(request(recipe="rowwise"))
    params = (10**9, 10**6, 10**6)
    assert gathered_params(tw, params, 1)[0] < params[0]  # FP8 weights gathered at 1 byte
    assert gathered_params(rw, params, 1) == params  # rowwise gathers in high precision
    te = ctx_of(request(recipe="delayed", stack="megatron", zero_stage=1))
    lin = sum(x.n * x.k for x in fp8_linears(te, "transformer_block", 1))
    assert fp8_state_bytes(te, 1) >= 2 * lin  # TE's cached FP8 weight and transpose
    assert fp8_state_bytes(tw, 1) < 1024 * 7  # torchao: scales only


def test_exports():
    opts = ExportOptions()
    mg = export(estimate_plan(request(recipe="current", stack="megatron", zero_stage=1)), "megatron", opts).content
    assert "--fp8-format hybrid" in " ".join(mg.split()) and "--fp8-recipe tensorwise" in " ".join(mg.split())
    plan = estimate_plan(request(recipe="tensorwise"))
    toml = export(plan, "torchtitan-toml", opts).content
    assert 'converters = [\n    "float8",\n]' in toml and "enable_fsdp_float8_all_gather = true" in toml
    with pytest.raises(MeshplanError) as err:
        export(plan, "deepspeed", opts)
    assert err.value.field == "training.precision"
    with pytest.raises(MeshplanError) as err:
        export(estimate_plan(request(recipe="rowwise")), "megatron", opts)
    assert err.value.field == "training.fp8_recipe"


@pytest.mark.parametrize(
    ("recipe", "tp"),
    [("rowwise", 1), ("rowwise", 2), ("rowwise", 8), ("tensorwise", 1), ("tensorwise", 8)],
)
def test_rowwise_rescales_the_backward_gemm_outputs(recipe, tp):
    """torchao rowwise (float8_ops.py ``addmm_float8_unwrapped``): both backward GEMMs run as cuBLAS tensorwise with
    unit scales, then ``output *= a_inv * b_inv`` reads and writes the 16-bit output — 4 bytes per element of each
    linear's input gradient (T × k) and weight gradient (n × k) on the rank; tensorwise scales inside the GEMM."""
    ctx = ctx_of(request(recipe=recipe, tp=tp, dp=8 // tp, sequence_parallel=tp > 1))
    _, bwd = cast_ops(ctx, "transformer_block", 1, tp)
    rescale = [o for o in bwd if o.name == "fp8_rowwise_rescale"]
    if recipe != "rowwise":
        assert rescale == []
        return
    m, t = ctx.model, 8192
    h, q, kv, f = m.hidden_size, m.num_attention_heads * m.head_dim, m.num_kv_heads * m.head_dim, m.ffn_hidden_size
    # (k, n) per linear on one TP rank: wq, wk, wv, w1, w3 column-parallel (n / tp); wo, w2 row-parallel (k / tp)
    shapes = [(h, q // tp), (h, kv // tp), (h, kv // tp), (q // tp, h), (h, f // tp), (h, f // tp), (f // tp, h)]
    expected = 4.0 * sum(t * k + n * k for k, n in shapes)
    assert len(rescale) == 1
    assert rescale[0].nbytes == pytest.approx(expected)
    assert rescale[0].kernels == 2 * len(shapes)


@pytest.mark.parametrize(
    ("model", "tp", "sp"),
    [("llama3-8b", 1, False), ("llama3-70b", 4, True), ("llama3-70b", 8, False), ("gpt3-175b", 8, True)],
)
def test_te_keeps_fp8_linear_inputs_at_one_byte(model, tp, sp):
    """Megatron-core + TE under FP8 (TE v2.9 layernorm_linear.py / linear.py): the two norm outputs the QKV and fc1
    GEMMs read are saved at 1 byte (not 2), fc2's input (the activation output, f/t a token) at 1 byte, and the proj
    keeps a 1-byte copy of its input beside the 16-bit attention output — a block saves, per token,
    (2·h/sp + f/t) bytes less and a·d/t more than under bf16."""
    from planner.specs.catalog import get_model
    from planner.specs.stacks import STACKS
    from planner.workload.activations import saved_activation_bytes as activation_bytes

    m = get_model(model)
    args = ("transformer_block", 1, 4096, tp, sp)
    bf16 = activation_bytes(m, *args, precision="bf16", stack=STACKS["megatron"])
    fp8 = activation_bytes(m, *args, precision="fp8", stack=STACKS["megatron"])
    t, s = 4096, (tp if sp else 1)
    fewer = t * (2 * m.hidden_size / s + m.ffn_hidden_size / tp)
    more = t * m.num_attention_heads * m.head_dim / tp
    assert bf16.none - fp8.none == pytest.approx(fewer - more, abs=2)
    assert fp8.full == bf16.full  # full recompute keeps the block input (16-bit)
    # the other stacks (torchao keeps the 16-bit inputs for its casts in backward) are unchanged
    for stack in ("torchtitan", "meshplan"):
        a = activation_bytes(m, *args, precision="bf16", stack=STACKS[stack])
        b = activation_bytes(m, *args, precision="fp8", stack=STACKS[stack])
        assert a == b
