"""A small budgeted cut model the default search does not prove quickly, tried with CP-SAT's portfolio search (issue 26).

The interleaved classes of a free schedule share a CP-SAT budget in deterministic time (``uneven.BUDGET``;
``cutsolver.solve_class``). A solve the default single-worker search does not prove within
``cutsolver.PRESOLVE_AFTER_DET`` (without presolve) used to run on with presolve on the budget left, and some such
models spend all of it unproven, a few at a high CPU cost per deterministic unit (nemo2407 Nemotron-8B, TP1 PP2 v4,
m 8, 8 chunks of 32 layers: det 0.094 FEASIBLE, ~0.95 s CPU). CP-SAT's ``search_branching = PORTFOLIO_SEARCH`` with
one worker cycles through its search heuristics at each restart (OR-Tools ``sat_parameters.proto``,
``SearchBranching``) and proves that model OPTIMAL in det 0.018 (0.05 s CPU). So for a model of at most
``MAX_CHUNKS`` chunks such a solve (``try_portfolio``) first runs the default search with presolve capped at
``DEFAULT_DET`` — the run it made before, cut short, so a model it proves is proven as before with the same solution
(deterministic, one worker) — then the portfolio search capped at ``PORTFOLIO_DET``. A run that proves the model is
charged to the shared budget as any solve; one that proves nothing is paid from a budget of its own (``SIDE`` per
request), and then the default search runs on with presolve on the shared budget left, as before. With the side
budget spent, every solve is as before. Every way the solve is exact; one worker and deterministic limits: the same
request runs the same solves.

A model of ``MAX_CHUNKS`` + 1 to ``WIDE_CHUNKS`` chunks (issues 24, 26) runs the same two runs with the portfolio
search capped at ``WIDE_DET``, from a side budget of its own (``WIDE_SIDE``, the budget list's third entry, so the
small models' runs are as before). Llama 3 70B FP8 on 64 H100 (torchtitan, cost model 66): its 12-chunk TP4 PP4 v3
class's first model is not proven by the default search with presolve within det 0.25 (0.9 s CPU), the portfolio
search proves it in det 0.0103 (0.02 s). The caps are low because the portfolio search is not the faster proof of
every model of that size: of the 9–12-chunk models of the wide benchmark that reach this point, the default search
with presolve proves NeMo 24.07 Llama 3 70B's in det 0.0121 and 0.0263, the portfolio search in 0.0573 and 0.0431; a
portfolio run of up to det 0.06 (``PORTFOLIO_DET``) charges the shared budget more and leaves a later round of that
class unproven (first plan 10.893 → 10.912 s). A portfolio run that fails costs up to det 0.015 (one failed attempt
of ``DEFAULT_DET`` + ``WIDE_DET`` per request), and only a class none of whose models the default search has proven
without the portfolio search (``settled``: without presolve within ``cutsolver.PRESOLVE_AFTER_DET``, or with it within
``DEFAULT_DET``) runs it: a class whose earlier, smaller models the default search proved runs as before (Llama 3 8B
on 8 H100: its v3 class's fifth model, which neither search proves within these caps, 0.036 s CPU less).
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from ortools.sat.python import cp_model

#: The portfolio search's deterministic time (CP-SAT work units) per solve, and in all per request (``SIDE``: the
#: second entry of the budget list ``uneven.budget`` hands out, apart from the classes' shared ``uneven.BUDGET``).
#: Measured on the 121 models of the wide benchmark that reach it (each solved alone, one worker): proven within
#: 0.03 / 0.06 / 0.1: 95 / 104 / 107 (92 / 88 / 92 within 0.03 with presolve, with FIXED_SEARCH, with
#: PORTFOLIO_WITH_QUICK_RESTART_SEARCH). SIDE 0.2 proves more classes but costs more CPU (Nemotron-8B 0.70 → 1.31 s,
#: load 3; the classes it proves run more rounds).
PORTFOLIO_DET = 0.06
#: The default search's run with presolve that comes first (as before, cut short).
DEFAULT_DET = 0.003
SIDE = 0.1
#: Models of at most this many chunks only.
MAX_CHUNKS = 8
#: Models of ``MAX_CHUNKS`` + 1 to ``WIDE_CHUNKS`` chunks: the portfolio search capped at ``WIDE_DET``, its failed runs
#: paid from ``WIDE_SIDE`` per request (the budget list's third entry).
WIDE_CHUNKS = 12
WIDE_DET = 0.012
WIDE_SIDE = DEFAULT_DET + WIDE_DET
#: The side budgets of a request (``uneven.budget``'s list after the shared ``uneven.BUDGET``).
SIDES = (SIDE, WIDE_SIDE)


#: Cut models of more than ``MAX_CHUNKS`` chunks that a run of the default search proved (one model per class:
#: ``cutsolver.solve_class`` adds each round's chains to it), held weakly: their later rounds run no portfolio search.
SETTLED: weakref.WeakSet = weakref.WeakSet()


def settled(model: cp_model.CpModel, st: Any, solver: cp_model.CpSolver) -> tuple:
    """``(st, solver)``: a solve's result without the portfolio search; a model it proves is noted in ``SETTLED``."""
    if st in (cp_model.OPTIMAL, cp_model.INFEASIBLE):
        SETTLED.add(model)
    return st, solver


def cp_solver(deadline: float, det: float, presolve: bool, branching: Any = None) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.cp_model_presolve = presolve
    if branching is not None:
        solver.parameters.search_branching = branching
    solver.parameters.max_time_in_seconds = max(deadline - time.perf_counter(), 1e-3)
    solver.parameters.max_deterministic_time = det
    return solver


def try_portfolio(model: cp_model.CpModel, deadline: float, budget: list[float] | None, det: float) -> tuple | None:
    """The budgeted single-worker solve of ``model`` after the default search without presolve did not prove it within
    ``cutsolver.PRESOLVE_AFTER_DET`` (``det``: the shared budget ``budget[0]`` left after that run): the default search
    with presolve capped at ``DEFAULT_DET`` (what the solve ran before, cut short: a model it proves is proven as
    before, charged as before), then CP-SAT's portfolio search capped at ``PORTFOLIO_DET``, both within the request's
    ``budget[1]`` left, which they spend (a model of more than ``MAX_CHUNKS`` chunks: ``WIDE_DET`` and ``budget[2]``).
    (status, solver) where either proves the model OPTIMAL or INFEASIBLE; else None, and the default search runs on
    with presolve on the shared budget, as before."""
    chunks = sum(v.name[:1] == "n" for v in model.proto.variables)  # ``cutsolver.cut_model``'s n0, n1, …
    if chunks > WIDE_CHUNKS or (chunks > MAX_CHUNKS and model in SETTLED):
        return None
    side, pf_det = (1, PORTFOLIO_DET) if chunks <= MAX_CHUNKS else (2, WIDE_DET)
    for cap, presolve, branching in ((DEFAULT_DET, True, None), (pf_det, False, cp_model.PORTFOLIO_SEARCH)):
        if budget is None or len(budget) <= side or budget[side] <= 0:
            return None
        solver = cp_solver(deadline, min(cap, budget[side], det), presolve, branching)
        st = solver.solve(model)
        if st in (cp_model.OPTIMAL, cp_model.INFEASIBLE):
            return settled(model, st, solver) if branching is None else (st, solver)  # charged as any solve
        budget[side] -= solver.deterministic_time  # a run that proves nothing: paid from its side budget
    return None
