"""A model of windowed and full blocks (gpt-oss): the windowed kind's memory terms are the full kind's
(``blocks.same_memory``), so ``blocks.window_terms(memory_only=True)`` joins the full kind's terms twice. Checked
against both kinds priced afresh, on every shared key the search enumerates (CP views too), and with the shortcut
off: the joined terms identical field by field."""

from __future__ import annotations

import pytest

from planner.answer.request import context
from planner.compose import blocks
from planner.compose.blocks import MEMORY_FIELDS, block_sequence, window_terms
from planner.compose.context import Context
from planner.compose.context_parallel import cp_view
from planner.compose.terms import kind_terms, shared_key
from planner.search.space import enumerate_candidates
from planner.specs import ParallelPins, PlanRequest, SearchOptions
from tests.plan_support import search_request

CASES = [
    ("gpt-oss-120b", "h100-sxm5-80gb", 8, 8, 512, 4096, "megatron"),
    ("gpt-oss-120b", "h100-sxm5-80gb", 8, 8, 64, 65536, "megatron"),  # long context: CP views
    ("gpt-oss-20b", "h100-sxm5-80gb", 2, 8, 256, 8192, "megatron"),
    ("gpt-oss-20b", "a100-sxm4-80gb", 1, 8, 128, 4096, "torchtitan"),
]


def request(model, gpu, nodes, gpn, gbs, seq, stack) -> PlanRequest:
    return search_request(model, gpu, nodes, gpn, gbs, seq, {"stack": stack})


@pytest.mark.parametrize("case", CASES)
def test_the_windowed_kind_holds_the_full_kinds_memory(case, monkeypatch: pytest.MonkeyPatch) -> None:
    req = request(*case)
    ctx = context(req)
    if not block_sequence(ctx)[0][-1].endswith(blocks.WINDOW):
        pytest.skip("no windowed and full blocks on this stack")
    keys = {(c.cp, shared_key(c)) for c in enumerate_candidates(ctx, req.parallel, req.options)}
    assert len(keys) > 50
    own: dict = {}
    for cp, key in sorted(keys, key=repr):
        view = cp_view(ctx, cp)
        full, windowed = block_sequence(view)[0]
        a, b = kind_terms(view, key, full, True), kind_terms(view, key, windowed, True)
        for name in (*MEMORY_FIELDS, "recompute_tmp", "z3_tmp", "flops_layer"):
            assert getattr(a, name) == getattr(b, name), (cp, key, name)
        assert blocks.same_memory(view, key, full, windowed), (cp, key)
        own[cp, key] = window_terms(view, key, True)
    monkeypatch.setattr(blocks, "same_memory", lambda *args: False)
    for (cp, key), terms in own.items():
        assert window_terms(cp_view(ctx, cp), key, True) == terms, (cp, key)


def test_not_with_a_measured_layer() -> None:
    """A context with measured layers (a profile or ``layer_fn``) prices its full kind from them and its window view
    analytically: never shared."""
    from dataclasses import replace

    req = request(*CASES[0])
    ctx = context(req)
    key = shared_key(enumerate_candidates(ctx, req.parallel, req.options)[0])
    full, windowed = block_sequence(ctx)[0]
    assert blocks.same_memory(ctx, key, full, windowed)
    measured = replace(ctx, layer_fn=lambda *args: None)
    assert not blocks.same_memory(measured, key, full, windowed)


@pytest.mark.parametrize(
    "case",
    [
        CASES[0],
        ("deepseek-v3", "h100-sxm5-80gb", 32, 8, 1024, 4096, "megatron"),
        ("qwen3-30b-a3b", "h100-sxm5-80gb", 2, 8, 512, 4096, "torchtitan"),
        ("mixtral-8x7b", "h100-sxm5-80gb", 8, 8, 64, 32768, "megatron"),
    ],
)
def test_the_experts_read_only_whether_recompute_is_full(case) -> None:
    """``experts.with_experts`` prices recompute none and selective as one point: the experts' terms, priced afresh,
    are equal at both, at every point the search enumerates (CP views too); full differs."""
    req = request(*case)
    assert check_recomputes(context(req), req.parallel, req.options) > 20


@pytest.mark.parametrize("seed", range(24))
def test_the_experts_read_only_whether_recompute_is_full_on_random_instances(seed: int) -> None:
    """The same on ``test_expert_floor``'s random mixtures (routing, shared experts, links, a CPU host) and FP8."""
    from tests.test_expert_floor import random_instance

    assert check_recomputes(random_instance(seed), ParallelPins(), SearchOptions(), differ=False) > 0


@pytest.mark.parametrize("recipe", ["current", "delayed"])
def test_the_experts_read_only_whether_recompute_is_full_under_fp8(recipe: str) -> None:
    req = PlanRequest.model_validate(
        {
            "model": "qwen3-30b-a3b",
            "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 2, "gpus_per_node": 8},
            "training": {
                "global_batch_size": 512,
                "seq_len": 4096,
                "stack": "megatron",
                "precision": "fp8",
                "fp8_recipe": recipe,
            },
        }
    )
    assert check_recomputes(context(req), req.parallel, req.options) > 20


def check_recomputes(ctx: Context, pins: ParallelPins, options: SearchOptions, differ: bool = True) -> int:
    """The points checked: ``expert_terms`` at recompute none equals selective (priced afresh); full differs."""
    from planner.compose.experts import expert_terms

    points = {
        (c.cp, c.micro_batch_size, c.tp, c.sequence_parallel, c.ep, c.etp)
        for c in enumerate_candidates(ctx, pins, options)
    }
    differs = 0
    for cp, mbs, tp, sp, ep, etp in sorted(points):
        view = cp_view(ctx, cp)
        none, selective, full = (
            expert_terms.__wrapped__(view, mbs, tp, sp, r, ep, etp) for r in ("none", "selective", "full")
        )
        assert none == selective, (cp, mbs, tp, sp, ep, etp)
        differs += full != none
    assert differs > 0 or not differ
    return len(points)
