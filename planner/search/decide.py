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
from dataclasses import replace
from typing import Any

from ortools.sat.python import cp_model

from planner.compose.cost import ClassCosts, evaluate
from planner.search.bounds import may_fit
from planner.search.chains import Counts, dag_key
from planner.search.cutsolver import PRESOLVE_AFTER_DET, ClassResult, Status, cut_model, neighbours, priced
from planner.search.hints import best_of, climbs, critical_counts, greedy_cut, shaped_cuts
from planner.specs.layout import even_stage_layers


def decide(
    cc: ClassCosts,
    target: int,
    det: float,
    deadline: float,
    learned: dict | None = None,
    starts: tuple[list[int], ...] = (),
    alone: bool = False,
) -> ClassResult:
    """Is a cut of the class faster than ``target`` (ns)? Within ``det`` of CP-SAT deterministic time (one worker: the
    same answer on every machine) and ``deadline``. PRUNED (bound ``target``): none is. OPTIMAL: the class's best cut
    is faster, at its step (each cut found lowers the target, until none beats the last). FEASIBLE: the budget ended
    with a faster cut found (bound 0: none proven); UNKNOWN: ended with none. ``starts``: cuts to start from (the
    even split and the greedy cut too); ``learned``: the critical paths of its graph (``cutsolver.solve_class``).
    ``alone``: a class searched without a budget (``descend``): its rounds keep the model's objective and stop at their
    first solution, and one that the first round leaves undecided climbs as ``cutsolver.solve_class`` does before its
    second, from the best of its cuts so far and ``uneven.polish``'s starts (first-round and ramp cuts). The objective's
    LP bound prunes: Llama 3 405B on 16,384 H100 pinned to TP8 PP8 v7, proven from its climbed cut in 0.7 s CPU with it,
    3.5 s without; in ``uneven.settle``'s det 0.01 it costs proofs (3 lost on the wide benchmark) and ~15 % CPU."""
    t0 = time.perf_counter()
    c, C, L = cc.cand, cc.chunks, cc.num_layers
    cm = cut_model(cc)
    model, n = cm.model, cm.n
    if not alone:
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
        st, solver, det = _solve(model, det, deadline, alone)
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
        if alone and rounds == 1:  # undecided by its first round: climb from the best cut so far or polish's starts
            here = (even_stage_layers(L, C), greedy_cut(cc), (best or (hint, ev))[0])
            for cut, cev, paths in [
                climbs(cc, cuts, deadline=deadline) for cuts in (here, tuple(shaped_cuts(cc))) if cuts
            ]:
                if cev.fits and cev.objective_ns < target:
                    best, target = (cut, cev), cev.objective_ns
                    model.add(cm.makespan + cm.end <= target - 1)
                learn(paths)
    return result(Status.FEASIBLE if best else Status.UNKNOWN, 0)


#: ``descend``'s target when it has no incumbent: above any step (ns), so its first start is the first best.
NO_TARGET = 1 << 62

#: ``descend``'s CP-SAT budget: none but the deadline (deterministic seconds).
NO_BUDGET = 1e9


def descend(
    cc: ClassCosts,
    incumbent: int | None,
    deadline: float,
    learned: dict | None = None,
    starts: tuple[list[int], ...] = (),
) -> ClassResult:
    """The best cut of an interleaved class against ``incumbent``, without a CP-SAT budget (``uneven.prove``: the exact
    pass of ``options.prove`` and of a pinned schedule's search), answered as ``cutsolver.solve_class`` answers it:
    satisfaction rounds (``decide``, ``alone``) from the ``incumbent`` (the k-th best step so far; ties are solved, they
    may rank first on memory) or from no target, until the deadline. Each cut found lowers the target, so the last
    INFEASIBLE round proves the class's optimum; with no incumbent and no fitting cut, INFEASIBLE. Pinned alone (CPU):
    NeMo Llama 2 7B on 8 H100, PP2 v6, 4 rounds and 1.1 s, where ``solve_class``'s minimising rounds take 361 s (its
    second CP-SAT solve; ``tests/test_schedule_mip.py``); v5 0.9 s against 2.2 s; Llama 3 405B on 16,384 H100, TP8 PP8
    v7, 0.44 s against 0.5 s."""
    if cc.chunks > cc.num_layers or not may_fit(cc):
        return ClassResult(cc.cand, None, None, Status.INFEASIBLE, 0, 0, 0.0)
    target = incumbent + 1 if incumbent is not None else NO_TARGET
    res = decide(cc, target, NO_BUDGET, deadline, learned, starts, alone=True)
    if res.status == Status.PRUNED and incumbent is None:  # no cut under no target: none fits
        return replace(res, status=Status.INFEASIBLE, bound=0)
    return res


def _solve(
    model: cp_model.CpModel, det: float, deadline: float, first: bool = False
) -> tuple[Any, cp_model.CpSolver, float]:
    """CP-SAT's status on a round's model, the solver holding its solution and the deterministic time left: one worker,
    without presolve for up to ``cutsolver.PRESOLVE_AFTER_DET``, then, undecided, with it for the rest (as
    ``cutsolver.solve``: presolve costs tens of ms a solve and buys nothing on most small models, but decides the deep
    ones: torchtitan Llama 3.1 405B on 128 H100 stays unproven without it). ``first``: stop at the first solution."""
    st = cp_model.UNKNOWN
    for presolve in (False, True):
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.cp_model_presolve = presolve
        solver.parameters.stop_after_first_solution = first
        solver.parameters.max_deterministic_time = det if presolve else min(det, PRESOLVE_AFTER_DET)
        solver.parameters.max_time_in_seconds = max(deadline - time.perf_counter(), 1e-3)
        st = solver.solve(model)
        det -= solver.deterministic_time
        if st != cp_model.UNKNOWN or det <= 0:
            break
    return st, solver, det
