"""The attention parts of Qwen3, OLMoE and gpt-oss in the model zoo (issue 23), in one process, against Hugging
Face's formulas written out here independently of the runtime's code (transformers' modeling_qwen3
``Qwen3Attention``, modeling_olmoe ``OlmoeAttention``, modeling_gpt_oss ``GptOssAttention`` /
``eager_attention_forward``) in float64: outputs and gradients of every parameter; then what runtime.validate,
the planner's stack rules and check_buildable accept and refuse. The multi-process rows are in
tests/test_runtime_equivalence_attn.py."""

from __future__ import annotations

import math

import pytest
import torch

from planner.specs import ModelSpec
from planner.specs.errors import MeshplanError
from planner.specs.stack_rules import stack_runs, unbuilt_parts
from planner.specs.stacks import STACKS
from runtime.models.transformer import NORM_EPS, ROPE_THETA, SelfAttention, check_buildable
from runtime.testing import make_plan
from runtime.validate import module_names, validate_plan

BASE = dict(
    family="llama",
    num_layers=2,
    hidden_size=64,
    ffn_hidden_size=128,
    vocab_size=256,
    activation="swiglu",
    norm="rmsnorm",
    max_seq_len=128,
)
QWEN3 = dict(num_attention_heads=4, num_kv_heads=2, attention_head_dim=32, qk_norm="head")
OLMOE = dict(num_attention_heads=4, num_kv_heads=4, qk_norm="projection")
GPT_OSS = dict(
    num_attention_heads=8,
    num_kv_heads=2,
    attention_head_dim=16,
    qkv_bias=True,
    attention_out_bias=True,
    attention_sinks=True,
)


def spec(**parts) -> ModelSpec:
    return ModelSpec(name="t", **{**BASE, **parts})


def rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """HF's Qwen3RMSNorm / OlmoeRMSNorm: x · rsqrt(mean(x²) + eps) · weight, over the last dim."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + NORM_EPS) * w


def rope(x: torch.Tensor) -> torch.Tensor:
    """RoPE on [B, T, heads, d] with the zoo's convention (adjacent pairs rotated, Meta's layout), as complex
    multiplication: pair j of position p times exp(i·p·θ^(-2j/d))."""
    _, t, _, d = x.shape
    freqs = ROPE_THETA ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    turn = torch.polar(
        torch.ones(t, d // 2, dtype=torch.float64), torch.arange(t, dtype=torch.float64)[:, None] * freqs
    )
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * turn[None, :, None, :]).flatten(-2)


def hf_attention(a: SelfAttention, m: ModelSpec, x: torch.Tensor) -> torch.Tensor:
    """The attention block as transformers writes it, from ``a``'s parameters."""
    b, t, _ = x.shape
    hd, heads, kv = m.head_dim, m.num_attention_heads, m.num_kv_heads
    q, k, v = a.wq(x), a.wk(x), a.wv(x)  # nn.Linear (+ bias when the model has one)
    if m.qk_norm == "projection":  # OlmoeAttention: q_norm(q_proj(x)), k_norm(k_proj(x)), then the heads' view
        q, k = rms(q, a.q_norm.weight), rms(k, a.k_norm.weight)
    q, k, v = q.view(b, t, heads, hd), k.view(b, t, kv, hd), v.view(b, t, kv, hd)
    if m.qk_norm == "head":  # Qwen3Attention: q_norm(q_proj(x).view(..., -1, head_dim)): per head
        q, k = rms(q, a.q_norm.weight), rms(k, a.k_norm.weight)
    q, k = rope(q).transpose(1, 2), rope(k).transpose(1, 2)
    v = v.transpose(1, 2)
    k, v = k.repeat_interleave(heads // kv, 1), v.repeat_interleave(heads // kv, 1)  # repeat_kv
    w = q @ k.transpose(2, 3) / math.sqrt(hd)
    w = w.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    if m.attention_sinks:  # GptOss eager_attention_forward: the sink joins each row's softmax, then is dropped
        sinks = a.sinks.reshape(1, -1, 1, 1).expand(b, -1, t, -1)
        logits = torch.cat([w, sinks], dim=-1)
        logits = logits - logits.max(dim=-1, keepdim=True).values
        p = torch.softmax(logits, dim=-1)[..., :-1]
    else:
        p = torch.softmax(w, dim=-1)
    return a.wo((p @ v).transpose(1, 2).reshape(b, t, heads * hd))


def close(a: torch.Tensor, b: torch.Tensor, rel: float = 1e-6) -> bool:
    return float((a - b).detach().abs().max()) <= rel * float(b.detach().abs().max())


@pytest.mark.parametrize("parts", [QWEN3, OLMOE, GPT_OSS], ids=["qwen3-head-norm", "olmoe-projection-norm", "gpt-oss"])
def test_attention_equals_hugging_faces_formula(parts):
    m = spec(**parts)
    torch.manual_seed(0)
    a = SelfAttention(m).double()
    with torch.no_grad():  # every parameter random (norms, biases, sinks too), so each one is exercised
        for p in a.parameters():
            p.copy_(torch.randn_like(p) * (0.5 if p.ndim == 1 else 0.2) + (1.0 if p.ndim == 1 and p.numel() > 8 else 0))
    x = torch.randn(2, 12, m.hidden_size, dtype=torch.float64)
    out, ref = a(x), hf_attention(a, m, x)
    # within 1e-6 of the values' scale: the zoo's RoPE computes its angles in fp32 (1e-7 relative here), every
    # other op runs in float64; a wrong formula is off by O(1)
    assert close(out, ref)
    g = torch.randn_like(out)
    params = dict(a.named_parameters())
    got = torch.autograd.grad(out, list(params.values()), g)
    want = torch.autograd.grad(ref, list(params.values()), g)
    for name, x1, x2 in zip(params, got, want, strict=True):
        assert close(x1, x2), name
    expected = (
        {"q_norm.weight", "k_norm.weight"} if m.qk_norm else {"sinks", "wq.bias", "wk.bias", "wv.bias", "wo.bias"}
    )
    assert expected <= set(params)
    if m.qk_norm == "projection":
        assert params["q_norm.weight"].shape == (m.num_attention_heads * m.head_dim,)
    elif m.qk_norm == "head":
        assert params["q_norm.weight"].shape == (m.head_dim,)


def test_the_sinks_change_the_attention():
    """A sink is not a no-op: the same block without sinks differs, and matches it as the sinks go to -inf."""
    m = spec(**GPT_OSS)
    torch.manual_seed(1)
    a = SelfAttention(m).double()
    plain = SelfAttention(spec(**{**GPT_OSS, "attention_sinks": False})).double()
    plain.load_state_dict({k: v for k, v in a.state_dict().items() if k != "sinks"})
    x = torch.randn(1, 8, m.hidden_size, dtype=torch.float64)
    with torch.no_grad():
        assert (a(x) - plain(x)).abs().max() > 1e-2
        a.sinks.fill_(-60.0)
        assert (a(x) - plain(x)).abs().max() < 1e-12


def test_the_sink_path_runs_in_fp32_on_the_fused_kernel():
    """fp32 on CPU (SDPA's flash kernel, GQA, the padded head dim) against the float64 formula."""
    m = spec(**GPT_OSS)
    torch.manual_seed(2)
    a = SelfAttention(m)
    with torch.no_grad():
        a.sinks.normal_(0, 1.0)
    x = torch.randn(2, 32, m.hidden_size)
    ref = hf_attention(a.double(), m, x.double())
    out = a.float()(x)
    assert (out.double() - ref).abs().max() < 1e-5


@pytest.mark.parametrize("parts", [QWEN3, OLMOE, GPT_OSS], ids=["qwen3", "olmoe", "gpt-oss"])
def test_validate_accepts_the_built_attention_parts(parts):
    m = spec(**parts)
    check_buildable(m)
    assert unbuilt_parts(STACKS["meshplan"], m) == []
    for parallel in (dict(tp=2, sequence_parallel=True), dict(tp=2, pp=2, schedule="1f1b"), dict(tp=2, dp=2)):
        plan = make_plan(m, **parallel)
        validate_plan(plan, plan.parallel.num_gpus)
    if m.qk_norm:
        assert {"layers.1.attn.q_norm", "layers.1.attn.k_norm"} <= set(module_names(make_plan(m)))


def test_attention_sinks_are_refused_with_context_parallelism():
    plan = make_plan(spec(**GPT_OSS), cp=2, cp_comm="all_gather")
    with pytest.raises(MeshplanError) as err:
        validate_plan(plan, 2)
    assert err.value.field == "parallel.cp" and "cp to 1" in err.value.fix
    # the planner's stack rules say the same for the meshplan stack, and not for stacks whose CP runs sinks
    refused = stack_runs(STACKS["meshplan"], cp=2, cp_comm="all_gather", attention_sinks=True)
    assert refused is not None and refused.field == "parallel.cp"
    assert stack_runs(STACKS["meshplan"], cp=2, cp_comm="all_gather") is None
    assert stack_runs(STACKS["megatron"], cp=2, cp_comm="p2p", attention_sinks=True) is None
    validate_plan(make_plan(spec(**QWEN3), cp=2, cp_comm="all_gather"), 2)  # QK-norm runs under CP


@pytest.mark.parametrize(
    ("update", "field"),
    [  # latent attention with values wider than queries and keys (the zoo pads v up to q/k: tests/test_runtime_mla.py)
        (
            {"mla": {"kv_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 32}},
            "model.mla.v_head_dim",
        ),
    ],
)
def test_validate_refuses_what_the_zoo_does_not_build(update, field):
    m = spec(num_attention_heads=4, num_kv_heads=4, **update)
    with pytest.raises(MeshplanError) as err:
        validate_plan(make_plan(m, tp=2), 2)
    assert err.value.field == field and err.value.fix
    with pytest.raises(MeshplanError) as err:
        check_buildable(m)
    assert err.value.field == field


def test_the_stacks_unbuilt_list_is_empty_and_the_zoo_builds_the_parts_it_once_named():
    """``Stack.unbuilt`` of the meshplan stack (data the planner and the exporters read without PyTorch) is empty since
    the zoo builds latent attention (runtime/models/mla.py) and capacity dropping (runtime/models/moe.py): a model with
    either passes ``unbuilt_parts`` and ``check_buildable`` and builds."""
    from planner.specs.catalog import MODELS
    from runtime.models.transformer import build_model

    moe = MODELS["tiny-moe"]
    cases = {
        "mla": spec(
            num_attention_heads=4,
            num_kv_heads=4,
            mla={"kv_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16},
        ),
        "moe.capacity_factor": moe.model_copy(update={"moe": moe.moe.model_copy(update={"capacity_factor": 1.25})}),
    }
    assert STACKS["meshplan"].unbuilt == ()
    for part, m in cases.items():
        assert unbuilt_parts(STACKS["meshplan"], m) == [], part
        check_buildable(m)
        assert sum(p.numel() for p in build_model(m, seed=0).parameters()) > 0, part


def test_sharded_projection_norm_equals_the_fused_norm_and_keeps_its_saved_set(tmp_path):
    """The projection norm's TP path (``_ShardedRMSNorm``, here on a one-rank gloo group: the whole row) gives the
    fused RMSNorm's output and gradients, and keeps what it keeps — the input and the fp32 1/rms, besides the weight —
    which is what the planner prices (``zoo_attention_part_terms``). Its split over ranks runs in
    tests/test_runtime_equivalence_attn.py (olmoe rows)."""
    import torch.distributed as dist

    from runtime.models.transformer import ProjectionRMSNorm, RMSNorm

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        fused, sharded = RMSNorm(96, eps=1e-6), ProjectionRMSNorm(96, eps=1e-6)
        with torch.no_grad():
            fused.weight.copy_(torch.randn(96))
            sharded.weight.copy_(fused.weight)
        sharded.tp_group = dist.group.WORLD
        x = torch.randn(3, 7, 96, dtype=torch.float64).float()
        g = torch.randn(3, 7, 96)
        outs = []
        for norm in (fused, sharded):
            xi = x.clone().requires_grad_(True)
            saved: list = []
            with torch.autograd.graph.saved_tensors_hooks(lambda t, saved=saved: saved.append(t) or t, lambda t: t):
                y = norm(xi)
            (y * g).sum().backward()
            outs.append((y.detach(), xi.grad, norm.weight.grad, sorted(t.numel() for t in saved)))
        torch.testing.assert_close(outs[1][0], outs[0][0])
        torch.testing.assert_close(outs[1][1], outs[0][1], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(outs[1][2], outs[0][2], rtol=1e-5, atol=1e-6)
        assert outs[1][3] == sorted([3 * 7 * 96, 3 * 7, 96])  # input, 1/rms, weight
    finally:
        dist.destroy_process_group()
