"""The portfolio search for budgeted cut models of ``MAX_CHUNKS`` + 1 to ``WIDE_CHUNKS`` chunks (``planner.search.portfolio``,
issues 24 and 26): on random models of the cut model's shape with 9–12 chunks, whatever run proves the model (the
default search with presolve, the portfolio search, or the default search on the shared budget after them) gives the
optimum a brute force over every cut gives (or proves none fits); the runs that prove nothing are paid from the third
budget entry only (the small models' side budget untouched); with it spent the solve is the default search's."""

from __future__ import annotations

import random
import time

import pytest
from ortools.sat.python import cp_model

from planner.search import cutsolver, portfolio
from tests.cut_models import brute_force, build


def instance(seed: int) -> tuple[cp_model.CpModel, list[cp_model.IntVar], dict]:
    """A cut model of 9–12 chunks and few layers (every cut enumerable): makespan above affine chains, end of step above
    affine parts, a memory row per chunk pair, sometimes a cutoff (as ``solve_class`` adds)."""
    rng = random.Random(seed)
    C = rng.randint(portfolio.MAX_CHUNKS + 1, portfolio.WIDE_CHUNKS)
    L = C + rng.randint(0, 4)
    chains = [([rng.randint(0, 10**6) for _ in range(C)], rng.randint(0, 10**7)) for _ in range(rng.randint(2, 12))]
    ends = [([rng.randint(0, 10**5) for _ in range(C)], rng.randint(0, 10**6)) for _ in range(rng.randint(1, 4))]
    mems = [[rng.randint(0, 100) for _ in range(C)] for _ in range(rng.randint(1, 3))]
    usable = [sum(m) + rng.randint(0, 300) for m in mems]
    data = {"C": C, "L": L, "chains": chains, "ends": ends, "mems": mems, "usable": usable}
    if rng.random() < 0.3:
        data["cutoff"] = rng.randint(10**7, 10**7 * 4)
    return *build(data), data


def check(st: int, solver: cp_model.CpSolver, n: list[cp_model.IntVar], data: dict, want: int | None) -> None:
    if want is None:
        assert st == cp_model.INFEASIBLE
        return
    assert st == cp_model.OPTIMAL
    assert solver.best_objective_bound == want == solver.objective_value
    cut = [solver.value(x) for x in n]
    assert sum(cut) == data["L"] and min(cut) >= 1


#: Caps that make each run the one that proves: as set; the default search with presolve cut at once (the portfolio
#: search proves); both cut short (the default search with presolve on the shared budget proves, after them; a
#: portfolio run cut at 1e-4 finds cuts it does not prove on some of these models: accepting those fails here).
MODES = {"as set": {}, "portfolio": {"DEFAULT_DET": 1e-7}, "after them": {"DEFAULT_DET": 1e-7, "WIDE_DET": 1e-4}}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("seed", range(30))
def test_each_run_of_a_wide_model_agrees_with_brute_force(
    seed: int, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in MODES[mode].items():
        monkeypatch.setattr(portfolio, name, value)
    if MODES[mode]:
        monkeypatch.setattr(cutsolver, "PRESOLVE_AFTER_DET", 1e-7)  # every budgeted solve reaches ``try_portfolio``
    model, n, data = instance(seed)
    want = brute_force(data)
    deadline = time.perf_counter() + 60
    budget = [10.0, 10.0, 10.0]
    pf = portfolio.try_portfolio(model, deadline, budget, budget[0])
    if pf is not None:
        check(*pf, n, data, want)
    assert budget[1] == 10.0  # the small models' side budget untouched
    assert 0 <= 10.0 - budget[2] <= portfolio.DEFAULT_DET + portfolio.WIDE_DET + 1e-3  # failed runs only, capped
    alone = portfolio.cp_solver(deadline, 10.0, False, cp_model.PORTFOLIO_SEARCH)  # the portfolio search, unbudgeted
    check(alone.solve(model), alone, n, data, want)
    for budget in ([10.0, 10.0, 10.0], [10.0, 10.0, 0.0]):  # with and without the wide side budget
        check(*cutsolver.solve(model, 1, False, deadline, budget[0], budget), n, data, want)


def test_the_portfolio_run_is_exercised(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the first run cut at once, the portfolio search is the run that proves on many of these models (the
    brute-force test above checks its answers)."""
    monkeypatch.setattr(portfolio, "DEFAULT_DET", 1e-7)
    by_portfolio = 0
    for seed in range(30):
        model, _n, _data = instance(seed)
        out = portfolio.try_portfolio(model, time.perf_counter() + 60, [10.0, 10.0, 10.0], 10.0)
        by_portfolio += out is not None and out[1].parameters.search_branching == cp_model.PORTFOLIO_SEARCH
    assert by_portfolio >= 10


def test_no_wide_portfolio_without_its_budget() -> None:
    """With the third entry spent or absent a wide model runs the default search only, as before; the same request, the
    same solve; more than ``WIDE_CHUNKS`` chunks: the default search only."""
    model, _n, _data = instance(3)
    assert portfolio.try_portfolio(model, time.perf_counter() + 60, [0.1, 0.1, 0.0], 0.1) is None
    assert portfolio.try_portfolio(model, time.perf_counter() + 60, [0.1, 0.1], 0.1) is None
    runs = []
    for _ in range(2):  # the same model built twice (the same request): the same runs
        model, _n, _data = instance(3)
        budget = [0.1, 0.1, 0.1]
        out = portfolio.try_portfolio(model, time.perf_counter() + 60, budget, 0.1)
        runs.append(None if out is None else (out[0], out[1].best_objective_bound, tuple(budget)))
    assert runs[0] == runs[1] and runs[0] is not None
    big = cp_model.CpModel()
    n = [big.new_int_var(1, 20, f"n{c}") for c in range(portfolio.WIDE_CHUNKS + 1)]
    big.add(sum(n) == 20)
    big.minimize(n[0])
    assert portfolio.try_portfolio(big, time.perf_counter() + 60, [0.1, 0.1, 0.1], 0.1) is None


def test_a_class_the_default_search_proved_runs_no_portfolio_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """``portfolio.SETTLED``: once a run of the default search proves a wide model (its class's model, to which later
    rounds add chains), its later solves run no portfolio search and pay nothing from the side budget; a small model
    is not affected."""
    monkeypatch.setattr(portfolio, "DEFAULT_DET", 1e-7)  # else the default search's first run proves these
    monkeypatch.setattr(cutsolver, "PRESOLVE_AFTER_DET", 1e-7)
    seed = next(
        s for s in range(30) if portfolio.try_portfolio(instance(s)[0], time.perf_counter() + 60, [1.0] * 3, 1.0)
    )
    model, n, data = instance(seed)
    assert model not in portfolio.SETTLED
    portfolio.settled(model, cp_model.OPTIMAL, cp_model.CpSolver())  # as ``cutsolver.solve`` notes a model it proved
    budget = [1.0, 1.0, 1.0]
    assert portfolio.try_portfolio(model, time.perf_counter() + 60, budget, 1.0) is None and budget == [1.0] * 3
    check(*cutsolver.solve(model, 1, False, time.perf_counter() + 60, 1.0, budget), n, data, brute_force(data))
    assert budget[1:] == [1.0, 1.0]  # the default search with presolve proved it, on the shared budget
    small = cp_model.CpModel()
    x = [small.new_int_var(1, 20, f"n{c}") for c in range(portfolio.MAX_CHUNKS)]
    small.add(sum(x) == 20)
    small.minimize(x[0] - x[1])
    portfolio.settled(small, cp_model.OPTIMAL, cp_model.CpSolver())
    assert portfolio.try_portfolio(small, time.perf_counter() + 60, [1.0, 1.0, 1.0], 1.0) is not None
