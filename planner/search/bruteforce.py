"""A slow, exact reference: every configuration class and every stage cut it allows (all of them, but
the pinned ``stage_layers`` or the even split of a stack that runs no other: ``space.forced_cut``), scored by the simulation, and ranked by the search's own order
(``space.plan_key``: step time, then peak memory, then the simpler configuration).

Used by the tests to check that the CP-SAT search returns the same optimum on small instances.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from planner.compose.cost import Candidate, Context, Evaluation, class_costs, evaluate
from planner.search.space import PlanKey, enumerate_candidates, forced_cut, plan_key
from planner.specs import ParallelPins, SearchOptions


class Scored(NamedTuple):
    objective_ns: int
    cand: Candidate
    stage_layers: list[int]
    evaluation: Evaluation

    @property
    def key(self) -> PlanKey:
        return plan_key(self.evaluation, self.cand)


def compositions(total: int, parts: int) -> Iterator[list[int]]:
    """Every way to write ``total`` as ``parts`` positive integers, in order."""
    if parts == 1:
        yield [total]
        return
    for first in range(1, total - parts + 2):
        for rest in compositions(total - first, parts - 1):
            yield [first, *rest]


def brute_force(ctx: Context, pins: ParallelPins, options: SearchOptions | None = None) -> tuple[list[Scored], int]:
    """The best fitting configuration of every class (by ``plan_key``), best first; and the number
    of configurations scored."""
    options = options or SearchOptions()
    best: list[Scored] = []
    scored = 0
    for cand in enumerate_candidates(ctx, pins, options):
        cc = class_costs(ctx, cand)
        fixed = forced_cut(ctx, pins, cand)  # pinned stage_layers, or an even-only stack's split
        cuts = [fixed] if fixed is not None else compositions(cc.num_layers, cc.chunks)
        top: Scored | None = None
        for n in cuts:
            if len(n) != cc.chunks or min(n) < 1:
                continue
            scored += 1
            ev = evaluate(cc, n)
            if ev.fits and (top is None or plan_key(ev, cand) < top.key):
                top = Scored(ev.objective_ns, cand, n, ev)
        if top is not None:
            best.append(top)
    best.sort(key=lambda t: t.key)
    return best, scored
