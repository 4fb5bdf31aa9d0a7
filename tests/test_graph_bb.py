"""Branch and bound on the schedule graph's LP relaxation (``planner.search.graph_bb``), checked against the brute
force over every cut of small instances and against the schedule MIP on the wide benchmark's rows, then what it settles
in the search (``uneven.settle``, issue 26)."""

from __future__ import annotations

import pytest
from test_schedule_mip import classes, megatron_row, wide_row

from planner.api import context, parse_request, plan
from planner.compose.cost import class_costs, evaluate
from planner.search import uneven
from planner.search.bruteforce import compositions
from planner.search.graph_bb import SLACK_NS, aggregates, graph_bound
from planner.search.schedule_mip import class_optimum
from planner.search.space import enumerate_candidates
from planner.specs import PlanRequest

NO_TARGET = 1 << 62


def optimum(cc) -> int | None:  # type: ignore[no-untyped-def]
    """The brute force: the fastest fitting cut's step (ns), None when none fits."""
    steps = [ev.objective_ns for n in compositions(cc.num_layers, cc.chunks) if (ev := evaluate(cc, n)).fits]
    return min(steps) if steps else None


@pytest.mark.parametrize(("seed", "fitting"), [(0, 0), (2, 30), (3, 31), (4, 42)])
def test_its_optimum_is_the_brute_force_optimum(seed: int, fitting: int) -> None:
    """Without a target, run to the end: the whole cut it returns is the fastest fitting cut (its step the brute
    force's), and where no cut fits its bound is above any step (seed 0: no class of its 53 has a fitting cut)."""
    solved = 0
    for cc in classes(seed, interleaved=True):
        best = optimum(cc)
        g = graph_bound(cc, NO_TARGET, 100_000)
        assert g is not None
        if best is None:
            assert g.cut is None and g.bound >= NO_TARGET, cc.cand.describe()
            continue
        assert g.cut is not None, cc.cand.describe()
        ev = evaluate(cc, g.cut)
        assert ev.fits and ev.objective_ns == best, (cc.cand.describe(), g.cut)
        assert best - 2 * SLACK_NS <= g.bound <= best
        solved += 1
    assert solved == fitting


@pytest.mark.parametrize("seed", [2, 3, 4])
def test_against_a_target_it_settles_or_finds_the_faster_cut(seed: int) -> None:
    """A target just above the optimum: it returns the optimal cut (faster than the target). At it (a tie, as when the
    class holds the answer's own step) or just below it (by more than its slack): no cut, a bound at least the
    target. And with 1 or 3 LPs only, or past its deadline (the root LP only), a bound no higher than the optimum."""
    checked = 0
    for cc in classes(seed, interleaved=True):
        best = optimum(cc)
        if best is None:
            continue
        above = graph_bound(cc, best + 1, 100_000)
        assert above is not None and above.cut is not None and evaluate(cc, above.cut).objective_ns == best
        tie = graph_bound(cc, best, 100_000)  # the optimum ties the target: no cut beats it
        assert tie is not None and tie.cut is None and tie.bound >= best
        below = graph_bound(cc, best - 2 * SLACK_NS, 100_000)
        assert below is not None and below.cut is None and below.bound >= best - 2 * SLACK_NS
        for nodes in (1, 3):
            few = graph_bound(cc, NO_TARGET, nodes)
            assert few is not None and few.nodes <= max(nodes, 1) and few.bound <= best
        late = graph_bound(cc, NO_TARGET, 100_000, deadline=0.0)  # past its deadline: the root only
        assert late is not None and late.nodes == 1 and late.bound <= best
        checked += 1
    assert checked >= 3


def test_it_branches_on_rank_totals_then_prefixes_then_chunks() -> None:
    """The aggregates of a PP2 v3 class (6 chunks; rank 0 holds chunks 0, 2, 4): the two ranks, the five prefixes,
    the six chunks."""
    cc = next(cc for seed in range(8) for cc in classes(seed, True) if cc.cand.pp == 2 and cc.chunks == 6)
    got = aggregates(cc)
    assert got[:2] == [[0, 2, 4], [1, 3, 5]]
    assert got[2:7] == [[0], [0, 1], [0, 1, 2], [0, 1, 2, 3], [0, 1, 2, 3, 4]]
    assert got[7:] == [[ch] for ch in range(6)]


def test_the_free_search_settles_what_the_budget_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchtitan's Llama 3 8B FSDP row of 2024-12 (8 H100, bf16) left free: without ``graph_bb`` its budget leaves PP2
    interleaved classes 0.5 % below the answer (FEASIBLE: the chain bounds do not see that memory forces their cut
    uneven); with it each is settled by its graph's relaxation, a few dozen LPs: OPTIMAL, the same plans."""
    body = wide_row("torchtitan_2412_t1_8b_8gpu_FSDP")
    settled = plan(PlanRequest.model_validate(body))
    monkeypatch.setattr(uneven, "GRAPH_WORK", 0)
    before = plan(PlanRequest.model_validate(body))
    assert before.solver.status == "FEASIBLE" and before.solver.unproven
    assert settled.solver.status == "OPTIMAL" and not settled.solver.unproven, settled.solver.notes
    assert settled.solver.best_objective_bound == settled.solver.objective_value == before.solver.objective_value
    assert [p.model_dump() for p in settled.plans] == [p.model_dump() for p in before.plans]


@pytest.mark.parametrize(
    ("row", "megatron"),
    [("mbridge_25.09_Qwen3_30B_a3B_16gpu_prec-unstated", False), ("nemo2407_LLAMA2-13B_16gpu", True)],
)
def test_the_free_search_finds_the_faster_cut_the_budget_missed(
    row: str, megatron: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Megatron-Bridge 25.09's Qwen3 30B-A3B (16 H100) and NeMo 24.07's Llama 2 13B (16 H100, on the ``megatron``
    preset): the budget answers a cut of one class, FEASIBLE; ``graph_bb`` finds a faster cut of another interleaved
    class and proves the rest: OPTIMAL and faster. The new answer's class, solved by the schedule MIP, has the same
    optimum (the MIP alone: ``test_schedule_mip.py``)."""
    body = megatron_row(row) if megatron else wide_row(row)
    found = plan(PlanRequest.model_validate(body))
    monkeypatch.setattr(uneven, "GRAPH_WORK", 0)
    before = plan(PlanRequest.model_validate(body))
    assert before.solver.status == "FEASIBLE"
    assert found.solver.status == "OPTIMAL" and not found.solver.unproven, found.solver.notes
    step = found.plans[0].estimate.step_time_s
    assert step < before.plans[0].estimate.step_time_s
    req = parse_request(PlanRequest.model_validate({**body, "parallel": found.plans[0].parallel.model_dump()}))
    (cand,) = enumerate_candidates(context(req), req.parallel, req.options)
    ref = class_optimum(class_costs(context(req), cand), time_limit_s=600)
    assert ref.status == "OPTIMAL" and ref.objective_ns == pytest.approx(step * 1e9, abs=2.0)


def test_a_mixture_of_dense_and_moe_blocks_is_not_written() -> None:
    """The schedule model places no MoE layers by position: a model of two block kinds gets None (the settling solve
    then decides it as before)."""
    body = wide_row("mbridge_25.11_GPT_64gpu_BF16")
    pins = {"tp": 1, "pp": 4, "dp": 16, "ep": 8, "micro_batch_size": 1}
    pins |= {"schedule": "interleaved-1f1b", "virtual_stages": 3}
    req = parse_request(PlanRequest.model_validate({**body, "parallel": pins}))
    cands = enumerate_candidates(context(req), req.parallel, req.options)
    cc = class_costs(context(req), cands[0])
    assert cc.moe_prefix is not None
    assert graph_bound(cc, NO_TARGET, 10) is None
