"""A budgeted cut model's solve (``planner.search.portfolio``, issue 26): on random small models of the cut model's
shape (layer counts summing to L, a makespan above affine chains, an end of step above affine parts, a memory row,
a cutoff), ``portfolio.try_portfolio`` and ``cutsolver.solve`` with a budget give the optimum a brute force over every cut
gives (or prove none fits), and the same request runs the same solves."""

from __future__ import annotations

import random
import time

import pytest
from ortools.sat.python import cp_model

from planner.search import cutsolver, portfolio
from tests.cut_models import brute_force, build


def instance(seed: int) -> tuple[cp_model.CpModel, list[cp_model.IntVar], dict]:
    rng = random.Random(seed)
    C = rng.randint(2, 5)
    L = rng.randint(C, 14)
    chains = [([rng.randint(0, 10**6) for _ in range(C)], rng.randint(0, 10**7)) for _ in range(rng.randint(1, 6))]
    ends = [([rng.randint(0, 10**5) for _ in range(C)], rng.randint(0, 10**6)) for _ in range(rng.randint(1, 3))]
    mem = [rng.randint(1, 100) for _ in range(C)]
    data = {"C": C, "L": L, "chains": chains, "ends": ends, "mems": [mem], "usable": [rng.randint(L, 100 * L)]}
    if rng.random() < 0.3:  # a cutoff, as ``solve_class`` adds
        data["cutoff"] = rng.randint(0, 10**7 * 3)
    return *build(data), data


@pytest.mark.parametrize("seed", range(40))
def test_the_portfolio_search_and_a_budgeted_solve_agree_with_brute_force(seed: int) -> None:
    model, n, data = instance(seed)
    want = brute_force(data)
    deadline = time.perf_counter() + 60
    side = [10.0, 10.0]  # the shared budget and the portfolio search's own, ample
    pf = portfolio.try_portfolio(model, deadline, side, side[0])
    assert pf is not None  # proven, OPTIMAL or INFEASIBLE, on models this small
    assert 0 <= 10.0 - side[1] <= portfolio.DEFAULT_DET + 1e-3  # only a run that proves nothing is paid from its own
    alone = portfolio.cp_solver(deadline, 10.0, False, cp_model.PORTFOLIO_SEARCH)  # its second run, on its own
    budget = [10.0, 10.0]
    runs = [pf, (alone.solve(model), alone), cutsolver.solve(model, 1, False, deadline, budget[0], budget)]
    for st, solver in runs:
        if want is None:
            assert st == cp_model.INFEASIBLE
            continue
        assert st == cp_model.OPTIMAL
        assert solver.best_objective_bound == want
        cut = [solver.value(x) for x in n]
        assert sum(cut) == data["L"] and min(cut) >= 1


def test_no_portfolio_search_without_its_budget() -> None:
    """With its budget spent (or a budget list of the shared entry only) the solve is the default search's, as before;
    the same request, the same solve."""
    model, _n, _data = instance(5)
    assert portfolio.try_portfolio(model, time.perf_counter() + 60, [0.1, 0.0], 0.1) is None
    assert portfolio.try_portfolio(model, time.perf_counter() + 60, [0.1], 0.1) is None
    runs = []
    for _ in range(2):
        side = [0.1, 10.0]
        out = portfolio.try_portfolio(model, time.perf_counter() + 60, side, 0.1)
        assert out is not None
        runs.append((out[0], out[1].best_objective_bound, side[1]))
    assert runs[0] == runs[1]


def test_only_small_models() -> None:
    """A model of more than ``MAX_CHUNKS`` chunks (``cutsolver.cut_model``'s n0, n1, …) runs the default search only
    on a budget list without the third entry (``WIDE_SIDE``: ``tests/test_portfolio_wide.py``)."""
    model = cp_model.CpModel()
    n = [model.new_int_var(1, 20, f"n{c}") for c in range(portfolio.MAX_CHUNKS + 1)]
    model.add(sum(n) == 20)
    model.minimize(n[0])
    assert portfolio.try_portfolio(model, time.perf_counter() + 60, [0.1, 0.1], 0.1) is None
