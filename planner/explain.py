"""Why a plan won: its binding constraint and what the runner-up lost on."""

from __future__ import annotations

from typing import Literal

from planner.config import describe
from planner.specs import Explanation, Plan

_PARTS = {
    "compute_s": "compute",
    "tp_comm_s": "tensor-parallel communication",
    "pp_bubble_s": "pipeline bubble",
    "pp_p2p_s": "pipeline send/recv",
    "dp_sync_s": "data-parallel gradient sync",
    "optimizer_s": "optimizer step",
}

#: Short readable names of the breakdown parts, for the explanation's details.
_SHORT = {
    "compute_s": "compute",
    "tp_comm_s": "TP comm",
    "pp_bubble_s": "pipeline bubble",
    "pp_p2p_s": "pipeline p2p",
    "dp_sync_s": "DP sync",
    "optimizer_s": "optimizer",
}


def _describe(plan: Plan) -> str:
    return describe(plan.parallel, plan.estimate.num_microbatches)


def binding_constraint(
    plan: Plan, memory_blocked: bool
) -> tuple[Literal["memory", "bubble", "communication", "compute"], str]:
    e = plan.estimate
    b = e.breakdown
    step = e.step_time_s or 1.0
    comm = b.tp_comm_s + b.pp_p2p_s + b.dp_sync_s
    if memory_blocked:
        return "memory", (
            f"a configuration that could be faster does not fit in {e.gpu_memory_gib:g} GiB per GPU; "
            f"this plan peaks at {e.peak_memory_gib:.1f} GiB"
        )
    if b.pp_bubble_s / step >= 0.15:
        return (
            "bubble",
            f"the pipeline bubble is {b.pp_bubble_s / step:.0%} of the step ({e.num_microbatches} micro-batches over {plan.parallel.pp} stages)",
        )
    if comm / step >= 0.25:
        return (
            "communication",
            f"communication on the critical path is {comm / step:.0%} of the step (TP {b.tp_comm_s:.3g} s, p2p {b.pp_p2p_s:.3g} s, DP {b.dp_sync_s:.3g} s)",
        )
    return "compute", f"compute is {b.compute_s / step:.0%} of the step at {e.mfu:.0%} MFU"


def runner_up_reason(best: Plan, other: Plan) -> str:
    a, b = best.estimate, other.estimate
    diffs = {k: getattr(b.breakdown, k) - getattr(a.breakdown, k) for k in _PARTS}
    worst = max(diffs, key=lambda k: diffs[k])
    slower = b.step_time_s / a.step_time_s - 1 if a.step_time_s else 0.0
    return (
        f"{_describe(other)} is {slower:.1%} slower ({b.step_time_s:.4g} s vs {a.step_time_s:.4g} s), "
        f"mostly {_PARTS[worst]} (+{diffs[worst]:.3g} s)"
    )


def explain(ctx, plans: list[Plan], result) -> list[Plan]:
    blocked = result.memory_blocked
    best_obj = result.objective_ns
    memory_blocked = blocked is not None and best_obj is not None and blocked[1] < best_obj
    out = []
    for i, plan in enumerate(plans):
        kind, why = binding_constraint(plan, memory_blocked and i == 0)
        details = [f"{_SHORT[k]}: {getattr(plan.estimate.breakdown, k):.4g} s" for k in _PARTS]
        if memory_blocked and i == 0:
            details.append(f"memory ruled out {describe(blocked[0])} (lower bound {blocked[1] / 1e9:.4g} s)")
        runner = None
        if i == 0 and len(plans) > 1:
            runner = runner_up_reason(plan, plans[1])
        elif i > 0:
            runner = f"loses to plan 1: {runner_up_reason(plans[0], plan)}"
        out.append(
            plan.model_copy(
                update={
                    "explanation": Explanation(
                        binding_constraint=kind, summary=f"{_describe(plan)}: {why}", runner_up=runner, details=details
                    )
                }
            )
        )
    return out
