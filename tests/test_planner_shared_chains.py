"""Exact shortcuts of the cut solver (issue 12), checked against the brute force per class on seeded
random instances (those of ``test_planner_exact``):

* critical paths learned by one class's solve (as operation counts) are reused by every later class with
  the same dependency graph (``chains.dag_key``: schedule, pp, v, m), priced with its own costs, and the
  window chains (``chains.window_counts``) are added by separation;
* CP-SAT presolve (on from ``PRESOLVE_CHUNKS`` chunks) — forced on here for the small instances;
* on classes too large to simulate every one-layer neighbour, only those off the chunks the critical
  path dwells on (``NEIGHBOUR_BUDGET`` forced to 0 here).

Every class solved in one shared ``learned`` pool, in enumeration order, must return the brute-force
optimum of its own cuts (or INFEASIBLE exactly when no cut fits)."""

from __future__ import annotations

import pytest
from test_planner_exact import random_instance

import planner.search.cutsolver as cutsolver
from planner.compose.cost import class_costs, evaluate
from planner.search.bruteforce import compositions
from planner.search.chains import dag_key
from planner.search.cutsolver import Status, solve_class
from planner.search.space import enumerate_candidates, forced_cut
from planner.specs import SearchOptions


@pytest.mark.parametrize("seed,presolve,few_neighbours", [(s, s % 2 == 0, s % 3 == 0) for s in range(12)])
def test_shared_chains_and_presolve_keep_every_class_exact(
    seed: int, presolve: bool, few_neighbours: bool, monkeypatch
) -> None:
    if presolve:
        monkeypatch.setattr(cutsolver, "PRESOLVE_CHUNKS", 1)
    if few_neighbours:  # the large-class path: only the moves off the chunks the critical path dwells on
        monkeypatch.setattr(cutsolver, "NEIGHBOUR_BUDGET", 0)
    ctx, pins = random_instance(seed)
    options = SearchOptions(time_limit_s=20, num_workers=1)
    learned: dict = {}
    checked = 0
    for cand in enumerate_candidates(ctx, pins, options):
        if forced_cut(ctx, pins, cand) is not None or cand.chunks == 1:
            continue
        cc = class_costs(ctx, cand)
        res = solve_class(cc, options, learned=learned)
        evs = [evaluate(cc, list(n)) for n in compositions(cc.num_layers, cc.chunks)]
        fitting = [e.objective_ns for e in evs if e.fits]
        if not fitting:
            assert res.status == Status.INFEASIBLE
            continue
        assert res.status == Status.OPTIMAL
        assert res.evaluation is not None and res.evaluation.objective_ns == min(fitting)
        checked += 1


def test_the_instances_have_classes_that_share_chains() -> None:
    shared = 0
    for seed in range(12):
        ctx, pins = random_instance(seed)
        keys: dict[tuple, int] = {}
        for cand in enumerate_candidates(ctx, pins, SearchOptions()):
            if forced_cut(ctx, pins, cand) is None and cand.chunks > 1 and cand.schedule != "gpipe":
                k = dag_key(class_costs(ctx, cand))
                keys[k] = keys.get(k, 0) + 1
        shared += sum(n - 1 for n in keys.values())
    assert shared >= 10
