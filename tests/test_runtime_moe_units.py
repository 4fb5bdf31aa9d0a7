"""The model zoo's MoE block (runtime.models.moe) in one process, each part against an independent computation
written here in plain PyTorch loops: top-k routing (softmax; sigmoid with group limit and expert bias), the grouped
GEMM experts and combine, the shared expert, the sequence-level auxiliary loss and its gradient, the expert-bias
update, EP-sharded initialisation; and runtime.validate's refusals of what the runtime does not run (token dropping
by a capacity factor: tests/test_runtime_moe_capacity.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from planner.specs.catalog import MODELS
from planner.specs.errors import MeshplanError
from runtime.models import build_model
from runtime.models.moe import MoE
from runtime.testing import make_plan
from runtime.validate import validate_plan


def _moe(name: str, layer: int = 1, seed: int = 0) -> MoE:
    model = build_model(MODELS[name], seed=seed)
    moe = model.layers[str(layer)].moe
    assert isinstance(moe, MoE)
    return moe


def _loop_reference(moe: MoE, x: torch.Tensor) -> tuple[torch.Tensor, list[list[int]]]:
    """Token by token: scores, group limit, bias, top-k, renormalised gates, each chosen expert's SwiGLU."""
    e, k = moe.num_experts, moe.top_k
    out = torch.zeros_like(x)
    chosen = []
    for n in range(x.shape[0]):
        logits = x[n] @ moe.router.weight.T
        if moe.router.bias is not None:
            logits = logits + moe.router.bias
        scores = torch.softmax(logits.float(), -1) if moe.score == "softmax" else torch.sigmoid(logits.float())
        pick = scores.detach() + (moe.expert_bias if moe.balance == "expert_bias" else 0)
        allowed = list(range(e))
        if moe.groups is not None:
            size = e // moe.groups
            group_scores = []
            for g in range(moe.groups):
                vals = sorted(pick[g * size : (g + 1) * size].tolist(), reverse=True)
                group_scores.append(sum(vals[:2]) if moe.score == "sigmoid" else vals[0])
            best = sorted(range(moe.groups), key=lambda g: -group_scores[g])[: moe.topk_groups]
            allowed = [i for i in range(e) if i // size in best]
        top = sorted(allowed, key=lambda i: -float(pick[i]))[:k]
        chosen.append(sorted(top))
        gates = scores[top] / scores[top].sum()
        for gate, i in zip(gates, top, strict=True):
            w1, w3, w2 = moe.experts.w1[i], moe.experts.w3[i], moe.experts.w2[i]
            out[n] += gate * ((F.silu(x[n] @ w1) * (x[n] @ w3)) @ w2)
    return out, chosen


@pytest.mark.parametrize("name", ["tiny-moe", "tiny-moe-shared"])
def test_moe_block_equals_a_per_token_loop(name):
    torch.manual_seed(1)
    moe = _moe(name)
    if moe.balance == "expert_bias":  # a bias that changes choices (scores are ≈ 0.5 ± 0.05)
        moe.expert_bias.copy_(torch.linspace(-0.05, 0.05, moe.num_experts))
    x = torch.randn(2, 8, 64)
    with torch.no_grad():
        got = moe(x)
        _, idx, _ = moe.route(x)
        want, chosen = _loop_reference(moe, x.reshape(-1, 64))
        if moe.shared is not None:
            want = want + moe.shared(x).reshape(-1, 64)
    assert [sorted(r) for r in idx.tolist()] == chosen
    torch.testing.assert_close(got.reshape(-1, 64), want, rtol=1e-5, atol=1e-6)


def test_sequence_aux_loss_and_its_gradient():
    """The injected gradient equals autograd of coeff · mean over sequences of E · Σ_i f_i · P_i, computed here."""
    torch.manual_seed(2)
    moe = _moe("tiny-moe")
    x = torch.randn(3, 8, 64, requires_grad=True)
    y = moe(x)
    y.sum().backward()
    got = moe.router.weight.grad.clone()

    moe.zero_grad()
    moe.aux_coeff = 0.0  # the same forward without the injected term
    y2 = moe(x)
    scores = torch.softmax(x.reshape(-1, 64) @ moe.router.weight.T, -1).view(3, 8, -1)
    aux = 0.0
    for s in range(3):
        idx = scores[s].detach().topk(moe.top_k, -1).indices
        f = torch.bincount(idx.reshape(-1), minlength=moe.num_experts).float() / (8 * moe.top_k)
        aux = aux + moe.num_experts * (f * scores[s].mean(0)).sum()
    (y2.sum() + 1e-2 * aux / 3).backward()
    torch.testing.assert_close(got, moe.router.weight.grad, rtol=1e-5, atol=1e-8)
    assert float((got - moe.router.weight.grad).abs().max()) < float(got.abs().max()) * 1e-4
    # and the aux term matters: without it the router gradient differs
    assert not torch.allclose(got, torch.autograd.grad(moe(x).sum(), moe.router.weight)[0])


def test_expert_bias_moves_after_a_step_and_only_then():
    from runtime.job import TrainConfig
    from runtime.testing import reference_run

    moe = _moe("tiny-moe-shared")
    counts = torch.tensor([4.0, 0, 0, 4, 8, 0, 0, 0])
    moe.update_bias(counts)  # mean 2: under-loaded experts +rate, over-loaded −rate
    assert moe.expert_bias.tolist() == pytest.approx([-1e-3, 1e-3, 1e-3, -1e-3, -1e-3, 1e-3, 1e-3, 1e-3])
    # a training run's steps change the routing through the bias: its trajectory is not the bias-free one
    plan = make_plan("tiny-moe-shared")
    with_bias = reference_run(plan, TrainConfig(), 4)[0]
    import runtime.models.moe as moe_mod

    rate, moe_mod.BIAS_RATE = moe_mod.BIAS_RATE, 0.0
    try:
        without = reference_run(plan, TrainConfig(), 4)[0]
    finally:
        moe_mod.BIAS_RATE = rate
    assert with_bias[0] == without[0]
    assert abs(with_bias[1] - without[1]) > 1e-5 and abs(with_bias[3] - without[3]) > 1e-5  # above TOL


def test_expert_parallel_shard_initialises_its_slice_of_the_full_experts():
    from runtime.job import build_chunk

    plan = make_plan("tiny-moe", dp=4, ep=4)
    full = build_model(MODELS["tiny-moe"], seed=0)
    for rank in range(4):
        chunk = build_chunk(plan, 0, seed=0, device=torch.device("cpu"), ep_rank=rank)
        experts = chunk.layers["3"].moe.experts
        assert (experts.first, experts.local) == (2 * rank, 2)
        for w in ("w1", "w3", "w2"):
            assert torch.equal(getattr(experts, w), getattr(full.layers["3"].moe.experts, w)[2 * rank : 2 * rank + 2])


@pytest.mark.parametrize(
    ("model", "parallel", "field"),
    [
        ("tiny-moe", dict(tp=2, dp=2, ep=2, sequence_parallel=True, etp=2), "parallel.etp"),
        ("tiny-moe", dict(tp=2), "parallel.sequence_parallel"),
        ("tiny-moe", dict(dp=2, ep=4), "parallel.ep"),
        ("tiny-llama", dict(dp=2, ep=2), "parallel.ep"),
    ],
)
def test_validate_refuses_what_the_runtime_does_not_run(model, parallel, field):
    try:
        plan = make_plan(model, **parallel)
    except Exception as exc:  # the configuration's own validator may refuse first (naming the same field)
        assert field.split(".")[-1] in str(exc)
        return
    with pytest.raises(MeshplanError) as err:
        validate_plan(plan, plan.parallel.num_gpus)
    assert err.value.field == field, err.value


def test_validate_accepts_the_runtime_moe_layouts():
    for parallel in (
        dict(dp=2, ep=2),
        dict(dp=2, ep=2, tp=2, sequence_parallel=True),
        dict(dp=2, ep=2, pp=2, schedule="1f1b"),
        dict(dp=2, ep=2, cp=2, cp_comm="a2a"),
    ):
        plan = make_plan("tiny-moe-shared", micro_batch_size=2, **parallel)
        validate_plan(plan, plan.parallel.num_gpus)
