"""Free interleaved classes within their CP-SAT budget (``planner.search.uneven``, issue 26): with the budget spent
before any solve, the search still ranks every interleaved class's even split (never worse than the best even split
of any interleaved class, simulated here one by one) and its ``scope:`` note names the classes left unproven and the
pin that searches them; ``uneven.note`` names only those whose bound could still rank. The answer is OPTIMAL only when
no class left unproven has a bound below it; else FEASIBLE, its bound the lowest such class's (issue 26: "OPTIMAL must
hold over the whole space")."""

from __future__ import annotations

import pytest
from test_planner_interleaved import interleaved_instance

import planner.search.driver as driver
from planner.compose.cost import class_costs, evaluate
from planner.search import search
from planner.search.cutsolver import ClassResult, Status
from planner.search.space import enumerate_candidates
from planner.search.uneven import note
from planner.specs import SearchOptions
from planner.specs.layout import even_stage_layers


@pytest.mark.parametrize("seed", [2, 11, 14])
def test_a_spent_budget_ranks_the_even_splits_and_names_the_rest(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx, pins = interleaved_instance(seed)
    opts = SearchOptions(num_workers=1)
    monkeypatch.setattr(driver, "BUDGET", 0.0)
    left: list[ClassResult] = []  # the classes the budget left unproven, as the driver hands them to ``note``
    monkeypatch.setattr(driver, "note", lambda unproven, found, k: (left.extend(unproven), note(unproven, found, k))[1])
    free = search(ctx, pins, opts, top_k=1)
    evens = []
    for c in enumerate_candidates(ctx, pins, opts):
        if c.virtual_stages > 1:
            cc = class_costs(ctx, c)
            ev = evaluate(cc, even_stage_layers(cc.num_layers, cc.chunks))
            evens += [ev.objective_ns] if ev.fits else []
    if evens:
        assert free.objective_ns is not None and free.objective_ns <= min(evens)
    pinned = search(ctx, pins.model_copy(update={"schedule": "interleaved-1f1b"}), opts, top_k=1)
    scope = [n for n in free.notes if n.startswith("scope:")]  # each of these seeds has classes left unproven
    assert scope and "interleaved class" in scope[0] and "parallel.schedule: interleaved-1f1b" in scope[0]
    low = min((r.bound for r in left), default=None)
    assert free.objective_ns is not None
    if low is not None and low < free.objective_ns:  # a class the budget left could hold a faster cut: not proven
        assert free.status == "FEASIBLE" and free.bound_ns == low
        assert any(n.startswith("NOT PROVEN OPTIMAL: the CP-SAT budget") for n in free.notes), free.notes
    else:  # every class left unproven is bounded at or above the answer: proven over the whole space
        assert free.status == "OPTIMAL" and free.bound_ns == free.objective_ns
    if pinned.objective_ns is not None:
        assert free.objective_ns is not None and pinned.objective_ns >= free.objective_ns or scope


def test_the_note_names_only_classes_that_could_rank() -> None:
    ctx, pins = interleaved_instance(11)
    c = next(c for c in enumerate_candidates(ctx, pins, SearchOptions()) if c.virtual_stages > 1)

    def res(step: int | None, bound: int) -> ClassResult:
        cc = class_costs(ctx, c)
        ev = evaluate(cc, even_stage_layers(cc.num_layers, cc.chunks))
        ev = ev if step is None else type(ev)(**{**ev.__dict__, "objective_ns": step})
        return ClassResult(c, None, ev, Status.FEASIBLE, bound, 0, 0.0)

    found = [res(100, 100), res(120, 120)]  # top 2: the k-th best at 120
    assert note([res(None, 130)], found, 2) is None  # its bound is above the k-th best: proven out
    text = note([res(None, 90), res(None, 110), res(None, 125)], found, 2)
    assert text is not None and "2 interleaved classes" in text and "10.0% faster" in text
