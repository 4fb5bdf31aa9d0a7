"""``oneround``: an interleaved class ruled out before its first CP-SAT solve, checked against that solve.

On a table of seeded small instances (``test_interleaved_bound.small_instances``: m = 2–16, memory from roomy to
nothing fits, ZeRO stages 0–3 so the end of step's rows differ by rank), for every interleaved class of at most 8
chunks, its first model as ``cutsolver.solve_class`` builds it for a budgeted class (``cut_model``, the initial chains
and the critical path of its even split) is solved by CP-SAT without a cutoff: its optimum z. Then at incumbents z
(the tight point: a cut of the model reaches it), z − 1 and a few below:

* every incumbent ``rules_out`` rules out is below z (so the slow path's first solve, with that cutoff, is
  INFEASIBLE), checked again by solving the model with the cutoff; and below the best fitting cut of every cut
  enumerated (``bruteforce.compositions``, simulated: the independent computation);
* teeth: at z − 1 it rules out most classes (a check that ruled out nothing would pass the above).
"""

from __future__ import annotations

from ortools.sat.python import cp_model
from test_interleaved_bound import small_instances

from planner.compose.cost import class_costs, evaluate
from planner.search.bruteforce import compositions
from planner.search.chains import as_arrays, initial_counts, price
from planner.search.cutsolver import cut_model, initial_chains, priced
from planner.search.hints import critical_counts
from planner.search.oneround import end_rows, rules_out
from planner.search.space import enumerate_candidates
from planner.specs import ParallelPins, SearchOptions
from planner.specs.layout import even_stage_layers


def first_model(cc, seeds, cutoff=None):
    """CP-SAT's status and objective on the class's first model (at ``cutoff``, when given)."""
    cm = cut_model(cc)
    for ch in dict.fromkeys(initial_chains(cc) + priced(cc, seeds)):
        cm.add_chain(ch)
    if cutoff is not None:
        cm.model.add(cm.makespan + cm.end <= cutoff)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    st = solver.solve(cm.model)
    return st, (int(solver.objective_value) if st == cp_model.OPTIMAL else None)


def test_rules_out_only_what_the_first_model_rules_out() -> None:
    pins = ParallelPins(schedule="interleaved-1f1b", tp=1, recompute="none", sequence_parallel=False)
    tight = checked = 0
    every = [(ctx, cand) for ctx in small_instances() for cand in enumerate_candidates(ctx, pins, SearchOptions())]
    for ctx, cand in every:
        if cand.chunks > 8 or cand.chunks > ctx.model.num_layers:
            continue
        cc = class_costs(ctx, cand)
        L, C = cc.num_layers, cc.chunks
        assert end_rows(cc) is not None  # every rank's end of step read back as affine rows
        seeds = [critical_counts(cc, evaluate(cc, even_stage_layers(L, C)))]
        st, z = first_model(cc, seeds)
        if st != cp_model.OPTIMAL:
            assert st == cp_model.INFEASIBLE  # nothing fits: the check has nothing to rule out below
            continue
        best_fit = min((ev.objective_ns for n in compositions(L, C) if (ev := evaluate(cc, n)).fits), default=None)
        assert best_fit is not None and z <= best_fit  # the model is a relaxation of the fitting cuts
        counts = list(dict.fromkeys([*initial_counts(cand.schedule, cand.pp, cand.virtual_stages, cc.m), *seeds]))
        coef, const = price(cc, as_arrays(counts))
        chains = list(zip(coef.tolist(), const.tolist()))
        checked += 1
        for inc in (z, z - 1, z - z // 200, z - z // 50, z - z // 10):
            if rules_out(cc, chains, inc):
                assert inc < z and inc < best_fit, (cand, inc, z)
                assert first_model(cc, seeds, inc)[0] == cp_model.INFEASIBLE, (cand, inc)
                tight += inc == z - 1
    assert checked >= 20, checked
    assert tight * 2 >= checked, (tight, checked)  # rules out most classes right below the model's optimum
