"""Interleaved classes of a free schedule, searched over their uneven cuts within a budget (issue 26).

Left free, an interleaved-1F1B class is searched over every stage cut, as a pinned ``parallel.schedule:
interleaved-1f1b`` searches it (``space.enumerate_candidates``: every v of ``space.virtual_stage_options``, not only
those of uniform chunks), so no pin reaches a plan the free search does not. Most are ruled out before any solve: by
memory (``screens.quick_may_fit``) and by their valid lower bound over every cut (``interleaved.interleaved_bound``
in ``bounds.fitting_bound``) against the k-th best plan. Each one left is started at the best of its even split, the
greedy cut (``hints.greedy_cut``) and the best cuts of its pipeline shape ranked before it (``starts``), and solved
with CP-SAT within ``BUDGET`` of deterministic time shared by all (the same on every machine and load: the answer
does not move with them); once it is spent, a class ranks the best of those starts — the greedy cut among them, which
fits where the even split may not (torchtitan Llama 3 70B on 64 A100, TP8 PP8 v3: 24.610 → 24.110 s). A class the
budget leaves unproven ranks its best cut found; the answer's ``scope:`` note then names it and how far below the
answer its bound lies (``note``), the answer is FEASIBLE when that bound is below it (``budget_note``), and pinning
the schedule searches it without the budget (``options.time_limit_s`` only).
"""

from __future__ import annotations

import time
from dataclasses import replace

from planner.compose.cost import Candidate, ClassCosts, Context, Evaluation, class_costs, evaluate
from planner.search.cutsolver import ClassResult, Status, better, solve_class
from planner.search.decide import decide, descend
from planner.search.graph_bb import graph_bound
from planner.search.hints import best_of, climbs, first_round_cuts, rank, shaped_cuts
from planner.search.schedule_mip import class_optimum
from planner.specs import ParallelPins, SearchOptions

__all__ = ["budget", "budget_note", "holding", "note", "polish", "remember", "settle", "starts"]

#: CP-SAT deterministic time (its own work units) the interleaved classes of a free schedule may spend in all,
#: best bound first.
BUDGET = 0.1


def budget(pins: ParallelPins, fixed: list[int] | None, c: Candidate, left: list[float]) -> list[float] | None:
    """The CP-SAT budget of a class's solve: ``left``, the request's budget left (``BUDGET`` at first, spent in place
    by ``cutsolver.solve_class``), for an interleaved class whose cut is searched; None (the time limit only) for every
    other. A pinned schedule's classes too: its search then answers as the free one does and solves the classes left
    below the answer exactly (``driver.search`` settles with ``options.prove``), where each class solved to the deadline
    in queue order had answered slower than the free search (MLPerf v3.1 GPT-3 on 1,024 nodes in 60 s: 1.517 s against
    the free 1.476 s; docs/planner.md "A pinned schedule searched as the free one, then exactly")."""
    return left if fixed is None and c.virtual_stages > 1 else None


#: Cuts kept per pipeline shape (pp, v) for later budgeted classes of that shape to start from (``starts``).
KEPT = 3

#: (pp, v) → the ``KEPT`` best (step time, cut) of the interleaved classes ranked so far (``remember``).
Starts = dict[tuple[int, int], list[tuple[int, list[int]]]]


def remember(kept: Starts, *results: ClassResult) -> None:
    """Keep each result's cut among the ``KEPT`` fastest of its pipeline shape's (a fitting interleaved one)."""
    for res in results:
        c, ev, cut = res.cand, res.evaluation, res.stage_layers
        if c.virtual_stages == 1 or cut is None or ev is None or not ev.fits:
            continue
        mine = kept.setdefault((c.pp, c.virtual_stages), [])
        if all(n != cut for _, n in mine):
            mine.append((ev.objective_ns, cut))
            mine.sort()
            del mine[KEPT:]


def starts(kept: Starts, c: Candidate, budgeted: bool) -> tuple[list[int], ...]:
    """The cuts a budgeted class starts from besides its even split (``cutsolver.solve_class``): the best of classes
    ranked before it of its pipeline shape (expert seeds included). Classes of one shape that differ in recomputation,
    ZeRO stage or overlap share their best cuts more often than not: Nemotron-4 340B on 128 H100 (NeMo 24.07, free),
    TP8 PP8 v5 ZeRO-1 without recomputation is 3.531 s at its even split and 3.321 s at the cut of the expert seed
    with selective recomputation (3.377 s), the best its pinned search finds in 120 s."""
    return tuple(n for _, n in kept.get((c.pp, c.virtual_stages), ())) if budgeted else ()


def solve(
    cc: ClassCosts,
    options: SearchOptions,
    fixed: list[int] | None,
    incumbent: int | None,
    deadline: float,
    learned: dict,
    left: list[float] | None,
    kept: Starts,
) -> ClassResult:
    """A class's search (``driver.search``): ``cutsolver.solve_class`` within ``left``, its budget (``budget``), a
    budgeted class from the best cuts of its pipeline shape so far (``starts``). The classes a budget leaves below the
    answer are solved exactly afterwards where that is asked (``settle``, ``prove``: ``decide.descend``, then SCIP)."""
    at = starts(kept, cc.cand, left is not None)
    return solve_class(
        cc, options, fixed=fixed, incumbent=incumbent, deadline=deadline, learned=learned, budget=left, starts=at
    )


#: The budgeted classes left unproven that ``polish`` refines (the fastest first), the simulations each may spend, the
#: simulation steps (~2·m·C a simulation) that cap them, and the fewest worth a climb: a first-improvement scan of
#: fewer moves than that tries only the first chunk's (Llama 3 405B at 131K on 16,384 H100, m = 128 and 64 chunks:
#: 3 moves, 0.3 s, nothing found). Six, not three: the wide benchmark's NeMo GPT-3 20B on 64 GPUs answers 1.370 →
#: 1.366 s (its fourth fastest unproven class climbs past the first three), for ≤ 0.13 s more CPU on the five cases
#: it reaches; ten moved no answer. 120 simulations, not 60 (with both climbs): NeMo Llama 2 7B on 8 GPUs 4.000 →
#: 3.997 s, its PP2 v6 class's optimum (proven when that class is solved alone), ≤ 0.14 s more CPU a case.
POLISHED = 6
POLISH_EVALS = 120
POLISH_STEPS = 50_000
POLISH_MIN = 10


def polish(
    unproven: list[ClassResult],
    found: list[ClassResult],
    solved: dict[Candidate, tuple[ClassCosts, ClassResult]],
    deadline: float | None = None,
) -> list[ClassResult]:
    """The ``POLISHED`` fastest classes the budget left unproven (a bound at most the best plan ``found``: those that
    could change the answer; ranked by the better of their own and first-round cuts, ``hints.first_round_cuts``), each
    started at the better of its cut and the best of its first-round and ramp cuts (``hints.ramp_cuts``) and hill-climbed from each of those that is fastest so far by one-layer moves scored by the simulation
    (``hints.climbs``, within ``POLISH_EVALS`` simulations and ``POLISH_STEPS`` steps; none below ``POLISH_MIN``: then
    the start alone), twice: moves in chunk order and guided by the critical path, the better kept (each finds cuts the
    other misses: guided alone, 8 of the wide benchmark's answers faster by up to 3.3 % and 5 slower by 0.1 %): those
    it makes faster, at their new cut (still unproven, with their bound). The budget stops a class's CP-SAT search at
    its first cuts; the best of them is often a move or two from a faster one (MLPerf v3.1 GPT-3 on 1,280 nodes 0.860 →
    0.848 s, NeMo GPT-3 20B on 64 GPUs 1.379 → 1.370 s), or far from one with small first-round chunks that no climb
    from it reaches: Megatron-Bridge Llama 3 70B FP8 on 64 H100, TP4 PP8 v4, 22.93 → 21.96 s (the answer 22.88 →
    21.96 s), torchtitan Llama 3 70B on 64 A100 24.08 → 23.15 s. Not the classes that could rank only among the
    runners-up: on the wide benchmark they won no answer and cost ~0.2 s CPU on proven cases (Llama 3 8B on 8 H100:
    0.92 → 1.13 s for a third plan 0.01 % faster). ``solved``: each class's costs and result (``driver.search``)."""
    first = found[0].evaluation if found else None
    could = []
    for r in unproven:
        if r.cand not in solved or (first is not None and r.bound > first.objective_ns):
            continue
        cc = solved[r.cand][0]
        own = (r.stage_layers,) if r.evaluation is not None and r.evaluation.fits and r.stage_layers is not None else ()
        starts = _starts(cc, own, first_round_cuts(cc))
        if starts:
            could.append((min(ev.objective_ns for _, ev in starts), r, cc, own))
    out = []
    for _, r, cc, own in sorted(could, key=lambda x: x[0])[:POLISHED]:
        starts = _starts(cc, own, shaped_cuts(cc))  # ramp cuts for these only (docs/planner.md)
        evals = min(POLISH_EVALS, POLISH_STEPS // operations(cc))
        if evals >= POLISH_MIN:  # climbed from the class's own cut, as before, and from the first-round cut if faster
            ahead = starts[0][1].objective_ns
            starts = [climbs(cc, (n,), evals, deadline)[:2] for n, ev in starts if ev.objective_ns <= ahead]
        cut, ev = min(starts, key=lambda s: rank(s[1]))
        if ev.fits and (r.evaluation is None or not r.evaluation.fits or better(ev, r.evaluation)):
            out.append(replace(r, stage_layers=cut, evaluation=ev))
    return out


def _starts(cc: ClassCosts, own: tuple[list[int], ...], more: list[list[int]]) -> list[tuple[list[int], Evaluation]]:
    """The fitting ones of the class's ``own`` cut and the best of ``more`` (``best_of``)."""
    starts = [best_of(cc, cuts) for cuts in (own, tuple(more)) if cuts]
    return [(n, ev) for n, ev in starts if ev.fits]


def note(unproven: list[ClassResult], found: list[ClassResult], top_k: int) -> str | None:
    """What the ``scope:`` note says of the interleaved classes the budget left unproven (None: none that could
    still rank among the ``top_k`` plans ``found``, i.e. whose bound is at most the k-th best plan's step time)."""
    kth = found[top_k - 1].evaluation if len(found) >= top_k else None
    best = found[0].evaluation.objective_ns if found and found[0].evaluation else None
    left = [r for r in unproven if kth is None or r.bound <= kth.objective_ns]
    if not left:
        return None
    low = min(r.bound for r in left)
    gap = (
        f"; a cut of theirs is at most {(best - low) / best:.1%} faster than the answer" if best and low < best else ""
    )
    return (
        f"uneven stage cuts of {len(left)} interleaved class{'es' if len(left) > 1 else ''} left unproven by the search's "
        f"CP-SAT budget (uneven.BUDGET; each ranks its best cut found{gap})"
    )


#: The classes ``budget_note`` names (``SearchResult.unproven`` holds them all).
NAMED = 3


def holding(unproven: list[ClassResult], best: int) -> list[ClassResult]:
    """The classes the budget left unproven whose bound is below the answer's step ``best`` (ns) — what keeps it from
    OPTIMAL — lowest bound first."""
    return sorted((r for r in unproven if r.bound < best), key=lambda r: (r.bound, r.cand.describe()))


#: CP-SAT deterministic time of each settling solve (``settle``): 0.01, not 0.004 (the wide benchmark: 2 answers
#: proven against 1, for the same CPU within run-to-run noise). With ``decide``'s satisfaction rounds, 0.03 proves no
#: more answers than 0.01 on the wide benchmark (the same two more than the minimising solve at 0.01).
SETTLE_EACH = 0.01
#: The largest schedule graph (2·m·chunks operations) ``settle`` branches on first (``graph_bb``), and the LPs it
#: may solve for a class: ``GRAPH_WORK`` // operations (GLOP: a root ~6 ms at 96 operations, ~90 ms at 1,024; a child
#: 3–7 ms at 768). 49,152, not 16,384: Megatron-Bridge's Qwen3 30B-A3B row needs 13 LPs at 768 operations to find the
#: cut that beats its answer and 25 at 640 to prove the next class (57 and 27 before rounded incumbents); 0 turns it
#: off.
GRAPH_MAX_OPS = 1024
GRAPH_WORK = 49_152


def settle(
    ctx: Context,
    unproven: list[ClassResult],
    polished: list[ClassResult],
    found: list[ClassResult],
    solved: dict[Candidate, tuple[ClassCosts, ClassResult]],
    options: SearchOptions,
    learned: dict,
    deadline: float,
) -> tuple[list[ClassResult], list[ClassResult]]:
    """The classes the budget left unproven, each at its ``polish``-ed cut, once the answer is known: those that hold
    it unproven (``holding``), lowest bound first, each asked once more whether a cut beats the answer — a small schedule
    graph first by branch and bound on its LP relaxation (``graph_bb``, within ``GRAPH_WORK``: it settles the class or
    answers its optimum), then by ``decide``'s satisfaction rounds (not minimising ones) within ``SETTLE_EACH`` of
    deterministic time — until one stays unproven (then the answer is FEASIBLE whatever the rest do, and they keep
    their bounds). The classes ``graph_bb`` does not reach (``branched``) go first: NeMo 24.12's GPT-3 20B on 64 H100
    (``megatron``) settled 43 small classes by 1.5 s of LPs before one of 2,048 operations ended the pass unproven
    (1.2 → 2.8 s CPU). Each is asked from the cut the budget left it, not its polished one: ``decide`` starts from
    that cut's critical path, and a faster start can be a worse one to prove from (torchtitan Llama 3.1 405B on 128
    H100 stays unproven from the ramp cut polish gives its PP8 v5 class). The budget spends itself on the classes met
    first, before any plan prunes them: a class met with no incumbent can take it all (Mixtral 8x22B on 128 H100: TP2
    PP8 v3 without recomputation, det 0.09 of 0.1, bound 4.623 s above the answer's 4.180 s) and leave the next ones
    unsolved at their loose bounds (3.924 s: no fitting cut found). Against the answer, most first models are infeasible at once (10–40 ms): the
    class cannot beat it, and its bound becomes the answer's. With ``options.prove`` a class that solve leaves below the
    answer is solved by the schedule MIP within the time left (``prove``) before the pass gives up on it. Returns
    (every class, its bound raised where the solve proved more; those whose solve found a faster cut, at it)."""
    at = {r.cand: r for r in polished}
    out = [at.get(r.cand, r) for r in unproven]
    was = {r.cand: r for r in unproven}
    if not found or found[0].evaluation is None:
        return out, []
    faster, best = [], min(r.evaluation.objective_ns for r in (found[0], *polished) if r.evaluation is not None)
    index = {r.cand: i for i, r in enumerate(out)}
    held = holding(out, best)
    costs = {r.cand: solved[r.cand][0] if r.cand in solved else class_costs(ctx, r.cand) for r in held}
    # the classes ``graph_bb`` does not reach first (one left below ends the pass before any LP is spent), then its
    # own; lowest bound first within each (``sorted`` is stable)
    for r in sorted(held, key=lambda r: branched(costs[r.cand])):
        if r.bound >= best:
            continue  # the answer is a faster cut found here: this one cannot beat it
        i = index[r.cand]
        cc = costs[r.cand]
        if branched(cc) and (g := graph_bound(cc, best, GRAPH_WORK // operations(cc), deadline)) is not None:
            ev = evaluate(cc, g.cut) if g.cut is not None else None
            if ev is not None and ev.fits:  # the class's optimum (to graph_bb.SLACK_NS)
                if ev.objective_ns < best:  # faster than the answer
                    out[i] = replace(r, stage_layers=g.cut, evaluation=ev, bound=ev.objective_ns)
                    faster.append(out[i])
                    best = ev.objective_ns
                else:
                    out[i] = replace(r, bound=best)
                continue
            out[i] = r = replace(r, bound=max(r.bound, min(g.bound, best)))
            if r.bound >= best:
                continue  # no cut beats the answer
        start = was[r.cand].stage_layers  # the budget's cut, not polish's: see the docstring
        at_cut = (start,) if start is not None else ()
        res = decide(cc, best, SETTLE_EACH, deadline, learned, at_cut)
        if options.prove and res.bound < best:
            res = prove(cc, res, best, deadline)
        ev = res.evaluation
        if ev is not None and ev.fits and (r.evaluation is None or better(ev, r.evaluation)):
            r = replace(r, stage_layers=res.stage_layers, evaluation=ev)
            faster.append(r)
            best = min(best, ev.objective_ns)  # the driver ranks it: the answer may be this cut now
        out[i] = r = replace(r, bound=max(r.bound, res.bound))
        if r.bound < best:
            break  # still below the answer: it stays FEASIBLE
    return out, faster


def branched(cc: ClassCosts) -> bool:
    """Whether ``settle`` branches on the class's graph (``graph_bb``): one block kind, at most ``GRAPH_MAX_OPS``
    operations, ``GRAPH_WORK`` on."""
    return bool(GRAPH_WORK) and cc.moe_prefix is None and operations(cc) <= GRAPH_MAX_OPS


def operations(cc: ClassCosts) -> int:
    """The operations of the class's schedule graph: a forward and a backward per micro-batch and chunk."""
    return 2 * cc.m * cc.chunks


#: ``options.prove``: the largest schedule graph (2·m·chunks operations) ``prove`` writes, and how much faster than the
#: answer a cut must be to count (SCIP's tolerance is a nanosecond: the proof is to this much).
PROVE_MAX_OPS = 20_000
PROVE_SLACK_NS = 1_000
#: ``prove``: the share of the time left that ``decide.descend`` may spend on a class before the MIP takes the rest.
PROVE_DESCENT = 0.5


def prove(cc: ClassCosts, res: ClassResult, best: int, deadline: float) -> ClassResult:
    """``options.prove``: a class the settling solve left below the answer's step ``best`` (ns), solved exactly, first
    by ``decide.descend`` against the answer (``PROVE_DESCENT`` of the time left, all of it where the MIP does not
    apply: NeMo Llama 2 13B on 16 H100 proven in 9.8 s CPU, 25.7 s by the MIP alone), then by the schedule MIP
    (``schedule_mip.class_optimum``: SCIP over the class's whole dependency graph) within the time left, its cutoff the
    answer less ``PROVE_SLACK_NS``. No cut under it: the class cannot beat the answer (its bound becomes
    the answer's). Its optimum under it: that cut, the class's bound its step (a faster answer). Left open by the time
    limit (or a mixture of dense and MoE blocks, or a graph over ``PROVE_MAX_OPS``): the settling solve's result. The
    cut solver's lazy chains cannot prove some of these classes for any budget, where SCIP can: the wide benchmark's
    NeMo Llama 2 7B on 8 H100, each of its five listed classes in 1–30 s, and torchtitan Llama 3 70B on 64 A100, whose
    TP8 PP8 v2 class has a cut 2.0 % faster than the free answer (``bench/verify_unproven.py``)."""
    left = deadline - time.perf_counter()
    mip = cc.moe_prefix is None and operations(cc) <= PROVE_MAX_OPS
    if left <= 0:
        return res
    cut = descend(cc, best - 1, time.perf_counter() + (left * PROVE_DESCENT if mip else left))
    if cut.status == Status.PRUNED:
        return replace(res, bound=best)
    if cut.status == Status.OPTIMAL:
        return replace(res, stage_layers=cut.stage_layers, evaluation=cut.evaluation, bound=cut.bound)
    left = deadline - time.perf_counter()
    if left <= 0 or not mip:
        return res
    got = class_optimum(cc, left, cutoff_ns=best - PROVE_SLACK_NS)
    if got.status == "INFEASIBLE":
        return replace(res, bound=best)
    if got.stage_layers is None:
        return res
    ev = evaluate(cc, got.stage_layers)
    if not ev.fits or ev.objective_ns >= best:
        return res
    bound = ev.objective_ns if got.status == "OPTIMAL" else res.bound
    return replace(res, stage_layers=got.stage_layers, evaluation=ev, bound=bound)


def budget_note(best: int, below: list[ClassResult], pinned: bool = False) -> str:
    """What a user reads when the budget left interleaved classes unproven whose lower bounds are below the answer's
    step ``best`` (ns; ``below``: ``holding``'s, lowest first): the answer is not proven optimal (``driver.search``
    answers FEASIBLE), by how much at most, which classes could beat it and the pins that search one alone. A class
    the budget leaves unproven can hold a faster cut: Nemotron-4 340B on 128 H100 (NeMo 24.07, free) answered 3.377 s
    while its TP8 PP8 v5 class without recomputation has a cut of 3.321 s. ``pinned``: the schedule is pinned (each
    class below the answer was already solved exactly against it until the time limit: ``driver.search``)."""
    low = below[0].bound

    def named(r: ClassResult) -> str:
        found = (
            f"best cut found {r.evaluation.objective_ns / 1e9:.4g} s"
            if r.evaluation and r.evaluation.fits
            else "no fitting cut found"
        )
        return f"{r.cand.describe()} (lower bound {r.bound / 1e9:.4g} s, {found})"

    more = f" and {len(below) - NAMED} more" if len(below) > NAMED else ""
    return (
        f"NOT PROVEN OPTIMAL: the CP-SAT budget of the interleaved classes (uneven.BUDGET) ended before their uneven "
        f"stage cuts were proven, and a solve against the answer (uneven.SETTLE_EACH) did not settle the first of "
        f"those below it; the best plan is at most {(best - low) / best:.1%} slower than the best possible "
        f"(step {best / 1e9:.4g} s, lower bound {low / 1e9:.4g} s). The classes that could beat it, lowest bound first: "
        f"{'; '.join(named(r) for r in below[:NAMED])}{more} (solver.unproven lists each with its pins). To prove it: "
        + (
            "raise options.time_limit_s (with the schedule pinned each class below the answer is solved exactly "
            "against it, by satisfaction rounds and then a MIP, until the time limit), or pin one of them (all its "
            "settings) to spend it on that class alone"
            if pinned
            else "set options.prove (--prove: each is solved exactly, by satisfaction rounds and then a MIP, within "
            "options.time_limit_s; raise it to minutes), pin one of them (all its settings: it is then solved exactly "
            "within options.time_limit_s), or pin parallel.schedule: interleaved-1f1b (each is then solved exactly, "
            "as with options.prove)"
        )
    )
