"""Whether any stage cut of a class beats a step time (``uneven.settle``): its CP-SAT model as a satisfaction problem.

``cutsolver.solve_class`` minimises: each lazy round's model is solved to optimality before its cut is simulated, and a
budgeted round that cannot prove its optimum in time ends the search. Settling a class against the answer asks less:
is there a cut faster than the answer? Here each round asks CP-SAT only for a cut whose chains, end of step and memory
put it under the target, without minimising. None (INFEASIBLE): no cut of the class is faster. One found is simulated:
faster, it becomes the class's best and the target; else its critical path and its one-layer neighbours' join the model
(``cutsolver.neighbours``; valid chains, shared with the classes of its graph through ``learned``) and the next round
looks again. Each round is a feasibility search, so many more rounds fit a budget: torchtitan Llama 3 70B on 64 A100,
TP8 PP8 v2 against the answer's 23.148 s, is ruled out in 3 rounds and det 0.009, where minimising rounds need det
0.058; NeMo Llama 3 8B on 8 H100, PP2 v7 and v8: det 0.13 and 0.16 against 0.22 and 0.28.
"""

from __future__ import annotations

import time
from typing import Any

from ortools.sat.python import cp_model

from planner.compose.cost import ClassCosts, evaluate
from planner.search.chains import Counts, dag_key
from planner.search.cutsolver import PRESOLVE_AFTER_DET, ClassResult, Status, cut_model, neighbours, priced
from planner.search.hints import best_of, critical_counts, greedy_cut
from planner.specs.layout import even_stage_layers


def decide(
    cc: ClassCosts,
    target: int,
    det: float,
    deadline: float,
    learned: dict | None = None,
    starts: tuple[list[int], ...] = (),
) -> ClassResult:
    """Is a cut of the class faster than ``target`` (ns)? Within ``det`` of CP-SAT deterministic time (one worker: the
    same answer on every machine) and ``deadline``. PRUNED (bound ``target``): none is. OPTIMAL: the class's best cut
    is faster, at its step (each cut found lowers the target, until none beats the last). FEASIBLE: the budget ended
    with a faster cut found (bound 0: none proven); UNKNOWN: ended with none. ``starts``: cuts to start from (the
    even split and the greedy cut too); ``learned``: the critical paths of its graph (``cutsolver.solve_class``)."""
    t0 = time.perf_counter()
    c, C, L = cc.cand, cc.chunks, cc.num_layers
    cm = cut_model(cc)
    model, n = cm.model, cm.n
    model.clear_objective()
    hint, hint_ev = best_of(cc, (even_stage_layers(L, C), greedy_cut(cc), *starts))
    best = (hint, hint_ev) if hint_ev.fits and hint_ev.objective_ns < target else None
    target = best[1].objective_ns if best else target
    model.add(cm.makespan + cm.end <= target - 1)
    pool: dict[Counts, None] = learned.setdefault(dag_key(cc), {}) if learned is not None else {}
    in_model: set = set()

    def learn(counts: list[Counts]) -> None:
        pool.update(dict.fromkeys(counts))
        for ch in priced(cc, counts):
            if ch not in in_model:
                in_model.add(ch)
                cm.add_chain(ch)

    learn([*pool, critical_counts(cc, hint_ev)])
    rounds = 0

    def result(status: Status, bound: int) -> ClassResult:
        cut, ev = best if best else (None, None)
        return ClassResult(c, cut, ev, status, bound, rounds, time.perf_counter() - t0)

    while det > 0 and time.perf_counter() < deadline:
        rounds += 1
        model.clear_hints()
        for x, h in zip(n, hint):
            model.add_hint(x, h)
        st, solver, det = _solve(model, det, deadline)
        if st == cp_model.INFEASIBLE:  # no cut under the target: the class's best is the last found, or none beats it
            return result(Status.OPTIMAL, best[1].objective_ns) if best else result(Status.PRUNED, target)
        if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            break
        hint = [solver.value(x) for x in n]
        ev = evaluate(cc, hint)
        if ev.fits and ev.objective_ns < target:
            best, target = (hint, ev), ev.objective_ns
            model.add(cm.makespan + cm.end <= target - 1)
        near = neighbours(cc, hint, ev, deadline)
        learn(list(dict.fromkeys([critical_counts(cc, ev), *(critical_counts(cc, e) for _, e in near)])))
    return result(Status.FEASIBLE if best else Status.UNKNOWN, 0)


def _solve(model: cp_model.CpModel, det: float, deadline: float) -> tuple[Any, cp_model.CpSolver, float]:
    """CP-SAT's status on a round's model, the solver holding its solution and the deterministic time left: one worker,
    without presolve for up to ``cutsolver.PRESOLVE_AFTER_DET``, then, undecided, with it for the rest (as
    ``cutsolver.solve``: presolve costs tens of ms a solve and buys nothing on most small models, but decides the deep
    ones: torchtitan Llama 3.1 405B on 128 H100 stays unproven without it)."""
    st = cp_model.UNKNOWN
    for presolve in (False, True):
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.cp_model_presolve = presolve
        solver.parameters.max_deterministic_time = det if presolve else min(det, PRESOLVE_AFTER_DET)
        solver.parameters.max_time_in_seconds = max(deadline - time.perf_counter(), 1e-3)
        st = solver.solve(model)
        det -= solver.deterministic_time
        if st != cp_model.UNKNOWN or det <= 0:
            break
    return st, solver, det
