"""The schedule MIP (``planner.search.schedule_mip``), a slow exact reference for one class's stage cut beyond
``bruteforce``'s reach, checked against the simulation and the brute force, then used to check the cut solver and the
bounds a NOT PROVEN answer lists on a class of 206 million cuts (issue 26)."""

from __future__ import annotations

import math
import random
import time

import pytest
from bench_support import bench_module, on_megatron
from test_planner_exact import random_instance
from test_planner_interleaved import interleaved_instance

from planner.api import context, estimate, parse_request, plan
from planner.compose.cost import class_costs, evaluate
from planner.search import uneven
from planner.search.bruteforce import compositions
from planner.search.cutsolver import Status, solve_class
from planner.search.decide import decide, descend
from planner.search.schedule_mip import MS, class_optimum, schedule_model
from planner.search.space import enumerate_candidates
from planner.specs import PlanRequest, SearchOptions

NS = 2.0  # SCIP's tolerance (1e-6 ms) and the ns rounding of the costs: the model agrees with the simulation to it


def classes(seed: int, interleaved: bool) -> list:
    """Every class of a seeded small instance that has a cut to choose (pp > 1), costed."""
    ctx, pins = interleaved_instance(seed) if interleaved else random_instance(seed)
    every = [class_costs(ctx, c) for c in enumerate_candidates(ctx, pins, SearchOptions())]
    return [cc for cc in every if cc.cand.pp > 1]


@pytest.mark.parametrize(("seed", "interleaved"), [(s, False) for s in range(6)] + [(s, True) for s in range(6)])
def test_the_model_at_a_cut_is_the_simulated_step(seed: int, interleaved: bool) -> None:
    """With the cut fixed, the LP's optimum is the evaluated step (makespan + end of step), and it is feasible exactly
    when the cut fits: every schedule (GPipe, 1F1B, interleaved), memory binding or not, p2p lags slow or fast."""
    rng = random.Random(seed)
    checked = fitting = 0
    for cc in classes(seed, interleaved):
        cuts = list(compositions(cc.num_layers, cc.chunks))
        for cut in rng.sample(cuts, min(3, len(cuts))):
            ev = evaluate(cc, cut)
            solver, _ = schedule_model(cc, integer=False, fixed=cut)
            st = solver.Solve()
            if ev.fits:
                assert st == solver.OPTIMAL, (cc.cand.describe(), cut)
                got = solver.Objective().Value() / MS
                assert got == pytest.approx(ev.objective_ns, abs=NS), (cc.cand.describe(), cut)
                fitting += 1
            else:
                assert st == solver.INFEASIBLE, (cc.cand.describe(), cut, ev.peak_memory_bytes, cc.usable_bytes)
            checked += 1
    assert checked >= 3


@pytest.mark.parametrize("seed", range(4))
def test_the_mip_optimum_is_the_brute_force_optimum(seed: int) -> None:
    """Over every cut of every pipelined class of a small interleaved instance: SCIP's optimum is the best fitting
    cut's step, INFEASIBLE where none fits."""
    for cc in classes(seed, interleaved=True):
        steps = [ev.objective_ns for n in compositions(cc.num_layers, cc.chunks) if (ev := evaluate(cc, n)).fits]
        got = class_optimum(cc, time_limit_s=120)
        if not steps:
            assert got.status == "INFEASIBLE", cc.cand.describe()
            continue
        assert got.status == "OPTIMAL", cc.cand.describe()
        assert got.objective_ns == pytest.approx(min(steps), abs=NS), cc.cand.describe()
        assert evaluate(cc, got.stage_layers).objective_ns == min(steps)


def wide_row(case: str) -> dict:
    return dict(bench_module("bench_plan_wide").cases())[case]


def megatron_row(case: str) -> dict:
    """A NeMo row of the wide benchmark on the ``megatron`` preset (``bench_support.on_megatron``): its uneven cuts."""
    return on_megatron(wide_row(case))


def llama2_7b(parallel: dict) -> dict:
    """NeMo 24.12's Llama 2 7B on 8 H100 (``bench/bench_plan_wide.py``'s nemo2412 row) on the ``megatron`` preset, which
    runs its uneven cuts (NeMo 24.07 splits evenly only; the same prices here): 32 layers, 16 micro-batches."""
    body = megatron_row("nemo2412_LLAMA2-7B_8gpu")
    return {**body, "top_k": 1, "parallel": parallel}


@pytest.mark.parametrize(
    ("v", "cuts", "solver"),
    [(5, 20_160_075, "solve_class"), (5, 20_160_075, "decide"), (5, 20_160_075, "descend"), (6, 84_672_315, "descend")],
)
def test_a_pinned_class_the_brute_force_cannot_reach_is_the_mip_optimum(v: int, cuts: int, solver: str) -> None:
    """Its PP2 classes of v = 5 and 6 (10 and 12 chunks of 32 layers: 20 and 85 million cuts) searched alone: the cut
    model proves a cut optimal — by ``cutsolver.solve_class``'s minimising rounds, by ``decide``'s satisfaction rounds
    from no target (each cut found lowers it), or by ``descend`` (what a pinned schedule's search runs: ``uneven.solve``)
    — and SCIP, over the whole schedule graph, finds the same step. v = 6 by ``descend`` only: 4 rounds and 1.1 s CPU
    here, where ``solve_class`` takes 361 s (its second minimising CP-SAT solve; 2026-12-05, cost model 70)."""
    assert sum(1 for _ in compositions(8, 3)) == 21 and math.comb(31, 2 * v - 1) == cuts  # C(L − 1, C − 1) cuts
    pins = {"tp": 1, "pp": 2, "dp": 4, "micro_batch_size": 2, "schedule": "interleaved-1f1b", "virtual_stages": v}
    req = parse_request(PlanRequest.model_validate(llama2_7b(pins | {"recompute": "none", "zero_stage": 1})))
    ctx = context(req)
    (cand,) = enumerate_candidates(ctx, req.parallel, req.options)
    cc = class_costs(ctx, cand)
    if solver == "solve_class":
        got = solve_class(cc, SearchOptions(time_limit_s=600, num_workers=1))
    elif solver == "decide":
        got = decide(cc, 1 << 62, 1000.0, time.perf_counter() + 600, {})
    else:
        got = descend(cc, None, time.perf_counter() + 600, {})
    assert got.status == Status.OPTIMAL and got.evaluation is not None
    ref = class_optimum(cc, time_limit_s=600)
    assert ref.status == "OPTIMAL"
    assert ref.objective_ns == pytest.approx(got.evaluation.objective_ns, abs=NS)
    assert evaluate(cc, ref.stage_layers).objective_ns == got.evaluation.objective_ns


def test_no_class_a_not_proven_answer_lists_can_beat_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchtitan's Llama 3 8B FSDP row of 2024-12 (bf16, 8 H100) left free is NOT PROVEN: its budget leaves 21
    interleaved classes below the answer (``solver.unproven``, cost model 70). The MIP, each class with the answer less
    1 µs as its cutoff, finds no cut under it in any: their optima are at least the answer, so the listed bounds are
    valid and the answer is the optimum of the whole space, which the search alone does not prove (2026-12-05; at cost
    model 69 Megatron-Bridge's Qwen3 30B-A3B row was this case, and at 70 the MIP finds a faster cut there; the
    async-TP Llama 3 8B row was it until settling by satisfaction rounds (``decide``) proved it; NeMo's Llama 2 7B row,
    five classes, takes 10–60 s: SCIP's path moves from run to run)."""
    monkeypatch.setattr(uneven, "GRAPH_WORK", 0)  # the listing before ``graph_bb`` settles it (cost model 73)
    body = wide_row("torchtitan_2412_t2_8b_fsdp8_cp1")
    free = plan(PlanRequest.model_validate(body)).solver
    assert free.status == "FEASIBLE" and free.unproven and free.objective_value is not None
    answer_ns = round(free.objective_value * 1e9)
    for u in free.unproven:
        req = parse_request(PlanRequest.model_validate({**body, "parallel": u.parallel.model_dump()}))
        ctx = context(req)
        (cand,) = enumerate_candidates(ctx, req.parallel, req.options)
        got = class_optimum(class_costs(ctx, cand), time_limit_s=600, cutoff_ns=answer_ns - 1000)
        assert got.status == "INFEASIBLE", (cand.describe(), got)
        assert u.lower_bound_s * 1e9 <= answer_ns


def test_prove_settles_an_answer_the_budget_left_unproven(monkeypatch: pytest.MonkeyPatch) -> None:
    """``options.prove`` (``uneven.prove``) on torchtitan's Llama 3 8B FSDP row of 2024-12 (bf16, 8 H100): without it
    the answer is FEASIBLE, 21 interleaved classes listed below it; with it each is solved against the answer (the
    settling solve, then ``decide.descend``, then the schedule MIP) and none can beat it, so the same plans are OPTIMAL with nothing listed
    (2.6 s CPU here, 2026-12-05, cost model 70)."""
    monkeypatch.setattr(uneven, "GRAPH_WORK", 0)  # without ``graph_bb`` (which settles it alone: test_graph_bb.py)
    body = wide_row("torchtitan_2412_t2_8b_fsdp8_cp1")
    free = plan(PlanRequest.model_validate(body))
    proved = plan(PlanRequest.model_validate({**body, "options": {"prove": True, "time_limit_s": 600}}))
    assert free.solver.status == "FEASIBLE" and free.solver.unproven, free.solver.notes
    assert any("options.prove" in n for n in free.solver.notes)  # the NOT PROVEN note says how
    assert proved.solver.status == "OPTIMAL" and not proved.solver.unproven, proved.solver.notes
    assert proved.solver.best_objective_bound == proved.solver.objective_value == free.solver.objective_value
    assert [p.estimate.step_time_s for p in proved.plans] == [p.estimate.step_time_s for p in free.plans]
    assert not any(n.startswith("NOT PROVEN") for n in proved.solver.notes)


def test_prove_finds_the_faster_cut_the_budget_missed(monkeypatch: pytest.MonkeyPatch) -> None:
    """NeMo 24.07's Llama 2 13B row (16 H100) on the ``megatron`` preset (``megatron_row``; the same prices): the budget and polish leave its TP1 PP2 v6 class at 3.7073 s and the
    answer at 3.7047 s (FEASIBLE); ``prove`` finds that class's cut [1, 2, 3, 4, …, 4, 2] at 3.7010 s, which becomes
    the answer, and settles the other 15 classes: OPTIMAL (20 s CPU here, 2026-12-05, by the MIP; 9.8 s at stop 55, by
    ``decide.descend`` first). The plan's step is re-estimated
    from its settings and cut (``planner.estimate``: the simulation, not the MIP)."""
    monkeypatch.setattr(uneven, "GRAPH_WORK", 0)  # without ``graph_bb`` (which finds it alone: test_graph_bb.py)
    body = megatron_row("nemo2407_LLAMA2-13B_16gpu")
    free = plan(PlanRequest.model_validate(body))
    proved = plan(PlanRequest.model_validate({**body, "options": {"prove": True, "time_limit_s": 600}}))
    assert free.solver.status == "FEASIBLE"
    assert proved.solver.status == "OPTIMAL" and not proved.solver.unproven, proved.solver.notes
    best = proved.plans[0]
    assert best.estimate.step_time_s < free.plans[0].estimate.step_time_s - 1e-3
    assert best.parallel.pp == 2 and best.parallel.virtual_stages == 6
    again = estimate({**body, "parallel": best.parallel.model_dump()})
    assert again.step_time_s == best.estimate.step_time_s == proved.solver.objective_value
    assert free.plans[0].estimate.step_time_s in [p.estimate.step_time_s for p in proved.plans]
