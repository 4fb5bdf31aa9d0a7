"""Issue 27 §1: the ``megatron-2020`` preset (Megatron-LM v2.0, ``planner.specs.stack_eras``) says what that release
runs — ZeRO-0, 1F1B, full recompute, no SP, even stages, tied GPT models — the search stays inside it, a pin outside
it is an error naming the field, and its export target (Megatron-LM v2.0 flags) renders what it plans and refuses,
naming the field, what v2.0 cannot run."""

from __future__ import annotations

import pytest

import planner
from api.exporters import ExportOptions, export
from planner.specs.errors import MeshplanError
from planner.specs.stacks import STACKS

BASE = {
    "model": "gpt3-6.7b",
    "cluster": {"gpu": "a100-sxm4-80gb", "num_nodes": 4, "gpus_per_node": 8},
    "training": {"global_batch_size": 512, "seq_len": 2048, "stack": "megatron-2020", "precision": "fp16"},
}


def test_what_v2_runs() -> None:
    s = STACKS["megatron-2020"]
    assert (s.zero_stages, s.pipeline_zero_stages, s.schedules) == ((0,), (0,), ("1f1b",))
    assert (s.sequence_parallel, s.recompute, s.pp_with_tied_embeddings, s.even_stages) == (
        False,
        ("none", "full"),
        True,
        True,
    )
    assert (s.cp_comms, s.fp8_recipes, s.tp_overlap, s.moe) == ((), (), None, False)
    assert (s.attention, s.dropout, s.overlap_grad_reduce, s.grad_accumulation) == ("unfused", True, False, "megatron")


def test_free_plans_stay_inside_v2_and_export_to_its_flags() -> None:
    plans = planner.plan({**BASE, "top_k": 5}).plans
    assert plans
    for p in plans:
        c = p.parallel
        assert c.zero_stage == 0 and not c.sequence_parallel and c.recompute in ("none", "full"), c
        assert c.virtual_stages == 1 and len(set(c.stage_layers)) == 1, c
        text = export(p, "megatron-2020", ExportOptions()).content
        assert f"--tensor-model-parallel-size {c.tp}" in text and f"--pipeline-model-parallel-size {c.pp}" in text
        assert "--fp16" in text and "--DDP-impl local" in text
        assert ("--checkpoint-activations" in text) is (c.recompute == "full")
        for modern in ("--sequence-parallel", "--use-distributed-optimizer", "--recompute-granularity", "--bf16"):
            assert modern not in text


@pytest.mark.parametrize(
    ("pins", "field"),
    [
        ({"zero_stage": 1}, "parallel.zero_stage"),
        ({"tp": 2, "sequence_parallel": True}, "parallel.sequence_parallel"),
        ({"recompute": "selective"}, "parallel.recompute"),
        ({"pp": 2, "schedule": "interleaved-1f1b", "virtual_stages": 2}, "parallel.schedule"),
        ({"pp": 2, "stage_layers": [15, 17]}, "parallel.stage_layers"),
    ],
)
def test_a_pin_outside_v2_is_refused_naming_the_field(pins: dict, field: str) -> None:
    with pytest.raises(MeshplanError) as err:
        planner.estimate({**BASE, "parallel": {"micro_batch_size": 1, **pins}})
    assert err.value.field == field
    assert "megatron-2020" in err.value.message


def test_layers_that_do_not_divide_into_the_stages_are_refused() -> None:
    """v2.0's ParallelTransformer asserts num_layers % pp == 0: 30 layers on pp 4 is refused on parallel.pp, and the
    free search over the same model picks only divisors of 30."""
    model = {
        "name": "gpt-30l",
        "family": "gpt",
        "num_layers": 30,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_kv_heads": 32,
        "ffn_hidden_size": 16384,
        "vocab_size": 51200,
        "activation": "gelu",
        "norm": "layernorm",
        "tie_embeddings": True,
        "max_seq_len": 2048,
    }
    with pytest.raises(MeshplanError) as err:
        planner.estimate({**BASE, "model": model, "parallel": {"pp": 4, "tp": 1, "micro_batch_size": 1}})
    assert err.value.field == "parallel.pp" and "evenly" in err.value.message
    for p in planner.plan({**BASE, "model": model, "top_k": 5}).plans:
        assert 30 % p.parallel.pp == 0 and len(set(p.parallel.stage_layers)) == 1


@pytest.mark.parametrize("model", ["llama3-8b", "mixtral-8x7b"])
def test_models_v2_does_not_build_are_refused(model: str) -> None:
    with pytest.raises(MeshplanError) as err:
        planner.plan({**BASE, "model": model})
    assert err.value.field == "training.stack" and "megatron-2020" in err.value.message


def test_the_export_refuses_what_v2_cannot_run() -> None:
    """A bf16 plan (v2.0 has no --bf16) and a plan priced for another stack that v2.0 cannot run (ZeRO-1 on
    Megatron-core) are refused by the megatron-2020 target, naming the field."""
    plan = planner.plan({**BASE, "top_k": 1}).plans[0]
    bf16 = plan.model_copy(update={"training": plan.training.model_copy(update={"precision": "bf16"})})
    with pytest.raises(MeshplanError) as err:
        export(bf16, "megatron-2020", ExportOptions())
    assert err.value.field == "plan.training.precision"
    zero1 = planner.plan(
        {
            **BASE,
            "training": {**BASE["training"], "stack": "megatron"},
            "parallel": {"zero_stage": 1, "tp": 1, "pp": 1},
            "top_k": 1,
        }
    ).plans[0]
    with pytest.raises(MeshplanError) as err:
        export(zero1, "megatron-2020", ExportOptions())
    assert err.value.field == "plan.parallel.zero_stage"


def test_the_2020_era_runs_are_priced_with_v2_and_planned_free_within_it() -> None:
    """bench_fidelity prices the dev set's 2020–2021 Megatron rows with megatron-2020 (the 2020 README rows with their
    eager kernels of 2020-09), so a free plan for them (issue 27 §4) uses only what v2.0 ran."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / "bench_fidelity.py"
    spec = importlib.util.spec_from_file_location("bench_fidelity_v2", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # its dataclasses look their module up
    spec.loader.exec_module(bench)
    data = bench.load_all()
    rows = {r["id"]: r for r in data["runs"]}
    assert bench.stack_of(rows["megatron_readme_gpt3_175b_example_1024"]) == "megatron-2020"
    for run in ("megatron_2020_dgxa100_2B", "megatron_2020_dgxa100_dp128_8B", "megatron_2020_dgx2_v100_1B"):
        assert bench.stack_of(rows[run]) == {"base": "megatron-2020", "kernels": "eager"}
    free = bench.free_plan(rows["megatron_2020_dgxa100_2B"], data["gpus"], 1.0)
    assert free.configuration is not None and "ZeRO-0" in free.configuration and "SP" not in free.configuration
    assert "interleaved" not in free.configuration and "selective" not in free.configuration


def test_the_export_refuses_grouped_query_attention() -> None:
    """v2.0 has one K/V head per query head: a GQA GPT plan is refused on model.num_kv_heads, not exported as MHA."""
    plan = planner.plan({**BASE, "top_k": 1}).plans[0]
    gqa = plan.model_copy(update={"model": plan.model.model_copy(update={"num_kv_heads": 8})})
    with pytest.raises(MeshplanError) as err:
        export(gqa, "megatron-2020", ExportOptions())
    assert err.value.field == "plan.model.num_kv_heads"
