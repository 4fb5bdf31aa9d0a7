"""``planner.search.decide``: whether a cut of a class beats a step time, against the brute force over every cut of
every interleaved class of small seeded spaces (``bruteforce.compositions``, each cut simulated)."""

from __future__ import annotations

import time

import pytest
from test_planner_interleaved import interleaved_instance

from planner.compose.cost import class_costs, evaluate
from planner.search.bruteforce import compositions
from planner.search.cutsolver import Status
from planner.search.decide import decide, descend
from planner.search.space import enumerate_candidates
from planner.specs import SearchOptions


def _classes(seed: int):  # type: ignore[no-untyped-def]
    """Each interleaved class of a seed's space with a fitting cut, its costs and its brute-force optimum (ns)."""
    ctx, pins = interleaved_instance(seed)
    for c in enumerate_candidates(ctx, pins, SearchOptions()):
        if c.virtual_stages == 1:
            continue
        cc = class_costs(ctx, c)
        fitting = [ev.objective_ns for n in compositions(cc.num_layers, cc.chunks) if (ev := evaluate(cc, n)).fits]
        if fitting:
            yield c, cc, min(fitting)


#: (target as the optimum's multiple and offset in ns, the status decide answers): just above the optimum, it finds
#: the optimum and proves it; at it, no cut is faster; far above, it descends to the optimum; below, none is faster.
CASES = [((1.0, 1), Status.OPTIMAL), ((1.0, 0), Status.PRUNED), ((1.2, 0), Status.OPTIMAL), ((0.9, 0), Status.PRUNED)]


@pytest.mark.parametrize("seed", [2, 4, 11, 19])
@pytest.mark.parametrize(("target", "status"), CASES)
def test_decide_answers_as_the_brute_force(seed: int, target: tuple[float, int], status: Status) -> None:
    seen = 0
    for c, cc, opt in _classes(seed):
        seen += 1
        res = decide(cc, int(opt * target[0]) + target[1], det=100.0, deadline=time.perf_counter() + 60, learned={})
        assert res.status == status, (c.describe(), opt, res)
        if status == Status.OPTIMAL:  # the class's optimum, at a cut that simulates to it
            assert res.bound == opt == res.evaluation.objective_ns == evaluate(cc, res.stage_layers).objective_ns
        else:
            assert res.stage_layers is None and res.bound == int(opt * target[0]) + target[1]
    assert seen, "no interleaved class with a fitting cut"


def test_decide_spends_no_more_than_its_budget_and_says_so() -> None:
    """With no budget it answers UNKNOWN (nothing decided; bound 0, which proves nothing), never PRUNED."""
    c, cc, opt = next(_classes(2))
    res = decide(cc, opt + 1, det=0.0, deadline=time.perf_counter() + 60, learned={})
    assert res.status in (Status.UNKNOWN, Status.FEASIBLE) and res.bound == 0, res


#: (the incumbent as the optimum's multiple and offset in ns, or None; the status ``descend`` answers): with none it
#: descends to the optimum; a tie with the incumbent is solved (it may rank first on memory); below the optimum the class
#: is pruned; far above, it descends to the optimum.
DESCENT = [(None, Status.OPTIMAL), ((1.0, 0), Status.OPTIMAL), ((1.0, -1), Status.PRUNED), ((1.2, 0), Status.OPTIMAL)]


@pytest.mark.parametrize("seed", [2, 4, 11, 19])
@pytest.mark.parametrize(("incumbent", "status"), DESCENT)
def test_descend_answers_as_the_brute_force(seed: int, incumbent: tuple[float, int] | None, status: Status) -> None:
    """``descend`` (a pinned schedule's interleaved class, searched without a budget) over every interleaved class of
    the space, those with no fitting cut too (INFEASIBLE: ``driver.search`` names the leanest), else as the table says."""
    ctx, pins = interleaved_instance(seed)
    seen = 0
    for c in enumerate_candidates(ctx, pins, SearchOptions()):
        if c.virtual_stages == 1:
            continue
        cc = class_costs(ctx, c)
        steps = [ev.objective_ns for n in compositions(cc.num_layers, cc.chunks) if (ev := evaluate(cc, n)).fits]
        opt = min(steps, default=None)
        inc = None if incumbent is None or opt is None else int(opt * incumbent[0]) + incumbent[1]
        res = descend(cc, inc, time.perf_counter() + 60, {})
        if opt is None:
            assert res.status == Status.INFEASIBLE and res.stage_layers is None, (c.describe(), res)
            continue
        seen += 1
        assert res.status == status, (c.describe(), opt, res)
        if status == Status.OPTIMAL:
            assert res.bound == opt == res.evaluation.objective_ns == evaluate(cc, res.stage_layers).objective_ns
        else:
            assert res.stage_layers is None and res.bound == opt
    assert seen, "no interleaved class with a fitting cut"
