"""Training stacks (planner/stacks.py) and the per-op physics they feed (planner/kernels.py, analytic.py)."""

from __future__ import annotations

import pytest

import planner
from planner.pricing.gpu import wave_efficiency
from planner.specs import ModelSpec, TrainingSpec
from planner.specs.catalog import get_model, sm_count
from planner.specs.stacks import OVERRIDABLE, STACKS, resolve
from planner.workload.analytic import saved_activation_bytes

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
        ("flash_kernel", "triton"),
        ("dropout", True),
        ("activations", "te"),
        ("kernels", "fused"),
        ("overlap_grad_reduce", False),
        ("nccl", "2.10"),
        ("grad_accumulation", "fsdp1"),
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
    assert set(STACKS) == {
        "meshplan",
        "megatron",
        "torchtitan",
        "deepspeed",
        "megatron-2020",
        "megatron-2021",
        "megatron-2022",
        "deepspeed-2021",
        "nemo-2407",
        "torchtitan-2404",
        "torchtitan-2408",
        "torchtitan-2412",
    }
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
        ({"base": "torchtitan", "selective_ac": 0}, "training.stack.selective_ac", '"op"'),
        ({"base": "torchtitan", "selective_ac": "layer"}, "training.stack.selective_ac", "every k-th block"),
        ({"base": "torchtitan", "kernels": "inductor"}, "training.stack.kernels", "compiled"),
        ({"base": "torchtitan", "norm_kernel": "triton"}, "training.stack.norm_kernel", "eager, fused"),
    ],
)
def test_bad_stack_names_the_field_and_the_fix(stack, field, fix):
    """One error per mistake, naming the field and the fix (what the CLI prints with exit 2 and the
    service returns as a 422 problem body: both go through ``planner.specs.errors.validation_errors``)."""
    from pydantic import ValidationError

    from planner.specs import PlanRequest
    from planner.specs.errors import validation_errors

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


# --- torchtitan (stack activations "titan") ---------------------------------------------------------

LLAMA8B = dict(h=4096, a=32, g=8, d=128, f=14336)


def _titan_table(b, s, t, norm="eager", e=2):
    """Tensor by tensor, what torchtitan's eager Llama block (models/llama/model.py at 9dec370) keeps for
    backward on one TP rank (SP on when t > 1): (name, elements, bytes per element). Written from the
    model code, independently of planner/activations.py."""
    h, a, g, d, f = (LLAMA8B[k] for k in "hagdf")
    T, ts = b * s, b * s // t  # tokens; sequence-sharded tokens
    norm_rows = (
        [("x.float()", ts * h, 4), ("rsqrt", ts, 4), ("normalised·weight input", ts * h, e)]
        if norm == "eager"
        else [("fused_rmsnorm x", ts * h, e), ("rstd", ts, 4)]
    )
    none = [
        *norm_rows,
        ("wq/wk/wv input (all-gathered)", T * h, e),
        ("sdpa q", T * a // t * d, e),
        ("sdpa k repeated", T * a // t * d, e),
        ("sdpa v repeated", T * a // t * d, e),
        ("sdpa out (= wo input)", T * a // t * d, e),
        ("sdpa logsumexp", T * a // t, 4),
        *norm_rows,
        ("w1/w3 input (all-gathered)", T * h, e),
        ("w1 out", T * f // t, e),
        ("silu out", T * f // t, e),
        ("w3 out", T * f // t, e),
        ("silu·w3 (w2 input)", T * f // t, e),
    ]
    sac = [
        ("checkpoint input x", ts * h, e),
        ("mm 1 wq", T * a // t * d, e),
        ("mm 3 wv", T * g // t * d, e),
        ("sdpa out", T * a // t * d, e),
        ("sdpa logsumexp", T * a // t, 4),
        ("mm 5 w1", T * f // t, e),
        ("mm 7 w2 (before reduce-scatter)", T * h, e),
    ] + ([("reduce_scatter wo, w2", 2 * ts * h, e)] if t > 1 else [])
    total = lambda rows: sum(n * by for _, n, by in rows)  # noqa: E731
    return total(none), total(sac), ts * h * e


@pytest.mark.parametrize("b, s, tp", [(2, 8192, 1), (1, 8192, 8), (12, 8192, 8), (1, 4096, 2)])
@pytest.mark.parametrize("norm", ["eager", "fused"])
def test_titan_activations_match_the_tensor_table(b, s, tp, norm):
    m = get_model("llama3-8b")
    stack = resolve({"base": "torchtitan", "norm_kernel": norm})
    got = saved_activation_bytes(m, "transformer_block", b, s, tp, tp > 1, "bf16", stack)
    none, sac, full = _titan_table(b, s, tp, norm)
    assert (got.none, got.selective, got.full) == (none, sac, full)


def test_titan_per_layer_selective_ac_averages_full_and_none():
    """torchtitan ``selective_ac_option = k``: every k-th block fully recomputed (keeps its input), the
    others keep everything — per block on average (full + (k − 1)·none) / k; its recompute reruns 1/k of
    the forward; op-level SAC reruns the even mms and the memory-bound ops, more than Megatron's
    attention-core-only selective recompute and less than a whole forward."""
    from planner.answer.request import context
    from planner.pricing.layer_times import layer_times, selective_share

    m = get_model("llama3-8b")
    op = saved_activation_bytes(m, "transformer_block", 1, 8192, 1, False, "bf16", STACKS["torchtitan"])
    for k in (1, 2, 4):
        got = saved_activation_bytes(
            m, "transformer_block", 1, 8192, 1, False, "bf16", resolve({"base": "torchtitan", "selective_ac": k})
        )
        assert got.selective == int((op.full + (k - 1) * op.none) / k)
    req = {**REQ, "training": {**REQ["training"], "stack": {"base": "torchtitan", "selective_ac": 2}}}
    ctx = context(planner.specs.PlanRequest.model_validate(req))
    none = layer_times(ctx, "transformer_block", 1, 1, False, "none")
    sel = layer_times(ctx, "transformer_block", 1, 1, False, "selective")
    assert sel.bwd - none.bwd == pytest.approx(none.fwd / 2)
    ctx_op = context(
        planner.specs.PlanRequest.model_validate({**REQ, "training": {**REQ["training"], "stack": "torchtitan"}})
    )
    share = selective_share(ctx_op, 1, 1, False, 0.0)
    assert 0.3 < share < 0.7


TITAN_2412 = "benchmarks/llama3_h100_202412_torchtitan.md"


@pytest.mark.parametrize(
    "gpus, gbs, measured_gib",
    [
        (8, 16, 82.4),  # Table 1, FSDP, 8 GPUs
        (128, 256, 67.0),  # Table 3, FSDP, 128 GPUs
    ],
)
def test_titan_peak_memory_within_ten_percent_of_the_published(gpus, gbs, measured_gib):
    """torchtitan's published peaks (pytorch/torchtitan ``benchmarks/llama3_h100_202412_torchtitan.md``:
    Llama 3.1 8B, FSDP, local batch 2, seq 8192, op-level selective AC, H100 96 GB) within 10%, and the
    run fits (the eager formula of the bundled runtime predicted 145 and 130 GiB: not to fit)."""
    req = {
        "model": "llama3-8b",
        "cluster": {"gpu": "h100-sxm-96gb-hbm2e", "num_nodes": gpus // 8, "gpus_per_node": 8},
        "training": {"global_batch_size": gbs, "seq_len": 8192, "stack": "torchtitan"},
        "parallel": {"tp": 1, "pp": 1, "dp": gpus, "micro_batch_size": 2, "zero_stage": 3, "recompute": "selective"},
        "options": {"memory_headroom": 0.0},
    }
    est = planner.estimate_plan(req).estimate
    assert est.peak_memory_gib == pytest.approx(measured_gib, rel=0.10)
    assert est.fits


@pytest.mark.parametrize(
    "mbs, recompute, selective_ac, ran",
    [
        (2, "selective", "op", False),  # published: OOM
        (2, "selective", 2, False),  # published: OOM ("selective layer")
        (1, "selective", "op", True),  # 355 tokens/s/GPU
        (2, "full", "op", True),  # 353 tokens/s/GPU
    ],
)
def test_titan_llama2_70b_on_64_a100_fits_where_it_ran_and_not_where_it_ran_out(mbs, recompute, selective_ac, ran):
    """torchtitan docs/performance.md as first published (pytorch/torchtitan 395a5262, 2024-04): Llama 2 70B,
    FSDP2 on 64 A100 80GB, seq 4096 — local batch 2 with selective (op or layer) AC ran out of memory,
    local batch 1 with op-level selective AC and local batch 2 with full AC ran."""
    req = {
        "model": "llama2-70b",
        "cluster": {"gpu": "a100-sxm4-80gb", "num_nodes": 8, "gpus_per_node": 8},
        "training": {
            "global_batch_size": 64 * mbs,
            "seq_len": 4096,
            "stack": {"base": "torchtitan", "selective_ac": selective_ac},
        },
        "parallel": {"tp": 1, "pp": 1, "dp": 64, "micro_batch_size": mbs, "zero_stage": 3, "recompute": recompute},
        "options": {"memory_headroom": 0.0},
    }
    assert planner.estimate_plan(req).estimate.fits is ran


@pytest.mark.parametrize("b, s, h, a, g, f", [(2, 64, 256, 8, 2, 512), (1, 128, 256, 8, 8, 768)])
def test_titan_formula_is_what_pytorch_saves(b, s, h, a, g, f):
    """An eager block made of the ops torchtitan's Llama block runs (composite fp32 RMSNorm, RoPE as a
    complex product, K/V repeated by expand + reshape, SDPA causal, SwiGLU), in bf16 on CPU: the bytes
    autograd keeps (every saved tensor's storage, once; parameters and the RoPE table excluded) equal
    ``titan_block_saved_terms``; under the op-level policy the mms and SDPA run in the order the
    formula assumes (wq, wk, wv, SDPA, wo, w1, w3, w2: the odd mms are wq, wv, w1, w2)."""
    torch = pytest.importorskip("torch")
    from collections import defaultdict

    from torch.nn import functional as F
    from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

    from planner.workload.activations import titan_block_saved_terms

    torch.manual_seed(0)
    bf16, d = torch.bfloat16, h // a

    def lin(i, o):
        return (torch.randn(o, i) / i**0.5).to(bf16).requires_grad_()

    wq, wk, wv, wo, w1, w2, w3 = (
        lin(h, a * d),
        lin(h, g * d),
        lin(h, g * d),
        lin(a * d, h),
        lin(h, f),
        lin(f, h),
        lin(h, f),
    )
    n1, n2 = (torch.ones(h, dtype=bf16, requires_grad=True) for _ in range(2))
    cis = torch.polar(torch.ones(s, d // 2), torch.randn(s, d // 2)).view(1, s, 1, d // 2)

    def norm(x, w):
        z = x.float()
        return (z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * w

    def rope(t):
        c = torch.view_as_complex(t.float().reshape(*t.shape[:-1], -1, 2))
        return torch.view_as_real(c * cis).flatten(3).type_as(t)

    def repeat(t):
        return t[:, :, :, None, :].expand(b, s, g, a // g, d).reshape(b, s, a, d)

    def block(x):
        y = norm(x, n1)
        q, k, v = (F.linear(y, w).view(b, s, -1, d) for w in (wq, wk, wv))
        q, k, v = rope(q), repeat(rope(k)), repeat(v)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + F.linear(o.transpose(1, 2).contiguous().view(b, s, -1), wo)
        z = norm(x, n2)
        return x + F.linear(F.silu(F.linear(z, w1)) * F.linear(z, w3), w2)

    storages: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        storages[st.data_ptr()] = max(storages.get(st.data_ptr(), 0), st.nbytes())
        return t

    x = torch.randn(b, s, h, dtype=bf16, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(x)
    skip = {t.untyped_storage().data_ptr() for t in (wq, wk, wv, wo, w1, w2, w3, n1, n2, cis)}
    kept = sum(n for ptr, n in storages.items() if ptr not in skip)
    m = ModelSpec(
        name="titan-test",
        family="llama",
        num_layers=1,
        hidden_size=h,
        num_attention_heads=a,
        num_kv_heads=g,
        ffn_hidden_size=f,
        vocab_size=1000,
        activation="swiglu",
        norm="rmsnorm",
        tie_embeddings=False,
        max_seq_len=s,
    )
    assert kept == sum(titan_block_saved_terms(m, b, s).values())

    seen: list[str] = []

    def context():
        count: defaultdict[str, int] = defaultdict(int)

        def policy(ctx, func, *args, **kwargs):
            mode = "recompute" if ctx.is_recompute else "forward"
            is_mm = func == torch.ops.aten.mm.default
            count[mode] += is_mm
            if mode == "forward" and (is_mm or "scaled_dot_product" in str(func)):
                seen.append("mm" if is_mm else "sdpa")
            keep = is_mm and count[mode] % 2 == 1
            return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

        return create_selective_checkpoint_contexts(policy)

    checkpoint(block, x, use_reentrant=False, context_fn=context).sum().backward()
    assert seen == ["mm", "mm", "mm", "sdpa", "mm", "mm", "mm", "mm"]


# FlashAttention's published causal forward + backward TFLOP/s, read off Dao-AILab/flash-attention
# assets/flash2_{a100,h100}_fwd_bwd_benchmark.png (FA2 paper Fig. 4; panels (c) head dim 64, (d) head dim 128): the
# FlashAttention-2 bars and the "FlashAttention Triton" bars on A100; on H100 (no Triton bars) the FlashAttention bars.
@pytest.mark.parametrize(
    "gpu, model, seq, fa2, triton",
    [
        ("a100-sxm4-80gb", "llama3.1-8b", 2048, 155, 68),  # head dim 128
        ("a100-sxm4-80gb", "llama3.1-8b", 8192, 182, 78),
        ("a100-sxm4-80gb", "gpt3-350m", 4096, 156, 76),  # head dim 64 (1024 / 16)
        ("h100-sxm5-80gb", "llama3.1-8b", 2048, 265, 108),
        ("h100-sxm5-80gb", "llama3.1-8b", 16384, 328, 137),
    ],
)
def test_the_flash_kernel_prices_attention_at_its_published_rate(gpu, model, seq, fa2, triton):
    """The attention core's time scales by the ratio of the two kernels' bars at that length and head dim; nothing
    else in the block moves."""
    from planner.compose.cost import Context
    from planner.pricing.gpu import local_attention_time
    from planner.specs import ClusterSpec
    from planner.specs.catalog import get_gpu, get_model

    def ctx(kernel: str) -> Context:
        return Context(
            model=get_model(model),
            gpu=get_gpu(gpu),
            cluster=ClusterSpec(gpu=gpu, num_nodes=1, gpus_per_node=8),
            training=TrainingSpec(global_batch_size=8, seq_len=seq, stack={"base": "meshplan", "flash_kernel": kernel}),
        )

    a, b = sum(local_attention_time(ctx("fa2"), 1, 1)), sum(local_attention_time(ctx("triton"), 1, 1))
    assert b / a == pytest.approx(fa2 / triton, rel=1e-9)
