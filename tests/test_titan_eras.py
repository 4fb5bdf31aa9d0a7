"""What torchtitan ran at the commits of its published runs (issue 27 §1: never propose what the named stack cannot run;
``planner/specs/stack_titan.py`` has the sources): 1ea476e9 (2024-04, ``torchtitan-2404``) has no pipeline, FSDP2
ZeRO-3 only, sequence parallelism on every TP block, no TP under ``fused_rmsnorm``; 9515a140 (``torchtitan-2408``) and
9dec370 (``torchtitan-2412``) add pipelines (FSDP2 kept unsharded after forward there: ZeRO-2), not accumulation. None
accumulates gradients without a pipeline: a step is one micro-batch per data-parallel rank. The wide benchmark's three
torchtitan A100 rows, whose free plans were interleaved pipelines with async TP on the ``torchtitan`` preset, are the
table's cases; they are answered on the preset of the commit that ran them."""

from __future__ import annotations

import pytest
from bench_support import bench_module

from planner.api import plan
from planner.specs import PlanRequest
from planner.specs.stacks import STACKS

TITAN_A100 = [
    "torchtitan_2404_a100_70B_full",
    "torchtitan_2404_a100_llama2_70b_lbs1",
    "torchtitan_2404_a100_llama2_70b_lbs2",
]


def request(stack: object, model: str = "llama3-8b", gpus: int = 16, gbs: int = 64) -> PlanRequest:
    return PlanRequest.model_validate(
        {
            "model": model,
            "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": gpus // 8, "gpus_per_node": 8},
            "training": {"global_batch_size": gbs, "seq_len": 4096, "stack": stack},
            "top_k": 3,
        }
    )


def runnable(stack_id: str, p, gbs: int) -> bool:
    """What ``stack_id``'s commit runs, restated from its source (not from ``stack_rules``)."""
    piped = p.pp > 1
    if stack_id == "torchtitan-2404" and (piped or p.tp_comm_overlap or p.cp > 1):
        return False  # parallelize_llama.py:139-140, no async TP or CP at 1ea476e9
    if not piped and p.dp * p.micro_batch_size != gbs:
        return False  # train.py: one forward and backward a step
    if p.tp > 1 and not p.sequence_parallel:
        return False  # SequenceParallel norms on every TP block
    if p.dp * p.cp > 1 and p.zero_stage != (2 if piped else 3):
        return False  # reshard_after_forward = not pp_enabled (but the last block)
    return True


@pytest.mark.parametrize("stack", ["torchtitan-2404", "torchtitan-2408", "torchtitan-2412"])
@pytest.mark.parametrize("model,gpus,gbs", [("llama3-8b", 16, 64), ("llama3-70b", 64, 128)])
def test_every_plan_is_one_the_commit_ran(stack: str, model: str, gpus: int, gbs: int) -> None:
    plans = plan(request(stack, model, gpus, gbs)).plans
    assert plans and all(runnable(stack, p.parallel, gbs) for p in plans), [str(p.parallel) for p in plans]


def test_the_current_preset_runs_more() -> None:
    """The same request on the ``torchtitan`` preset (0.3.0: gradient accumulation, ZeRO-2 without a pipeline, TP
    without SP) answers plans 1ea476e9 did not run: the era presets are what keep them out."""
    plans = plan(request("torchtitan", "llama3-70b", 64, 128)).plans
    assert any(not runnable("torchtitan-2404", p.parallel, 128) for p in plans)


@pytest.mark.parametrize("case", TITAN_A100)
def test_the_a100_rows_are_answered_on_their_commit(case: str) -> None:
    """docs/performance.md's A100 rows ran 1ea476e9: FSDP2 over 64 ranks, one micro-batch a step; left free on
    ``torchtitan-2404`` they are proven optimal with no pipeline (on the ``torchtitan`` preset: interleaved PP8 with
    async TP, not proven)."""
    req = PlanRequest.model_validate(dict(bench_module("bench_plan_wide").cases())[case])
    stack = req.training.stack
    assert (stack if isinstance(stack, str) else stack.base) == "torchtitan-2404"
    answer = plan(req)
    assert answer.solver.status == "OPTIMAL"
    assert all(runnable("torchtitan-2404", p.parallel, req.training.global_batch_size) for p in answer.plans)
    assert STACKS["torchtitan-2404"].accumulation is False
