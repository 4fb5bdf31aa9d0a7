"""One set of feasibility rules (planner/rules.py) and one definition of the configuration
(planner/config.py): every caller reports a broken rule the same way, and the classes that spell the
configuration cannot drift from the table."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import Field, ValidationError, create_model

import planner
from api.exporters import export
from planner.answer.request import ESTIMATE_DEFAULTS
from planner.compose.cost import Candidate
from planner.specs import ParallelConfig, ParallelPins, config, rules
from planner.specs.catalog import MODELS
from planner.specs.errors import MeshplanError
from runtime.testing import make_plan
from runtime.validate import validate_plan

KV1 = MODELS["tiny-llama"].model_copy(update={"num_kv_heads": 1})

# (id, model, training (global_batch_size, seq_len), parallel, field): a configuration that breaks one
# rule every caller enforces.
SHARED = [
    ("stage-layers-sum", "tiny-gpt", (8, 32), dict(pp=2, stage_layers=[3, 3]), "parallel.stage_layers"),
    ("tp-heads", "tiny-gpt", (8, 32), dict(tp=8), "parallel.tp"),
    ("tp-kv-heads", KV1, (8, 32), dict(tp=2), "parallel.tp"),
    ("global-batch", "tiny-gpt", (6, 32), dict(dp=2, micro_batch_size=2), "training.global_batch_size"),
    ("1f1b-too-few-microbatches", "tiny-gpt", (2, 32), dict(pp=4, schedule="1f1b"), "parallel.micro_batch_size"),
    ("sp-seq-len", "tiny-gpt", (8, 33), dict(tp=2, sequence_parallel=True), "training.seq_len"),
    ("seq-len-over-max", "tiny-gpt", (8, 256), dict(), "training.seq_len"),
]


def _estimate_request(model, gbs: int, seq: int, par: ParallelConfig) -> dict:
    return {
        "model": model if isinstance(model, str) else model.model_dump(),
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": par.num_gpus},
        "training": {"global_batch_size": gbs, "seq_len": seq, "precision": "fp32"},
        "parallel": par.model_dump(),
    }


def _error(fn, *args) -> MeshplanError:
    with pytest.raises(MeshplanError) as err:
        fn(*args)
    return err.value


@pytest.mark.parametrize("model, training, par, field", [pytest.param(*c[1:], id=c[0]) for c in SHARED])
def test_every_caller_reports_a_broken_rule_the_same_way(model, training, par, field):
    """Planner estimate, runtime validate_plan and an exporter: same field (the exporter's under
    ``plan.``), same message, same fix."""
    gbs, seq = training
    plan = make_plan(model, global_batch_size=gbs, seq_len=seq, **par)
    from_estimate = _error(planner.estimate, _estimate_request(model, gbs, seq, plan.parallel))
    from_runtime = _error(validate_plan, plan, plan.parallel.num_gpus)
    from_export = _error(export, plan, "torchrun")
    assert from_estimate.field == from_runtime.field == field
    assert from_export.field == f"plan.{field}"
    assert from_estimate.message == from_runtime.message == from_export.message
    assert from_estimate.fix == from_runtime.fix == from_export.fix and from_estimate.fix
    assert rules.runnable(plan.model, plan.training, plan.parallel).message == from_runtime.message


# What only the planner needs (it prices these configurations; the runtime runs them anyway): the
# planner refuses them naming the field, the runtime and the exporters accept the same plan.
PLANNER_ONLY = [
    (
        "zero-bubble-not-priced",
        "tiny-gpt",
        (8, 32),
        dict(pp=2, schedule="zbv-zero-bubble", virtual_stages=2),
        "parallel.schedule",
    ),
    (
        "interleaved-not-whole-rounds",
        "tiny-gpt",
        (6, 32),
        dict(pp=4, schedule="interleaved-1f1b", virtual_stages=2),
        "parallel.micro_batch_size",
    ),
    ("embedding-only-first-chunk", "tiny-gpt", (8, 32), dict(pp=2, stage_layers=[0, 8]), "parallel.stage_layers"),
]


@pytest.mark.parametrize("model, training, par, field", [pytest.param(*c[1:], id=c[0]) for c in PLANNER_ONLY])
def test_priced_rules_are_the_planners_alone(model, training, par, field):
    gbs, seq = training
    plan = make_plan(model, global_batch_size=gbs, seq_len=seq, **par)
    validate_plan(plan, plan.parallel.num_gpus)
    export(plan, "torchrun")
    err = _error(planner.estimate, _estimate_request(model, gbs, seq, plan.parallel))
    assert err.field == field and err.fix


# The ParallelConfig validator and pin validation use the same rules: the pydantic error carries
# the rule's own message.
CONFIG_ONLY = [
    (dict(tp=1, sequence_parallel=True), rules.sequence_parallel_needs_tp(True, 1)),
    (dict(pp=2, schedule="1f1b", virtual_stages=2, stage_layers=[2, 2, 2, 2]), rules.virtual_stages_fit("1f1b", 2)),
    (
        dict(pp=2, schedule="interleaved-1f1b", virtual_stages=1, stage_layers=[4, 4]),
        rules.virtual_stages_fit("interleaved-1f1b", 1),
    ),
    (
        dict(pp=2, schedule="zbv-zero-bubble", virtual_stages=3, stage_layers=[1] * 6 + [2]),
        rules.stage_layers_count([1] * 6 + [2], 2, 3),
    ),
    (
        dict(pp=2, schedule="zbv-zero-bubble", virtual_stages=3, stage_layers=[1, 1, 1, 1, 2, 2]),
        rules.virtual_stages_fit("zbv-zero-bubble", 3),
    ),
    (dict(pp=2, stage_layers=[8]), rules.stage_layers_count([8], 2, 1)),
]


@pytest.mark.parametrize("par, expected", CONFIG_ONLY)
def test_parallel_config_validator_uses_the_rules(par, expected):
    assert expected is not None
    with pytest.raises(ValidationError) as err:
        ParallelConfig(**{"tp": 1, "pp": 1, "dp": 1, "micro_batch_size": 1, "stage_layers": [8], **par})
    assert str(expected) in str(err.value)


@pytest.mark.parametrize(
    "pins, expected",
    [
        ({"tp": 1, "sequence_parallel": True}, rules.sequence_parallel_needs_tp(True, 1)),
        ({"schedule": "1f1b", "virtual_stages": 2}, rules.virtual_stages_fit("1f1b", 2)),
    ],
)
def test_pins_use_the_same_rules(pins, expected):
    req = _estimate_request("tiny-gpt", 8, 32, make_plan("tiny-gpt").parallel)
    req["parallel"] = pins
    for fn in (planner.estimate, planner.plan):
        err = _error(fn, req)
        assert (err.field, err.message, err.fix) == (expected.field, expected.message, expected.fix)


# ------------------------------------------------------------------------------------------------
# The configuration, spelled once


def test_classes_follow_the_field_table():
    names = [f.name for f in config.FIELDS]
    assert list(ParallelConfig.model_fields) == names == list(ParallelPins.model_fields)
    # A class holds cp and cp_comm (searched, issue 24); only the stage cut is not part of it.
    assert [f.name for f in dataclasses.fields(Candidate)] == [f.name for f in config.FIELDS if f.in_class]
    assert [f.name for f in config.FIELDS if not f.in_class] == ["stage_layers"]
    for f in config.FIELDS:
        info, pin = ParallelConfig.model_fields[f.name], ParallelPins.model_fields[f.name]
        assert info.description == f.description and pin.default is None
        assert info.is_required() == f.required and (f.required or info.default == f.default)
    assert ESTIMATE_DEFAULTS == {
        "tp": 1,
        "pp": 1,
        "cp": 1,
        "cp_comm": "p2p",
        "micro_batch_size": 1,
        "schedule": "1f1b",
        "recompute": "none",
        "sequence_parallel": False,
        "zero_stage": 0,
        "tp_comm_overlap": False,
        "ep": 1,  # etp: tp on a MoE model, else 1 (complete_pins)
    }


def test_a_class_that_drifts_from_the_table_is_refused():
    @dataclasses.dataclass(frozen=True)
    class Missing:
        tp: int
        pp: int

    @dataclasses.dataclass(frozen=True)
    class WrongType:
        tp: int
        pp: int
        dp: int
        micro_batch_size: int
        schedule: str
        virtual_stages: int
        recompute: str
        sequence_parallel: int
        zero_stage: int

    for cls in (Missing, WrongType):
        with pytest.raises(TypeError):
            config.check_fields(cls, class_only=True)

    # A pydantic twin whose tp bound was written by hand (le=64 instead of the table's MAX_GPUS).
    fields = {f.name: (f.type, config.config_field(f.name)) for f in config.FIELDS}
    fields["tp"] = (int, Field(ge=1, le=64, description=config.FIELD["tp"].description))
    with pytest.raises(TypeError, match="tp"):
        config.check_fields(create_model("Drifted", **fields))
    config.check_fields(create_model("Same", **{f.name: (f.type, config.config_field(f.name)) for f in config.FIELDS}))


def test_schema_json_is_unchanged_by_the_table():
    """Same field names, types, bounds and defaults as the hand-written classes had."""
    s = ParallelConfig.model_json_schema()["properties"]
    assert s["tp"]["minimum"] == 1 and s["tp"]["maximum"] == config.MAX_GPUS
    assert s["zero_stage"] == {
        "default": 0,
        "description": config.FIELD["zero_stage"].description,
        "maximum": 3,
        "minimum": 0,
        "title": "Zero Stage",
        "type": "integer",
    }
    assert s["schedule"]["enum"] == [x.id for x in config.SCHEDULES]
    assert set(ParallelConfig.model_json_schema()["required"]) == {"tp", "pp", "dp", "micro_batch_size", "stage_layers"}
    plan = make_plan("tiny-gpt", pp=2)
    assert ParallelConfig.model_validate_json(plan.parallel.model_dump_json()) == plan.parallel


def test_one_describe_for_cli_explanations_and_api():
    par = make_plan(
        "tiny-llama",
        tp=2,
        pp=2,
        dp=2,
        sequence_parallel=True,
        schedule="interleaved-1f1b",
        virtual_stages=2,
        zero_stage=1,
        stage_layers=[1, 3, 3, 1],
    ).parallel
    cand = Candidate(**{k: getattr(par, k) for k in config.CLASS_FIELDS})
    assert (
        config.describe(par, 4)
        == "TP2+SP×PP2×DP2, mbs 1 (4 micro-batches), interleaved-1f1b v=2, recompute none, ZeRO-1, stages [1, 3, 3, 1]"
    )
    assert (
        cand.describe()
        == config.describe(cand)
        == "TP2+SP×PP2×DP2, mbs 1, interleaved-1f1b v=2, recompute none, ZeRO-1"
    )


# ------------------------------------------------------------------------------------------------
# Schedules


def test_runnable_schedules_are_what_the_runtime_runs():
    pipelining = pytest.importorskip("torch.distributed.pipelining")
    from runtime.job import _SCHEDULES

    assert list(_SCHEDULES) == list(config.RUNNABLE_SCHEDULES)
    for s in config.SCHEDULES:
        assert (s.torch_class is not None and hasattr(pipelining, s.torch_class)) == s.runnable
    assert set(config.PRICED_SCHEDULES) <= set(config.RUNNABLE_SCHEDULES)


@pytest.mark.parametrize("seq, gbs", [(33, 12), (128, 32)])
def test_every_plan_the_planner_returns_is_runnable(seq, gbs):
    """The planner's rules include every rule of ``runnable`` (e.g. SP splits seq_len evenly over tp:
    with an odd sequence length no SP plan may come back)."""
    req = {
        "model": "tiny-gpt",
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
        "training": {"global_batch_size": gbs, "seq_len": seq},
        "top_k": 5,
        "options": {"time_limit_s": 5, "num_workers": 1},
    }
    plans = planner.plan(req).plans
    assert plans
    for p in plans:
        assert rules.runnable(p.model, p.training, p.parallel) is None, config.describe(p.parallel)
        validate_plan(p, p.parallel.num_gpus)
        export(p, "torchrun")
