"""The cut a plan answers among cuts of equal step time (``driver.search``, issue 26).

A class's optimal step time is often reached by several cuts: moving a layer between stages off the critical path
changes neither the simulated makespan nor the slowest rank's end of step (Llama 3 405B on 16,384 H100 at 8,192
tokens, its TP8 + SP x PP8 class: [19, 19, 13, 16, 15, 15, 14, 15] and three one-layer neighbours, all
13.326354340 s and 53.66 GB; DeepSeek-V3 on 2,048 H100, its PP8 class: [.., 8, 6, 7], [.., 7, 7, 7] and
[.., 7, 6]). Which of them CP-SAT returns first depends on its search (presolve, parameters, version), so the
answer would move with any change to the solver. ``canonical`` makes it a function of the tie set: from the proven
optimal cut it walks every one-layer move that keeps the step time (the connected set of optimal cuts around it)
and answers the one of least peak memory (the class's second key, ``cutsolver.better``), then the lexicographically
least layer counts. Two searches that prove the same optimum inside one such set answer the same cut. Only the plans answered are
walked (``canonical_plans``), not every class solved.
"""

from __future__ import annotations

from dataclasses import replace

from planner.compose.cost import Candidate, ClassCosts, Evaluation, evaluate
from planner.search.cutsolver import ClassResult, Status
from planner.search.space import plan_key

#: Simulation steps the walk may spend (each evaluation simulates ~2·m·C operations): past it, the least cut among
#: those walked so far (deterministic, not canonical). The same budget as a lazy round's neighbours. A class whose
#: budget does not cover the 2(C − 1) moves of its cut is not walked (deep pipelines: PP16 at m = 120 on, whose
#: sets hold thousands of cuts; walking a few cost 0.1–0.25 s on the large family and settled nothing).
TIE_BUDGET = 100_000


def canonical(cc: ClassCosts, cut: list[int], ev: Evaluation) -> tuple[list[int], Evaluation]:
    """The least (peak memory, layer counts) cut among those of step time ``ev.objective_ns`` reachable from ``cut``
    by one-layer moves between adjacent chunks through fitting cuts of that step time. ``cut`` must be optimal."""
    C = cc.chunks
    evaluations = TIE_BUDGET // max(1, 2 * cc.m * C)
    if evaluations < 2 * (C - 1):  # not even the cut's own moves: a deep pipeline's set of thousands, left as found
        return cut, ev
    seen: dict[tuple[int, ...], Evaluation] = {tuple(cut): ev}
    ties = [tuple(cut)]
    todo = [tuple(cut)]
    while todo and evaluations > 0:
        x = todo.pop()
        for b in range(C - 1):
            for a, z in ((b, b + 1), (b + 1, b)):
                if x[a] == 1 or evaluations <= 0:
                    continue
                nb = list(x)
                nb[a] -= 1
                nb[z] += 1
                key = tuple(nb)
                if key in seen:
                    continue
                evaluations -= 1
                seen[key] = nev = evaluate(cc, nb)
                if nev.fits and nev.objective_ns == ev.objective_ns:
                    ties.append(key)
                    todo.append(key)
    best = min(ties, key=lambda t: (seen[t].peak_memory_bytes, t))
    return list(best), seen[best]


def canonical_plans(
    found: list[ClassResult], solved: dict[Candidate, tuple[ClassCosts, ClassResult]]
) -> list[ClassResult]:
    """The plans ``found`` (best first) with each proven cut that CP-SAT chose among free cuts (a result of
    ``solved``, a class's costs and its ``solve_class`` result) replaced by its ``canonical`` tie, re-ranked."""
    out = []
    for r in found:
        cc, res = solved.get(r.cand, (None, None))
        if cc is not None and r is res and r.iterations and r.status == Status.OPTIMAL and r.evaluation is not None:
            assert r.stage_layers is not None  # an OPTIMAL solve has its cut
            cut, ev = canonical(cc, r.stage_layers, r.evaluation)
            r = replace(r, stage_layers=cut, evaluation=ev)
        out.append(r)
    return sorted(out, key=lambda r: plan_key(r.evaluation, r.cand))  # type: ignore[arg-type]
