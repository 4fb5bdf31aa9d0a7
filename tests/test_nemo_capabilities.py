"""What NeMo 24.07 and the MLPerf v3.1/v4.0 code build (issue 27 §1: never propose what the named stack cannot run):
the even split only, no interleaving on two stages for MLPerf, and NeMo 24.07's Megatron-core MoE.

Its Megatron-core (338af514) builds ``num_layers // pp`` layers a pipeline stage and ``// v`` of those a virtual
chunk (``transformer_block.py:48-79`` ``get_num_layers_to_build``, ``transformer_layer.py:133-157`` the offsets);
uneven first/last stages came in fa8bb592 (2024-09), uneven virtual stages in ef490839 (2025-02), any layout in
77732c36 (2025-06). So the ``nemo-2407`` preset has ``Stack.even_stages``: its free plans split evenly, a pin of any
other cut is refused naming the field, and the same request on the ``megatron`` preset (Megatron-core 0.16.1, which runs
``--pipeline-model-parallel-layout``) may still answer an uneven cut. MLPerf v3.1 (NeMo bd0b818's own GPT: it asserts
num_layers divisible by pp, then by v) and v4.0 (core_v0.7.0.beta) are ``megatron`` requests with the
``StackOverride.even_stages`` field on (``bench/fidelity_mlperf.stack``)."""

from __future__ import annotations

import pytest
from bench_support import bench_module, on_megatron

import planner
from planner.api import plan
from planner.specs import PlanRequest
from planner.specs.errors import MeshplanError
from planner.specs.stacks import STACKS

ROWS = ["nemo2412_LLAMA2-7B_8gpu", "nemo2407_LLAMA2-13B_16gpu", "nemo2407_Nemotron-340B_128gpu"]
MLPERF = ["mlperf_v3.1_nvidia_gpt3_1024nodes", "mlperf_v4.0_nvidia_gpt3_1452nodes"]


def row(case: str) -> dict:
    return dict(bench_module("bench_plan_wide").cases())[case]


def even(stage_layers: list[int]) -> bool:
    return len(set(stage_layers)) == 1


def test_the_preset_splits_evenly_only() -> None:
    assert STACKS["nemo-2407"].even_stages and not STACKS["megatron"].even_stages


@pytest.mark.parametrize("case", ROWS + MLPERF)
def test_free_plans_split_evenly(case: str) -> None:
    """Each plan of the wide benchmark's NeMo and MLPerf rows left free splits evenly (the top 3), proven."""
    resp = plan(PlanRequest.model_validate({**row(case), "top_k": 3}))
    assert resp.solver.status == "OPTIMAL" and not resp.solver.unproven, resp.solver.notes
    for p in resp.plans:
        assert p.parallel.stage_layers is not None and even(p.parallel.stage_layers), p.parallel


def test_the_megatron_preset_answers_an_uneven_cut_of_the_same_request() -> None:
    """The same Llama 2 7B request on Megatron-core 0.16.1 answers an interleaved uneven cut (PP2 with 12 chunks of 32
    layers), faster than NeMo 24.07's even answer: the difference is the stack's, not the request's."""
    nemo = plan(PlanRequest.model_validate({**row(ROWS[0]), "top_k": 1}))
    mega = plan(PlanRequest.model_validate({**on_megatron(row(ROWS[0])), "top_k": 1}))
    cut = mega.plans[0].parallel.stage_layers
    assert cut is not None and not even(cut)
    assert mega.plans[0].estimate.step_time_s < nemo.plans[0].estimate.step_time_s


@pytest.mark.parametrize(
    ("pins", "field"),
    [
        ({"pp": 2, "stage_layers": [15, 17]}, "parallel.stage_layers"),
        ({"pp": 2, "schedule": "interleaved-1f1b", "virtual_stages": 6}, "parallel.pp"),  # 32 % 12 chunks
        ({"pp": 4, "schedule": "interleaved-1f1b", "virtual_stages": 3}, "parallel.pp"),  # 32 % 12 chunks
    ],
)
def test_an_uneven_pin_is_refused_naming_the_field(pins: dict, field: str) -> None:
    body = row(ROWS[0])
    with pytest.raises(MeshplanError) as err:
        planner.estimate({**body, "parallel": {"tp": 1, "micro_batch_size": 2, **pins}})
    assert err.value.field == field and "nemo-2407" in err.value.message and "evenly" in err.value.message


def test_the_override_refuses_an_uneven_pin_on_megatron() -> None:
    """``even_stages`` on an inline ``megatron`` stack (an MLPerf row's) refuses the cut the preset alone accepts."""
    body = row(MLPERF[0])
    pins = {"tp": 4, "pp": 8, "micro_batch_size": 1, "schedule": "interleaved-1f1b", "virtual_stages": 5}
    with pytest.raises(MeshplanError) as err:  # 96 layers in 40 chunks
        planner.estimate({**body, "parallel": {**body.get("parallel", {}), **pins}})
    assert err.value.field == "parallel.pp" and "evenly" in err.value.message
    stack = {**body["training"]["stack"], "even_stages": None}
    free = {**body, "training": {**body["training"], "stack": stack}}
    assert planner.estimate({**free, "parallel": {**free.get("parallel", {}), **pins}}).step_time_s > 0


def test_the_mlperf_rows_do_not_interleave_on_two_stages() -> None:
    """MLPerf v3.1/v4.0's Megatron-core refuses interleaving at pp = 2 (parallel_state.py at df7271285d :150-153 and
    core_v0.7.0.beta :446-450, "should be greater than 2"; allowed from 3ee489d9, 2024-05): ``interleaved_min_pp`` 3 on
    their inline stack, while the ``megatron`` preset alone prices it."""
    body = row(MLPERF[1])
    pins = {"tp": 8, "pp": 2, "micro_batch_size": 1, "schedule": "interleaved-1f1b", "virtual_stages": 2}
    with pytest.raises(MeshplanError) as err:
        planner.estimate({**body, "parallel": pins})
    assert err.value.field == "parallel.pp" and "pp ≥ 3" in err.value.message
    stack = {**body["training"]["stack"], "interleaved_min_pp": None}
    assert planner.estimate({**body, "training": {**body["training"], "stack": stack}, "parallel": pins}).step_time_s


#: (model, the parts NeMo 24.07's Megatron-core 338af514 does not build; [] = it builds the model)
MOE = [
    ("mixtral-8x22b", []),
    ("qwen3-30b-a3b", []),
    ("olmoe-1b-7b", []),
    ("deepseek-v3", ["mla", "moe.shared_experts", "moe.first_dense_layers", "moe.router=sigmoid", "moe.router_groups"]),
    ("gpt-oss-120b", ["attention_sinks", "moe.expert_bias", "moe.router_bias", "moe.swiglu_limit"]),
    ("llama4-maverick", ["moe.shared_experts", "moe.moe_layer_freq!=1", "moe.router=sigmoid"]),
]


@pytest.mark.parametrize(("model", "parts"), MOE)
def test_nemo_builds_the_mixtures_of_experts_its_megatron_core_builds(model: str, parts: list[str]) -> None:
    """338af514's transformer_config.py has no shared experts, MoE layer frequency, router score function or groups,
    MLA; its router is a bias-free linear (moe/router.py:65), its grouped expert GEMMs take no bias (moe/experts.py:
    46-49). A model with any of those is refused naming training.stack; the others plan (the megatron preset, core
    0.16.1, builds them all)."""
    from planner.specs.catalog import MODELS
    from planner.specs.stack_rules import unbuilt_parts

    assert unbuilt_parts(STACKS["nemo-2407"], MODELS[model]) == parts
    assert unbuilt_parts(STACKS["megatron"], MODELS[model]) == []
    body = {
        "model": model,
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 16, "gpus_per_node": 8},
        "training": {"global_batch_size": 256, "seq_len": 4096, "stack": "nemo-2407"},
        "top_k": 1,
    }
    if parts:
        with pytest.raises(MeshplanError) as err:
            plan(PlanRequest.model_validate(body))
        assert err.value.field == "training.stack" and "nemo-2407" in err.value.message
    else:
        best = plan(PlanRequest.model_validate(body)).plans[0].parallel
        assert best.etp == best.tp  # experts split over the layer's TP (moe_extended_tp not priced)


def test_nemo_splits_experts_over_the_layers_tp_only() -> None:
    body = {
        "model": "mixtral-8x22b",
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 16, "gpus_per_node": 8},
        "training": {"global_batch_size": 256, "seq_len": 4096, "stack": "nemo-2407"},
    }
    pins = {"tp": 2, "etp": 1, "ep": 4, "pp": 8, "micro_batch_size": 1, "sequence_parallel": True}
    with pytest.raises(MeshplanError) as err:
        planner.estimate({**body, "parallel": pins})
    assert err.value.field == "parallel.etp"
    assert planner.estimate({**body, "parallel": {**pins, "etp": 2}}).step_time_s > 0
