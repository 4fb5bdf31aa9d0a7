"""A slow, exact reference for one class's stage cut: the schedule's whole dependency graph as a mixed-integer program
(OR-Tools' SCIP), for classes beyond ``bruteforce``'s reach (issue 26).

The cut solver (``cutsolver``) bounds the makespan by chains of the graph it learns lazily; here every operation of
the simulation (``simulate.rank_orders``: F/B of each micro-batch on each chunk) gets a start time, with the very edges
``simulate`` waits on — the rank's previous operation, and the data dependency plus the boundary's p2p lag — so the
makespan of an integer cut is exactly the simulated one (``tests/test_schedule_mip.py`` checks it at seeded cuts), and
the end of step and memory are the cut solver's own rows (``step_end.end_parts``, ``memory.peaks``: the functions
``cost.evaluate`` uses, given linear expressions). Its optimum is the class's optimum; its dual bound is a valid lower
bound. One variable per operation (2·m·chunks) makes it slow: a reference for tests and offline checks
(``bench/verify_unproven.py``) and ``options.prove``'s last step (``uneven.prove``); on small graphs its LP relaxation,
branched on (``graph_bb``), settles classes in the search. Models of one block kind (a mixture with dense layers places
its MoE layers by element constraints, which this model does not write).

Units: milliseconds and GiB, so that SCIP's tolerances (1e-6) are a nanosecond and a KiB.
"""

from __future__ import annotations

from dataclasses import dataclass

from ortools.linear_solver import pywraplp

from planner.compose.cost import ClassCosts
from planner.compose.memory import kept_bytes, memory_terms, peaks
from planner.compose.simulate import rank_orders
from planner.compose.step_end import end_parts, end_terms

MS = 1e-6  # ns → ms
GIB = 1 / 2**30


@dataclass(frozen=True)
class ScheduleOptimum:
    #: "OPTIMAL", "FEASIBLE" (the time limit), "INFEASIBLE" (no cut fits, or none under the cutoff), "UNKNOWN"
    status: str
    stage_layers: list[int] | None
    objective_ns: float | None  # the model's value at ``stage_layers`` (ns, within SCIP's tolerance)
    bound_ns: float | None  # a valid lower bound of every fitting cut's step time (ns)


def schedule_model(
    cc: ClassCosts, integer: bool = True, fixed: list[int] | None = None, cutoff_ns: float | None = None
) -> tuple[pywraplp.Solver, list[pywraplp.Variable]]:
    """The class's model (SCIP when ``integer``, else its LP relaxation in GLOP): layer counts ``n``, one start time per
    operation, makespan ``M`` and end of step ``D``, minimising ``M + D``; ``fixed``: that cut only; ``cutoff_ns``:
    only cuts no slower than it."""
    if cc.moe_prefix is not None:
        raise ValueError("schedule_model: models of dense and MoE blocks are not written here (element constraints)")
    c, C, L, s = cc.cand, cc.chunks, cc.num_layers, cc.shared
    solver = pywraplp.Solver.CreateSolver("SCIP" if integer else "GLOP")
    var = solver.IntVar if integer else solver.NumVar
    n = [var(1, L - C + 1, f"n{ch}") for ch in range(C)]
    solver.Add(sum(n) == L)
    for ch, v in enumerate(fixed or ()):
        solver.Add(n[ch] == v)
    inf = solver.infinity()
    makespan, end = solver.NumVar(0, inf, "M"), solver.NumVar(0, inf, "D")
    for r in range(c.pp):
        for part in end_parts(end_terms(s, c, n, r)):
            solver.Add(end >= MS * part)
        done = None if cc.done is None else cc.done[r]
        for peak in peaks(memory_terms(s, c, n, r, cc.live[r], None, done, kept_bytes(cc, r))):
            solver.Add(GIB * peak <= GIB * cc.usable_bytes)

    def after(later: pywraplp.Variable, earlier: pywraplp.Variable, kind: str, ch: int, lag: int | None = None) -> None:
        """later ≥ earlier + the operation's duration (+ the boundary's lag), written as its row directly: the very
        coefficients ``solver.Add`` would extract, built faster (most ``graph_bb`` classes need one LP: the wide
        benchmark's calls 1.83 → 1.49 s CPU, results identical)."""
        per, extra = (cc.f_layer, cc.f_extra[ch]) if kind == "F" else (cc.b_layer, cc.b_extra[ch])
        row = solver.Constraint(MS * extra if lag is None else MS * extra + MS * lag, inf)
        row.SetCoefficient(later, 1.0)
        row.SetCoefficient(earlier, -1.0)
        row.SetCoefficient(n[ch], -(MS * per))

    orders = rank_orders(c.schedule, c.pp, c.virtual_stages, cc.m)
    start = {op: solver.NumVar(0, inf, "") for ops in orders for op in ops}
    for ops in orders:  # each rank runs its operations in its order
        for a, b in zip(ops, ops[1:]):
            after(start[b], start[a], a[0], a[2])
        after(makespan, start[ops[-1]], ops[-1][0], ops[-1][2])
    for j in range(cc.m):  # the data: forward up the chunks, backward down, each boundary's lag
        for ch in range(1, C):
            after(start[("F", j, ch)], start[("F", j, ch - 1)], "F", ch - 1, cc.lag[ch - 1])
        for ch in range(C - 1):
            after(start[("B", j, ch)], start[("B", j, ch + 1)], "B", ch + 1, cc.lag[ch])
        after(start[("B", j, C - 1)], start[("F", j, C - 1)], "F", C - 1)
    solver.Minimize(makespan + end)
    if cutoff_ns is not None:
        solver.Add(makespan + end <= MS * cutoff_ns)
    return solver, n


def class_optimum(cc: ClassCosts, time_limit_s: float = 60.0, cutoff_ns: float | None = None) -> ScheduleOptimum:
    """The class's best cut by SCIP on ``schedule_model`` (no relative gap: proven to SCIP's tolerance)."""
    solver, n = schedule_model(cc, cutoff_ns=cutoff_ns)
    solver.SetTimeLimit(int(time_limit_s * 1000))
    params = pywraplp.MPSolverParameters()
    params.SetDoubleParam(params.RELATIVE_MIP_GAP, 0.0)
    st = solver.Solve(params)
    if st == pywraplp.Solver.INFEASIBLE:
        return ScheduleOptimum("INFEASIBLE", None, None, cutoff_ns)
    if st not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        return ScheduleOptimum("UNKNOWN", None, None, None)
    cut = [round(x.solution_value()) for x in n]
    bound = solver.Objective().BestBound() / MS
    status = "OPTIMAL" if st == pywraplp.Solver.OPTIMAL else "FEASIBLE"
    return ScheduleOptimum(status, cut, solver.Objective().Value() / MS, bound)
