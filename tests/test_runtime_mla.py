"""Multi-head latent attention (DeepSeek-V3's MLA) in the model zoo (issue 23), in one process: the zoo's
``LatentAttention`` against Hugging Face transformers' ``DeepseekV3Attention`` written out here in float64
(src/transformers/models/deepseek_v3/modeling_deepseek_v3.py at f5a9ec512fa9fe69e51ea0c6388c68d50de567b3, with
``rope_interleave`` — DeepSeek-V3's default — and no rope scaling), outputs and the gradient of every parameter;
then its TP split, what runtime.validate, the stack rules and the planner accept and refuse, and a tiny
DeepSeek-V3-shaped model planned and exported on the default stack. The multi-process rows are in
tests/test_runtime_equivalence_mla.py."""

from __future__ import annotations

import math

import pytest
import torch

from planner.specs import ModelSpec
from planner.specs.errors import MeshplanError
from planner.specs.stack_rules import stack_runs, unbuilt_parts
from planner.specs.stacks import STACKS
from runtime.models.mla import LatentAttention
from runtime.models.transformer import NORM_EPS, ROPE_THETA, build_layer, check_buildable
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
    num_attention_heads=4,
    num_kv_heads=4,
)
#: DeepSeek-V3's proportions (q_lora 1536, kv_lora 512, rope 64, nope 128, v 128) scaled down: v narrower than
#: q/k (padded for the kernel); without a query bottleneck (DeepSeek-V2-Lite); v as wide as q/k (no padding).
MLAS = {
    "v3": dict(q_lora_rank=24, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16),
    "no-q-lora": dict(q_lora_rank=None, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16),
    "v-equal": dict(q_lora_rank=24, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16),
}


def spec(mla: dict, **kw) -> ModelSpec:
    return ModelSpec(name="t-mla", **{**BASE, **kw}, mla=mla)


def rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """DeepseekV3RMSNorm: x · rsqrt(mean(x²) + eps) · weight (eps: the zoo's, as ModelSpec has none)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + NORM_EPS) * w


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def hf_rope_interleave(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``apply_rotary_pos_emb_interleave`` with ``DeepseekV3RotaryEmbedding``'s cos/sin (no scaling): q, k
    [B, heads, T, d] de-interleaved (view(d/2, 2).transpose), then x·cos + rotate_half(x)·sin."""
    t, d = q.shape[2], q.shape[3]
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    freqs = torch.arange(t, dtype=torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[None, None], emb.sin()[None, None]

    def one(x):
        b, h, s, dd = x.shape
        x = x.view(b, h, s, dd // 2, 2).transpose(4, 3).reshape(b, h, s, dd)
        return x * cos + rotate_half(x) * sin

    return one(q), one(k)


def hf_mla(a: LatentAttention, m: ModelSpec, x: torch.Tensor) -> torch.Tensor:
    """``DeepseekV3Attention.forward`` (eager) from ``a``'s parameters (q_proj when q_lora_rank is null)."""
    mla = m.mla
    assert mla is not None
    b, t, _ = x.shape
    heads, nope, rope, dv = m.num_attention_heads, mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.v_head_dim
    qk = nope + rope
    if mla.q_lora_rank is None:
        q = x @ a.wq.weight.T
    else:
        q = rms(x @ a.wq_a.weight.T, a.q_norm.weight) @ a.wq_b.weight.T
    q = q.view(b, t, heads, qk).transpose(1, 2)
    q_pass, q_rot = torch.split(q, [nope, rope], dim=-1)
    compressed = x @ a.wkv_a.weight.T
    k_pass, k_rot = torch.split(compressed, [mla.kv_lora_rank, rope], dim=-1)
    k_pass = (rms(k_pass, a.kv_norm.weight) @ a.wkv_b.weight.T).view(b, t, heads, nope + dv).transpose(1, 2)
    k_pass, v = torch.split(k_pass, [nope, dv], dim=-1)
    k_rot = k_rot.view(b, 1, t, rope)
    q_rot, k_rot = hf_rope_interleave(q_rot, k_rot)
    k_rot = k_rot.expand(*k_pass.shape[:-1], -1)
    query, key = torch.cat((q_pass, q_rot), dim=-1), torch.cat((k_pass, k_rot), dim=-1)
    w = query @ key.transpose(2, 3) * qk**-0.5  # self.scaling; no rope_scaling: no mscale
    w = w.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.softmax(w, dim=-1) @ v
    return out.transpose(1, 2).reshape(b, t, heads * dv) @ a.wo.weight.T


def close(a: torch.Tensor, b: torch.Tensor, rel: float = 1e-6) -> bool:
    return float((a - b).detach().abs().max()) <= rel * float(b.detach().abs().max())


@pytest.mark.parametrize("variant", list(MLAS))
def test_latent_attention_equals_hugging_faces_formula(variant):
    m = spec(MLAS[variant])
    torch.manual_seed(0)
    a = LatentAttention(m).double()
    with torch.no_grad():  # every parameter random (the norms too), so each one is exercised
        for p in a.parameters():
            p.copy_(torch.randn_like(p) * (0.3 if p.ndim == 1 else 0.2) + (1.0 if p.ndim == 1 else 0))
    x = torch.randn(2, 12, m.hidden_size, dtype=torch.float64)
    out, ref = a(x), hf_mla(a, m, x)
    # within 1e-6 of the values' scale: the zoo's RoPE runs in fp32 (1e-7 relative), all else in float64; a wrong
    # formula (scale, rope pairing, split order, a missing norm) is off by O(1)
    assert close(out, ref)
    g = torch.randn_like(out)
    params = dict(a.named_parameters())
    got = torch.autograd.grad(out, list(params.values()), g)
    want = torch.autograd.grad(ref, list(params.values()), g)
    for name, x1, x2 in zip(params, got, want, strict=True):
        assert close(x1, x2), name
    q = {"wq.weight"} if m.mla.q_lora_rank is None else {"wq_a.weight", "q_norm.weight", "wq_b.weight"}
    assert set(params) == q | {"wkv_a.weight", "kv_norm.weight", "wkv_b.weight", "wo.weight"}


def test_the_scale_matters():
    """Guards against a test that cannot fail: the block with the softmax scale of the v (or nope) width, 1/sqrt(16),
    instead of 1/sqrt(qk_head_dim = 24) differs from itself by far more than the formula test's tolerance."""
    m = spec(MLAS["v3"])
    torch.manual_seed(3)
    a = LatentAttention(m).double()
    x = torch.randn(1, 10, m.hidden_size, dtype=torch.float64)
    with torch.no_grad():
        out = a(x)
        a.core.forward = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(  # type: ignore[method-assign]
            q, k, v, is_causal=True, scale=1 / math.sqrt(16)
        )
        assert not close(a(x), out, rel=1e-3)


def test_the_block_splits_as_the_planner_prices_it():
    """At tp = 2 a rank holds half the heads of wq_b / wkv_b / wo and the whole down projections and latent norms:
    the parameter count per rank is the planner's (``workload.moe.mla_linears`` + ``attention_other_params``), and
    the TP plan's rules name the column- and row-parallel linears only (the rest replicated)."""
    from planner.specs.layout import tp_plan
    from planner.workload.analytic import layer_profile

    for variant in MLAS:
        m = spec(MLAS[variant])
        for tp in (1, 2, 4):
            block = build_layer(m, "transformer_block", tp=tp, device="meta")
            counted = sum(p.numel() for p in block.parameters())
            priced = layer_profile(m, "transformer_block", micro_batch_size=1, seq_len=16, tp=tp).param_count
            assert counted == priced, (variant, tp)
            attn = block.attn
            assert attn.wkv_a.weight.shape == (16 + 8, 64) and attn.kv_norm.weight.shape == (16,)
            assert attn.wkv_b.weight.shape[0] == 4 // tp * (m.mla.qk_nope_head_dim + m.mla.v_head_dim)
            assert attn.wo.weight.shape == (64, 4 // tp * m.mla.v_head_dim)
        plan = make_plan(m, tp=2, sequence_parallel=True)
        attn_rules = {r.pattern: r.style for r in tp_plan(m, plan.parallel) if ".attn." in r.pattern}
        q = "wq_b" if m.mla.q_lora_rank is not None else "wq"
        assert attn_rules == {
            f"layers.*.attn.{q}": "colwise",
            "layers.*.attn.wkv_b": "colwise",
            "layers.*.attn.wo": "rowwise",
        }
        validate_plan(plan, 2)  # every rule matches a module of the zoo
        names = set(module_names(plan))
        assert {"layers.0.attn.wkv_a", "layers.0.attn.kv_norm", "layers.1.attn.wkv_b"} <= names
        assert "layers.0.attn.wk" not in names


def test_context_parallelism_is_refused_for_latent_attention():
    m = spec(MLAS["v3"])
    with pytest.raises(MeshplanError) as err:
        validate_plan(make_plan(m, cp=2, cp_comm="all_gather"), 2)
    assert err.value.field == "parallel.cp" and "cp to 1" in err.value.fix
    refused = stack_runs(STACKS["meshplan"], cp=2, cp_comm="p2p", mla=True)
    assert refused is not None and refused.field == "parallel.cp" and "megatron" in refused.fix
    assert stack_runs(STACKS["meshplan"], cp=2, cp_comm="p2p") is None
    assert stack_runs(STACKS["megatron"], cp=2, cp_comm="p2p", mla=True) is None


def test_the_zoo_builds_latent_attention_and_refuses_a_wider_value_head():
    m = spec(MLAS["v3"])
    check_buildable(m)
    assert "mla" not in STACKS["meshplan"].unbuilt and unbuilt_parts(STACKS["meshplan"], m) == []
    wide = spec({**MLAS["v3"], "v_head_dim": 32})
    with pytest.raises(MeshplanError) as err:
        check_buildable(wide)
    assert err.value.field == "model.mla.v_head_dim" and "at most 24" in err.value.fix


def tiny_deepseek_v3() -> ModelSpec:
    """A DeepSeek-V3-shaped tiny model: MLA with a query bottleneck and narrower values, a leading dense layer, then
    MoE layers with a shared expert and a sigmoid group-limited router (the catalog's ``tiny-moe-shared``)."""
    from planner.specs.catalog import MODELS

    update = {"name": "tiny-deepseek-v3", "num_layers": 4, "num_kv_heads": 8, "mla": MLAS["v3"]}
    return ModelSpec.model_validate({**MODELS["tiny-moe-shared"].model_dump(), **update})


def test_a_tiny_deepseek_v3_plans_and_exports_on_the_default_stack():
    """Planned by the search on the meshplan stack (it prices latent attention as the zoo keeps it), without a CP
    class; exported to the meshplan target (a ``meshplan run`` command), and buildable by the runtime."""
    from api.exporters import ExportOptions, export
    from planner.api import plan as run_plan
    from planner.specs import ClusterSpec, PlanRequest, TrainingSpec

    m = tiny_deepseek_v3()
    assert m.mla is not None and m.moe is not None and m.moe.first_dense_layers == 1
    request = PlanRequest(
        model=m,
        cluster=ClusterSpec(gpu="h100-sxm5-80gb", num_nodes=1, gpus_per_node=4),
        training=TrainingSpec(global_batch_size=8, seq_len=64),
    )
    response = run_plan(request)
    assert response.plans, response
    best = response.plans[0]
    assert best.parallel.cp == 1 and best.training.stack in (None, "meshplan")
    validate_plan(best, best.parallel.num_gpus)
    script = export(best, "meshplan", ExportOptions()).content
    assert "meshplan run" in script
    model = build_layer(m, "transformer_block", tp=1, device="meta")
    assert isinstance(model.attn, LatentAttention)


def test_latent_attention_is_priced_on_the_meshplan_stack_with_overrides():
    """``meshplan run``'s local prediction prices the plan on the meshplan stack with overrides (id
    ``meshplan+{…}``): still the bundled runtime's latent attention; DeepSpeed's "zoo" activations are not."""
    from planner.answer.request import check_priced
    from planner.specs.stacks import resolve

    m = tiny_deepseek_v3()
    check_priced(m, resolve({"base": "meshplan", "overlap_grad_reduce": False}))
    check_priced(m, STACKS["meshplan"])
    with pytest.raises(MeshplanError) as err:
        check_priced(m.model_copy(update={"moe": None}), STACKS["deepspeed"])  # dense: DeepSpeed runs no MoE
    assert err.value.field == "training.stack" and "model.mla" in err.value.message
