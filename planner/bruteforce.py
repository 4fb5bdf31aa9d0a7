"""A slow, exact reference: every configuration class and every stage cut it allows (all of them, but
the pinned ``stage_layers`` or, for interleaved 1F1B with the schedule unpinned, Megatron-LM's uniform
split: ``search.forced_cut``), scored by the simulation.

Used by the tests to check that the CP-SAT search returns the same optimum on small instances.
"""

from __future__ import annotations

from collections.abc import Iterator

from planner.cost import Candidate, Context, class_costs, evaluate
from planner.search import enumerate_candidates, forced_cut
from planner.specs import ParallelPins, SearchOptions


def compositions(total: int, parts: int) -> Iterator[list[int]]:
    """Every way to write ``total`` as ``parts`` positive integers, in order."""
    if parts == 1:
        yield [total]
        return
    for first in range(1, total - parts + 2):
        for rest in compositions(total - first, parts - 1):
            yield [first, *rest]


def brute_force(ctx: Context, pins: ParallelPins, options: SearchOptions | None = None) -> tuple[list[tuple[int, Candidate, list[int]]], int]:
    """Best fitting (objective ns, class, cut) per class, best first; and the configurations scored."""
    options = options or SearchOptions()
    best: list[tuple[int, Candidate, list[int]]] = []
    scored = 0
    for cand in enumerate_candidates(ctx, pins, options):
        cc = class_costs(ctx, cand)
        fixed = forced_cut(ctx, pins, cand)  # pinned stage_layers, or interleaved's uniform split when unpinned
        cuts = [fixed] if fixed is not None else compositions(cc.num_layers, cc.chunks)
        top: tuple[int, Candidate, list[int]] | None = None
        for n in cuts:
            if len(n) != cc.chunks or min(n) < 1:
                continue
            scored += 1
            ev = evaluate(cc, n)
            if ev.fits and (top is None or ev.objective_ns < top[0]):
                top = (ev.objective_ns, cand, n)
        if top is not None:
            best.append(top)
    best.sort(key=lambda t: t[0])
    return best, scored
