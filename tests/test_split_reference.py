"""The one-process reference of a TP split (runtime/split_reference.py), in one process: which linears it cuts,
that parameter names survive, that it only applies to FP8 plans with TP, and what it refuses. Its equality with
real TP runs is tests/test_fp8_tp_split.py (one linear) and the FP8 × TP rows of tests/test_runtime_equivalence.py."""

from __future__ import annotations

import pytest
import torch

from planner.specs.catalog import MODELS


def _plan(**kw):
    from runtime.testing import make_plan

    model = MODELS["tiny-llama"].model_copy(update={"num_layers": 2, "name": "tiny-llama-2l"})
    return make_plan(model, **kw)


def test_split_applies_to_fp8_plans_with_tp_only():
    from runtime.split_reference import tp_split

    assert tp_split(_plan(precision="fp8", fp8_recipe="rowwise", tp=2, micro_batch_size=4)) == 2
    assert tp_split(_plan(precision="fp8", tp=2, micro_batch_size=4)) == 2  # tensorwise: same GEMM cuts
    assert tp_split(_plan(tp=2, micro_batch_size=4)) == 1  # fp32: each GEMM whole
    assert tp_split(_plan(precision="fp8", fp8_recipe="rowwise", dp=2)) == 1


def test_split_linears_cuts_what_tp_cuts_and_keeps_names():
    from runtime.fp8 import apply_fp8
    from runtime.models import build_model
    from runtime.split_reference import SplitLinear, split_linears

    plan = _plan(precision="fp8", fp8_recipe="rowwise", tp=2, micro_batch_size=4)
    model = build_model(plan.model, seed=0)
    apply_fp8(model, plan)
    names = [n for n, _ in model.named_parameters()]
    # per layer wq, wk, wv, w1, w3 (colwise) and wo, w2 (rowwise), plus the vocabulary-parallel head
    assert split_linears(model, plan, 2) == 2 * 7 + 1
    assert [n for n, _ in model.named_parameters()] == names
    styles = {n: m.style for n, m in model.named_modules() if isinstance(m, SplitLinear)}
    assert styles["layers.0.attn.wo"] == styles["layers.1.mlp.w2"] == "rowwise"
    assert styles["layers.0.attn.wq"] == styles["head"] == "colwise"
    assert model.get_submodule("layers.0.attn.wo").fp8 is not None and model.get_submodule("head").fp8 is None


def test_split_reference_is_not_the_plain_one_for_rowwise():
    """The split changes a rowwise plan's step-0 gradients by far more than fp32 round-off (bf16 partials), and
    a fp32 linear's split output only by round-off."""
    from runtime.job import TrainConfig
    from runtime.split_reference import SplitLinear
    from runtime.testing import reference_run

    plan = _plan(precision="fp8", fp8_recipe="rowwise", tp=2, micro_batch_size=4)
    _, _, split = reference_run(plan, TrainConfig(), 1)
    _, _, plain = reference_run(plan, TrainConfig(), 1, split=1)
    gap = max(float((split[k] - plain[k]).abs().max()) for k in split)
    assert gap >= 1e-4, gap

    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 32)
    x = torch.randn(8, 64)
    for style in ("rowwise", "colwise"):
        assert torch.allclose(SplitLinear(linear, style, 2)(x), linear(x), rtol=0, atol=1e-6)


def test_split_linear_refuses_what_it_cannot_cut():
    from runtime.split_reference import SplitLinear

    with pytest.raises(ValueError, match="style must be rowwise or colwise"):
        SplitLinear(torch.nn.Linear(4, 4), "sequence_parallel", 2)
    with pytest.raises(ValueError, match="does not split 4 ways along dim 1"):
        SplitLinear(torch.nn.Linear(6, 4), "rowwise", 4)
