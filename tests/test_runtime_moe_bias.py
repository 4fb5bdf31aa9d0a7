"""gpt-oss's experts in the model zoo (issue 23), in one process, against transformers' ``GptOssMLP`` formula
written out here in plain PyTorch (modeling_gpt_oss ``GptOssTopKRouter`` / ``GptOssExperts``, training branch): the
router's logits with their bias, top-k of the logits and a softmax over the k chosen; per expert
``gate_up = x @ gate_up_proj[e] + gate_up_proj_bias[e]`` with gate and up interleaved (``[..., ::2]``,
``[..., 1::2]``), ``gate.clamp(max=limit)``, ``up.clamp(-limit, limit)``, ``glu = gate · σ(1.702 · gate)``,
``out = ((up + 1) · glu) @ down_proj[e] + down_proj_bias[e]``, weighted by the routing weight. The zoo keeps gate and
up as separate stacked weights ``w1``/``w3`` [E, h, f] (HF's interleaved ``gate_up_proj`` split) and biases
``b1``/``b3`` [E, f], ``b2`` [E, h]; its ``ClampedSwiGLU`` keeps two tensors for backward instead of autograd's
seven, and its gradients are checked here against autograd of the written-out formula."""

from __future__ import annotations

import pytest
import torch

from planner.specs import ModelSpec
from planner.specs.catalog import MODELS
from runtime.models import build_model
from runtime.models.moe import ClampedSwiGLU, GroupedExperts, MoE

ALPHA = 1.702  # transformers' GptOssExperts.alpha


def gpt_oss_like(limit: float = 7.0) -> ModelSpec:
    spec = MODELS["tiny-moe"]
    moe = spec.moe.model_copy(update={"router_bias": True, "expert_bias": True, "swiglu_limit": limit})
    return spec.model_copy(update={"name": "tiny-gpt-oss-moe", "num_layers": 2, "moe": moe})


def hf_gpt_oss_mlp(x, router_w, router_b, gate_up, gate_up_b, down, down_b, top_k, limit):
    """transformers' GptOssMLP forward (training branch), from its interleaved gate_up parameters."""
    logits = torch.nn.functional.linear(x, router_w, router_b)
    top_value, top_index = torch.topk(logits, top_k, dim=-1)
    weights = torch.zeros_like(logits).scatter_(1, top_index, torch.softmax(top_value, dim=1))
    out = torch.zeros_like(x)
    for e in range(router_w.shape[0]):
        token_idx = (top_index == e).any(-1).nonzero().flatten()
        if token_idx.numel() == 0:
            continue
        gu = x[token_idx] @ gate_up[e] + gate_up_b[e]
        gate, up = gu[..., ::2], gu[..., 1::2]
        gate = gate.clamp(min=None, max=limit)
        up = up.clamp(min=-limit, max=limit)
        glu = gate * torch.sigmoid(gate * ALPHA)
        o = ((up + 1) * glu) @ down[e] + down_b[e]
        out = out.index_add(0, token_idx, o * weights[token_idx, e, None])
    return out


def _interleave(w1: torch.Tensor, w3: torch.Tensor) -> torch.Tensor:
    """HF's gate_up_proj [E, h, 2f] (or its bias [E, 2f]): gate in the even columns, up in the odd."""
    return torch.stack([w1, w3], dim=-1).flatten(-2)


@pytest.mark.parametrize("limit", [7.0, 0.5])
def test_gpt_oss_experts_equal_transformers_formula(limit):
    torch.manual_seed(0)
    moe = build_model(gpt_oss_like(limit), seed=3).layers["1"].moe
    assert isinstance(moe, MoE) and moe.experts.leaves == ("w1", "w3", "w2", "b1", "b3", "b2")
    ex = moe.experts
    moe.aux_coeff = 0.0  # the zoo's balance loss (its softmax routers') is not part of GptOssMLP's forward
    with torch.no_grad():  # scale up so that the clamps bind on a share of the entries; random biases and router bias
        for name in ("w1", "w3"):
            getattr(ex, name).mul_(40 if limit == 7.0 else 10)
        for name in ("b1", "b3", "b2"):
            getattr(ex, name).copy_(torch.randn_like(getattr(ex, name)))
        moe.router.bias.copy_(torch.randn_like(moe.router.bias) * 0.1)
    x = torch.randn(2, 16, 64, requires_grad=True)
    got = moe(x)
    params = [moe.router.weight, moe.router.bias, ex.w1, ex.w3, ex.w2, ex.b1, ex.b3, ex.b2]
    grads = torch.autograd.grad((got * torch.cos(got)).sum(), [x, *params])

    leaves = [p.detach().clone().requires_grad_(True) for p in params]
    rw, rb, w1, w3, w2, b1, b3, b2 = leaves
    x2 = x.detach().clone().requires_grad_(True)
    want = hf_gpt_oss_mlp(
        x2.reshape(-1, 64), rw, rb, _interleave(w1, w3), _interleave(b1, b3), w2, b2, moe.top_k, limit
    ).view(2, 16, 64)
    want_grads = torch.autograd.grad((want * torch.cos(want)).sum(), [x2, *leaves])

    # the clamps bind on a share of the gate and up entries (else the test would not check them)
    a = x.detach().reshape(-1, 64) @ ex.w1.detach()[0] + ex.b1.detach()[0]
    u = x.detach().reshape(-1, 64) @ ex.w3.detach()[0] + ex.b3.detach()[0]
    assert 0.05 < (a > limit).float().mean() < 0.95 and 0.05 < (u.abs() > limit).float().mean() < 0.95
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    names = ["x", *"router.weight router.bias w1 w3 w2 b1 b3 b2".split()]
    for name, g, w in zip(names, grads, want_grads, strict=True):
        assert g.abs().max() > 0, name
        assert (g - w).abs().max() <= 1e-5 * w.abs().max(), name  # fp32 sums in another order


def test_clamped_swiglu_backward_equals_autograd_and_keeps_two_tensors():
    torch.manual_seed(1)
    a, b = torch.randn(64, 32) * 4, torch.randn(64, 32) * 4
    a[0, :4], b[0, :4] = 2.0, -2.0  # exactly at the limit: the gradient passes, as torch.clamp's
    a, b = a.requires_grad_(True), b.requires_grad_(True)
    limit = 2.0

    def written(a, b):
        g = a.clamp(max=limit)
        return (b.clamp(-limit, limit) + 1) * g * torch.sigmoid(ALPHA * g)

    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = ClampedSwiGLU.apply(a, b, limit)
    assert len(saved) == 2
    w = torch.randn_like(out)
    got = torch.autograd.grad((out * w).sum(), [a, b])
    want = torch.autograd.grad((written(a, b) * w).sum(), [a, b])
    torch.testing.assert_close(out, written(a, b))
    for g, ww in zip(got, want, strict=True):
        torch.testing.assert_close(g, ww, rtol=1e-6, atol=1e-6)


def test_expert_shard_holds_its_experts_biases():
    """An EP shard (``keep``) of the experts holds its experts' weights and biases, each the full model's slice."""
    full = GroupedExperts(8, 16, 8, bias=True, limit=7.0)
    part = GroupedExperts(8, 16, 8, bias=True, limit=7.0)
    part.keep(4, 4)
    with torch.no_grad():
        for name in full.leaves:
            torch.nn.init.normal_(getattr(full, name))
            getattr(part, name).copy_(getattr(full, name)[4:])
    x = torch.randn(10, 16)
    counts = torch.tensor([3, 0, 5, 2])
    whole = torch.tensor([0, 0, 0, 0, 3, 0, 5, 2])  # the same rows, routed to experts 4..7 of the full set
    torch.testing.assert_close(part(x, counts), full(x, whole))
    assert part(x, counts).shape == (10, 16) and {p.shape[0] for p in part.parameters()} == {4}


def test_catalog_gpt_oss_builds_with_biased_clamped_experts():
    spec = MODELS["gpt-oss-20b"]
    assert spec.moe.expert_bias and spec.moe.swiglu_limit == 7.0
    small = spec.model_copy(update={"num_layers": 1})
    model = build_model(small, device="meta")
    ex = model.layers["0"].moe.experts
    assert ex.b1.shape == (32, 2880) and ex.b2.shape == (32, 2880) and ex.limit == 7.0
