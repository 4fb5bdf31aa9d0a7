"""Plan validation: each bad plan is refused before any process-group work, naming the field."""

from __future__ import annotations

import pytest

from planner.specs import TPRule
from planner.specs.errors import MeshplanError
from runtime.testing import make_plan
from runtime.validate import module_names, validate_plan


def _mutate(plan, **changes):
    """A copy of ``plan`` with dotted fields replaced (bypassing the cross-field checks a planner makes)."""
    data = plan.model_dump()
    for dotted, value in changes.items():
        target = data
        *path, last = dotted.split(".")
        for key in path:
            target = target[int(key)] if isinstance(target, list) else target[key]
        target[last] = value
    return type(plan).model_validate(data)


def _gqa_kv1():
    from planner.specs.catalog import MODELS

    return MODELS["tiny-llama"].model_copy(update={"num_kv_heads": 1})


BAD = [
    # (id, plan factory, world size, field)
    ("world-size", lambda: make_plan("tiny-gpt", tp=2, dp=2), 2, "parallel"),
    ("stage-layers-sum", lambda: make_plan("tiny-gpt", pp=2, stage_layers=[3, 3]), 2, "parallel.stage_layers"),
    (
        "empty-middle-chunk",
        lambda: make_plan("tiny-gpt", pp=4, schedule="gpipe", stage_layers=[4, 0, 0, 4]),
        4,
        "parallel.stage_layers",
    ),
    ("tp-kv-heads", lambda: make_plan(_gqa_kv1(), tp=2), 2, "parallel.tp"),
    ("tp-heads", lambda: make_plan("tiny-gpt", tp=8), 8, "parallel.tp"),
    (
        "1f1b-too-few-microbatches",
        lambda: make_plan("tiny-gpt", pp=4, global_batch_size=2, micro_batch_size=1),
        4,
        "parallel.micro_batch_size",
    ),
    (
        "interleaved-rounds",
        lambda: make_plan("tiny-gpt", pp=2, schedule="interleaved-1f1b", virtual_stages=2, global_batch_size=5),
        2,
        "parallel.micro_batch_size",
    ),
    (
        "global-batch",
        lambda: make_plan("tiny-gpt", dp=2, global_batch_size=6, micro_batch_size=2),
        2,
        "training.global_batch_size",
    ),
    ("seq-len", lambda: make_plan("tiny-gpt", seq_len=256), 1, "training.seq_len"),
    ("sp-seq-len", lambda: make_plan("tiny-gpt", tp=2, sequence_parallel=True, seq_len=33), 2, "training.seq_len"),
    (
        "tied-pp",
        lambda: make_plan(
            __import__("planner.specs.catalog")
            .specs.catalog.MODELS["tiny-gpt"]
            .model_copy(update={"tie_embeddings": True}),
            pp=2,
        ),
        2,
        "model.tie_embeddings",
    ),
    ("mesh-shape", lambda: _mutate(make_plan("tiny-gpt", tp=2, dp=2), **{"mesh.shape": [1, 4, 1]}), 4, "mesh.shape"),
    (
        "mesh-dims",
        lambda: _mutate(make_plan("tiny-gpt", tp=2, dp=2), **{"mesh.dim_names": ["pp", "tp", "dp"]}),
        4,
        "mesh.shape",
    ),
    (
        "tp-plan-pattern",
        lambda: _mutate(make_plan("tiny-gpt", tp=2), **{"tp_plan.0.pattern": "layers.*.attention.q_proj"}),
        2,
        "tp_plan.0.pattern",
    ),
    (
        "tp-plan-sp-off",
        lambda: make_plan("tiny-gpt", tp=2).model_copy(
            update={"tp_plan": [TPRule(pattern="norm", style="sequence_parallel")]}
        ),
        2,
        "tp_plan.0.style",
    ),
    (
        "virtual-without-pipeline",
        lambda: _mutate(
            make_plan("tiny-gpt", pp=2, schedule="interleaved-1f1b", virtual_stages=2),
            **{"parallel.pp": 1, "parallel.stage_layers": [4, 4], "mesh.shape": [1, 1, 1]},
        ),
        1,
        "parallel.virtual_stages",
    ),
]


@pytest.mark.parametrize("factory, world, field", [pytest.param(f, w, fld, id=i) for i, f, w, fld in BAD])
def test_bad_plan_names_the_field(factory, world, field):
    with pytest.raises(MeshplanError) as exc:
        validate_plan(factory(), world)
    assert exc.value.field == field
    assert exc.value.fix, "every error says how to fix it"


@pytest.mark.parametrize(
    "par, world",
    [
        (dict(tp=2, pp=2, dp=2, sequence_parallel=True, schedule="zbv-zero-bubble", virtual_stages=2), 8),
        (dict(pp=4, schedule="gpipe", stage_layers=[0, 4, 4, 0]), 4),  # embedding/head-only end chunks
        (dict(pp=2, schedule="interleaved-1f1b", virtual_stages=2, stage_layers=[1, 3, 3, 1]), 2),
        (dict(tp=4), 4),
    ],
)
def test_good_plans_pass(par, world):
    validate_plan(make_plan("tiny-llama", **par), world)


def test_module_names_match_the_built_model():
    from planner.specs.catalog import MODELS
    from runtime.models import build_model

    for name in ("tiny-gpt", "tiny-llama"):
        plan = make_plan(name)
        built = {n for n, _ in build_model(MODELS[name], device="meta").named_modules() if n and n != "layers"}
        assert set(module_names(plan)) == built
