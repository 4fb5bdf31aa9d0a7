"""A small class's stage cut solved exactly: branch and bound on the LP relaxation of its whole schedule graph
(``schedule_mip.schedule_model`` in GLOP), for the graphs of a few hundred operations that ``uneven.settle`` meets
(issue 26).

The relaxation lets layer counts be real. It is a valid lower bound over every fitting cut (each is one of its
solutions) and, where a rank holds a few chunks, far tighter than the chain bounds (``interleaved.interleaved_bound``),
which see no memory-forced imbalance: torchtitan's Llama 3.1 8B on 128 H100 (2024-12, FP8), TP1 PP2 v5, bound 1.961 s
there and 1.984 s here against an answer of 1.975 s. Where its optimum splits a layer, the node is branched on the
first fractional sum of ``aggregates`` (each rank's layers, then each prefix of chunks, then each chunk: the coarse
choices first), both sides re-solved, best bound first. A node whose relaxed cut is whole is the class's optimum
(the model at a fixed cut is the simulated step: ``tests/test_schedule_mip.py``). Each node's cut, rounded whole and
simulated, is an incumbent when it fits and beats the target: nodes whose bound reaches the incumbent close (Megatron-
Bridge 25.09's Qwen3 30B-A3B: 84 → 38 LPs for the same optimum), and a node that only ties the target closes too (a
cut must beat the answer to count, as ``uneven.prove``'s cutoff: torchtitan's 2024-12 8B compiled row, 59 → 35 LPs to
settle a class holding a cut of the answer's own step). GLOP is deterministic, and the nodes are counted, not timed:
the same answer on every machine and load.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass

from ortools.linear_solver import pywraplp

from planner.compose.cost import ClassCosts, evaluate
from planner.search.schedule_mip import MS, schedule_model

#: What a node's bound takes off GLOP's optimum for its tolerances (1e-6 ms relative to a step of seconds: ~ns), as
#: ``uneven.PROVE_SLACK_NS`` does off SCIP's.
SLACK_NS = 1_000
#: A relaxed layer count within this of an integer counts as whole.
WHOLE = 1e-6


@dataclass(frozen=True)
class GraphBound:
    #: a valid lower bound of every fitting cut's step (ns); ≥ ``target`` when no cut beats it (``1 << 62``: none fits)
    bound: int
    #: the class's optimal cut when one under ``target`` was found (then ``bound`` is its step less ``SLACK_NS``)
    cut: list[int] | None
    #: LPs solved
    nodes: int


def aggregates(cc: ClassCosts) -> list[list[int]]:
    """The chunk sets whose layer sums a node branches on, coarse first: each rank's chunks, each prefix of chunks,
    each chunk (every cut's sums are whole, and whole chunks make a whole cut)."""
    C, p = cc.chunks, cc.cand.pp
    ranks = [[ch for ch in range(C) if ch % p == r] for r in range(p)] if p > 1 else []
    return ranks + [list(range(k)) for k in range(1, C)] + [[ch] for ch in range(C)]


def graph_bound(cc: ClassCosts, target: int, max_nodes: int, deadline: float = math.inf) -> GraphBound | None:
    """Is a cut of the class faster than ``target`` (ns)? Best-first branch and bound over the relaxation, at most
    ``max_nodes`` LPs. Stops when the lowest open bound reaches ``target`` (none is: ``bound`` ≥ ``target``), when the
    lowest open node's cut is whole or its bound reaches the incumbent (the class's optimum, under ``target``:
    ``cut``), or at ``max_nodes`` or the ``deadline`` (``time.perf_counter()``; the request's time limit) with the
    lowest open bound, still valid. None: a model not written (a mixture of dense and MoE blocks) or an LP GLOP left
    unsolved."""
    if cc.moe_prefix is not None:
        return None
    solver, n = schedule_model(cc, integer=False)
    sums = []
    for g in aggregates(cc):
        a = solver.NumVar(-solver.infinity(), solver.infinity(), "")
        solver.Add(a == sum(n[ch] for ch in g))
        sums.append(a)
    free = (1.0, float(cc.num_layers))
    nodes = 0

    def relax(box: tuple[tuple[float, float], ...]) -> tuple[float, list[float]] | None:
        """The node's LP optimum (ns) and its sums; inf: infeasible; None: unsolved."""
        nonlocal nodes
        nodes += 1
        for a, (lo, hi) in zip(sums, box):
            a.SetBounds(lo, hi)
        st = solver.Solve()
        if st == pywraplp.Solver.INFEASIBLE:
            return math.inf, []
        if st != pywraplp.Solver.OPTIMAL:
            return None
        return solver.Objective().Value() / MS - SLACK_NS, [a.solution_value() for a in sums]

    def rounded(x: list[float]) -> tuple[int, list[int]] | None:
        """The node's relaxed cut made whole (each chunk's floor, the layers left to the largest remainders) and its
        step (ns), when that cut fits: a candidate incumbent."""
        chunks = x[-cc.chunks :]
        cut = [max(1, math.floor(v + WHOLE)) for v in chunks]
        for ch in sorted(range(cc.chunks), key=lambda ch: (cut[ch] - chunks[ch], ch))[: cc.num_layers - sum(cut)]:
            cut[ch] += 1
        if sum(cut) != cc.num_layers:
            return None
        ev = evaluate(cc, cut)
        return (ev.objective_ns, cut) if ev.fits else None

    root = relax((free,) * len(sums))
    if root is None:
        return None
    best: tuple[int, list[int]] | None = None  # the fastest whole fitting cut met that beats ``target``

    def ceiling() -> int:
        """What a cut must beat: the incumbent's step, else ``target``. A node whose relaxed step is at least it
        (its bound at least it less ``SLACK_NS``) is closed: a tie with the answer settles a class."""
        return best[0] if best is not None else target

    def offer(x: list[float]) -> None:
        nonlocal best
        got = rounded(x) if x else None  # an infeasible node has none
        if got is not None and got[0] < ceiling():
            best = got

    def closed(value: float) -> GraphBound:
        """No open node beats the ceiling: the incumbent is the class's optimum, else no cut beats ``target``
        (``1 << 62``: none fits at all)."""
        if best is not None:
            return GraphBound(best[0] - SLACK_NS, best[1], nodes)
        return GraphBound(1 << 62 if value == math.inf else max(target, int(value)), None, nodes)

    offer(root[1])
    heap = [(root[0], 0, (free,) * len(sums), root[1])]
    count = 1
    while heap:
        value, _, box, x = heapq.heappop(heap)
        k = next((i for i, v in enumerate(x) if abs(v - round(v)) > WHOLE), None)
        if k is None and value < ceiling() - SLACK_NS:  # a whole cut, the lowest open bound: the class's optimum
            cut = [round(v) for v in x[-cc.chunks :]]
            if evaluate(cc, cut).objective_ns < ceiling():
                return GraphBound(int(value), cut, nodes)
            # else it ties the ceiling (GLOP a few ns under the step): no cut beats it
        if k is None or value >= ceiling() - SLACK_NS:  # no cut beats the ceiling (to GLOP's tolerance)
            return closed(value)
        if nodes + 2 > max_nodes or time.perf_counter() >= deadline:
            return GraphBound(int(value), None, nodes)
        for side in ((box[k][0], math.floor(x[k])), (math.ceil(x[k]), box[k][1])):
            child = box[:k] + (side,) + box[k + 1 :]
            got = relax(child)
            if got is None:
                return GraphBound(int(value), None, nodes)
            if got[0] < ceiling() - SLACK_NS:
                offer(got[1])
                count += 1
                heapq.heappush(heap, (got[0], count, child, got[1]))
    return closed(target)
