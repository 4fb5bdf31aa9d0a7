"""The simulated schedule as a Chrome/Perfetto trace (format in docs/architecture.md)."""

from __future__ import annotations

from planner.answer.request import complete_pins, context, replay_request
from planner.compose.cost import class_costs, evaluate, rank_end_terms
from planner.compose.step_end import exposed_sync
from planner.specs import Plan, version


def chrome_trace(plan: Plan) -> dict:
    """One track per pipeline rank: F/B blocks per micro-batch and chunk, then DP sync and optimizer.
    The schedule is re-simulated with the cost inputs that priced the plan (``plan.inputs``), so its
    span is the plan's step time (when the plan's cost-model version is the current one)."""
    req = replay_request(plan)
    ctx = context(req)
    cand, n = complete_pins(ctx, req)
    cc = class_costs(ctx, cand)
    ev = evaluate(cc, n, record=True)
    events: list[dict] = []
    for r in range(cand.pp):
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": r, "args": {"name": f"stage {r}"}})
    for r, kind, mb, chunk, start, end in ev.sim.ops:
        events.append(
            {
                "name": f"{kind}{mb}",
                "cat": "forward" if kind == "F" else "backward",
                "ph": "X",
                "ts": start / 1e3,
                "dur": (end - start) / 1e3,
                "pid": 0,
                "tid": r,
                "args": {"microbatch": mb, "chunk": chunk},
            }
        )
    for r in range(cand.pp):
        rank_terms = rank_end_terms(cc, n, r)
        t, opt = ev.makespan_ns, rank_terms.optimizer
        exposed = exposed_sync(rank_terms)
        if exposed:
            events.append(
                {
                    "name": "dp sync",
                    "cat": "dp_sync",
                    "ph": "X",
                    "ts": t / 1e3,
                    "dur": exposed / 1e3,
                    "pid": 0,
                    "tid": r,
                    "args": {},
                }
            )
        if opt:
            events.append(
                {
                    "name": "optimizer",
                    "cat": "optimizer",
                    "ph": "X",
                    "ts": (t + exposed) / 1e3,
                    "dur": opt / 1e3,
                    "pid": 0,
                    "tid": r,
                    "args": {},
                }
            )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "metadata": {
            "model": plan.model.name,
            "parallel": plan.parallel.model_dump(),
            "step_time_s": ev.objective_ns / 1e9,
            "cost_model_version": version.COST_MODEL_VERSION,
            "plan_cost_model_version": plan.inputs.cost_model_version,
            "source": "meshplan simulated schedule",
        },
    }
