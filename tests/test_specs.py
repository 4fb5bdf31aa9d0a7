"""Spec validation: bad shapes are refused with a message naming the field; catalogs are sane."""

import pytest
from pydantic import ValidationError

from planner.specs import ModelSpec, ParallelConfig
from planner.specs.catalog import GPUS, MODELS, get_gpu, get_model
from planner.specs.errors import MeshplanError, validation_errors
from planner.specs.layout import even_stage_layers, mesh_groups, mesh_layout, rank_coords, stage_ranks, tp_plan

TINY = MODELS["tiny-gpt"].model_dump()


@pytest.mark.parametrize(
    "change, field",
    [
        ({"num_attention_heads": 5}, ""),
        ({"num_kv_heads": 3}, ""),
        ({"hidden_size": 0}, "hidden_size"),
        ({"num_layers": 100_000}, "num_layers"),
        ({"family": "bert"}, "family"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_model_spec_rejects_bad_shapes(change, field):
    with pytest.raises(ValidationError) as exc:
        ModelSpec.model_validate({**TINY, **change})
    errors = validation_errors(exc.value)
    assert errors and errors[0]["field"].startswith(field or "")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(tp=1, pp=2, dp=1, micro_batch_size=1, stage_layers=[8]), "pp × virtual_stages"),
        (
            dict(tp=1, pp=2, dp=1, micro_batch_size=1, schedule="interleaved-1f1b", stage_layers=[4, 4]),
            "virtual_stages ≥ 2",
        ),
        (dict(tp=1, pp=1, dp=1, micro_batch_size=1, sequence_parallel=True, stage_layers=[8]), "tp > 1"),
        (dict(tp=1, pp=2, dp=1, micro_batch_size=1, virtual_stages=2, stage_layers=[2, 2, 2, 2]), "interleaved"),
    ],
)
def test_parallel_config_consistency(kwargs, message):
    with pytest.raises(ValidationError, match=message):
        ParallelConfig(**kwargs)


def test_catalog_lookups_and_unknown_ids():
    assert get_model("llama3-405b").num_layers == 126
    assert get_gpu("h100-sxm5-80gb").peak_flops("bf16") == pytest.approx(989.4e12)
    with pytest.raises(MeshplanError) as exc:
        get_model("llama9")
    assert exc.value.field == "model" and "meshplan models" in exc.value.fix
    with pytest.raises(MeshplanError) as exc:
        get_gpu("h300")
    assert exc.value.field == "cluster.gpu"


def test_catalog_required_ids_present():
    for gid in ["a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb", "b200-sxm-192gb"]:
        assert gid in GPUS
    for mid in [
        "gpt3-125m",
        "gpt3-175b",
        "llama2-7b",
        "llama2-13b",
        "llama2-70b",
        "llama3-8b",
        "llama3-70b",
        "llama3-405b",
    ]:
        assert mid in MODELS


def test_mesh_layout_groups_match_row_major_coordinates():
    cfg = ParallelConfig(tp=2, pp=2, dp=2, micro_batch_size=1, stage_layers=[4, 4])
    mesh = mesh_layout(cfg)
    # Brute force: ranks sharing (pp, dp) form TP groups, etc.
    coords = {r: rank_coords(r, 2, 2, 2) for r in range(8)}
    tp_groups, pp_groups, dp_groups = (mesh_groups(mesh, d) for d in ("tp", "pp", "dp"))
    for groups, free in [(tp_groups, 2), (pp_groups, 0), (dp_groups, 1)]:
        for g in groups:
            fixed = {tuple(c for i, c in enumerate(coords[r]) if i != free) for r in g}
            assert len(fixed) == 1 and len(g) == cfg.model_dump()[["pp", "dp", "tp"][free]]
        assert sorted(r for g in groups for r in g) == list(range(8))
    assert tp_groups[0] == [0, 1] and pp_groups[0] == [0, 4] and dp_groups[0] == [0, 2]
    assert mesh.model_dump() == {
        "dim_names": ["pp", "dp", "tp"],
        "shape": [2, 2, 2],
    }  # the groups are derived, not stored


def test_stage_ranks_and_even_split():
    looped = ParallelConfig(
        tp=1, pp=2, dp=1, micro_batch_size=1, schedule="interleaved-1f1b", virtual_stages=2, stage_layers=[2, 2, 2, 2]
    )
    assert stage_ranks(looped) == [0, 1, 0, 1]
    v = looped.model_copy(update={"schedule": "zbv-zero-bubble"})
    assert stage_ranks(v) == [0, 1, 1, 0]
    for layers, chunks in [(8, 3), (126, 16), (5, 5), (7, 2)]:
        split = even_stage_layers(layers, chunks)
        assert sum(split) == layers and max(split) - min(split) <= 1


def test_tp_plan_covers_each_linear_once():
    model = MODELS["tiny-llama"]
    cfg = ParallelConfig(tp=2, pp=1, dp=1, micro_batch_size=1, stage_layers=[8], sequence_parallel=True)
    rules = {r.pattern: r.style for r in tp_plan(model, cfg)}
    assert rules["layers.*.attn.wq"] == "colwise" and rules["layers.*.mlp.w2"] == "rowwise"
    assert rules["layers.*.mlp.w3"] == "colwise" and rules["norm"] == "sequence_parallel"
    assert tp_plan(model, cfg.model_copy(update={"tp": 1, "sequence_parallel": False})) == []
