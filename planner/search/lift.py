"""The gradient sync's least exposed part (``step_end.sync_lift``) on top of the search's bounds, used to rule classes
out without changing the order the search visits them in (issue 26).

Every bound of the search (``bounds.quick_bound``, ``bounds.fitting_bound``: the pipeline's makespan bound +
``step_end.end_floor``) takes the gradient sync's exposed part as 0; ``sync_lift`` is a valid least of it, so bound +
lift is a bound too. The queue keeps the bounds without it: the interleaved classes of a free schedule share one CP-SAT
budget, spent in the order they are visited (``uneven``), so a tighter key would hand the budget to other classes and
move the answer. A class is ruled out by bound + lift only where that cannot change the answer (``may_skip``): one
whose solve spends no budget (not an interleaved class of a free schedule, or one cut), or after the budget is spent
(a budgeted class is then evaluated at its even split alone, slower than its bound). Either way its plan would be
slower than the k-th best (bound + lift > its step time), so it would not rank, and its solve feeds nothing a later
budgeted solve reads (the critical paths it learns are of its own dependency graph: 1F1B's or GPipe's, or none).
MLPerf v3.1 GPT-3 175B on 10,752 H100: 188 → 98 interleaved classes left unproven by the budget.
"""

from __future__ import annotations

from planner.compose.context import Context
from planner.compose.context_parallel import class_terms
from planner.compose.cost import Candidate
from planner.compose.step_end import sync_lift
from planner.search.uneven import budget
from planner.specs import ParallelPins


def lift(ctx: Context, c: Candidate) -> int:
    """``step_end.sync_lift`` of a class (ns): what its bounds may add."""
    s = class_terms(ctx, c)
    return sync_lift(s, c, ctx.model.num_layers, s.moe_prefix[-1] if s.moe_prefix is not None else 0)


def may_skip(pins: ParallelPins, fixed: list[int] | None, c: Candidate, left: list[float]) -> bool:
    """Whether ruling the class out by bound + lift leaves the search's later steps as they were: its solve spends no
    CP-SAT budget (``uneven.budget`` None), or the budget is spent."""
    return budget(pins, fixed, c, left) is None or left[0] <= 0


def lifted(ctx: Context, pins: ParallelPins, fixed: list[int] | None, c: Candidate, left: list[float]) -> int:
    """``lift`` where the class may be ruled out with it (``may_skip``), else 0."""
    return lift(ctx, c) if may_skip(pins, fixed, c, left) else 0
