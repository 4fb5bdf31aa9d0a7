"""The starting cuts of a class's solve (``cutsolver.solve_class``): a balanced greedy cut within memory
(``greedy_cut``, also the expert seeds' and the time limit's fallback cut) and a hill-climb over one-layer moves scored
by the simulation (``local_search``), which returns the critical paths of every cut it simulated (valid chains)."""

from __future__ import annotations

import heapq
import time
from collections import Counter
from collections.abc import Iterable

from planner.compose.cost import ClassCosts, Evaluation, evaluate
from planner.compose.memory import rank_memory
from planner.search.chains import Counts, path_counts


def critical_counts(cc: ClassCosts, ev: Evaluation) -> Counts:
    """The simulation's critical path as operation counts (``chains.path_counts``): valid for every
    class with the same dependency graph (``chains.dag_key``)."""
    return path_counts(cc.chunks, ev.sim.critical_path, ev.sim.critical_lags)


def greedy_cut(cc: ClassCosts, caps: list[int] | None = None, weights: list[float] | None = None) -> list[int]:
    """A balanced cut: add layers one by one to the chunk whose F+B stays smallest (memory permitting; ``caps``: at
    most that many layers a chunk, where the rest can take them; ``weights``: each chunk's F+B counted that many times,
    so a heavier chunk takes fewer layers)."""
    C, L = cc.chunks, cc.num_layers
    n = [1] * C
    w = weights or [1.0] * C
    heap = [((2 * (cc.f_layer + cc.b_layer) + cc.f_extra[c] + cc.b_extra[c]) * w[c], c) for c in range(C)]
    heapq.heapify(heap)
    left = L - C
    blocked: list[tuple[float, int]] = []
    while left > 0 and heap:
        t, c = heapq.heappop(heap)
        n[c] += 1
        if (caps is not None and n[c] > caps[c]) or rank_memory(cc, n, cc.chunk_rank[c]) > cc.usable_bytes:
            n[c] -= 1
            blocked.append((t, c))
            continue
        left -= 1
        heapq.heappush(heap, (t + (cc.f_layer + cc.b_layer) * w[c], c))
    if left > 0:  # memory could not take them: place the rest evenly anyway (infeasible hint)
        for _t, c in sorted(blocked):
            if left == 0:
                break
            n[c] += 1
            left -= 1
        i = 0
        while left > 0:
            n[i % C] += 1
            left -= 1
            i += 1
    return n


def first_round_cuts(cc: ClassCosts) -> list[list[int]]:
    """Greedy cuts (``greedy_cut``) whose first round of chunks (chunk c < pp, one a rank) holds at most k layers each,
    k = 1 … ⌈L/C⌉ — an interleaved class's cuts far from its balanced one. The first micro-batch crosses the first
    round's chunks of every rank before the last rank starts (the fill) and the last micro-batch's backward crosses
    them last (the drain), and warm-up keeps the most micro-batches in flight on them, so small first-round chunks
    shorten both bubbles and leave memory to the rest. The classes' exact optima look so: NeMo Llama 3 70B on 64 H100,
    TP4 PP4 v6, [1, 1, 1, 1, 3, …, 3, 4, 4, 5, 6, 5, 6, 6, 3] (``bench/verify_unproven.py``). Only the cuts that fit
    memory; none for a class of one round."""
    pp, C, L = cc.cand.pp, cc.chunks, cc.num_layers
    return _fitting(cc, (greedy_cut(cc, [k] * pp + [L] * (C - pp)) for k in range(1, -(-L // C) + 1) if C > pp))


#: The slopes α of ``ramp_cuts``: chunk 0 weighs 1.25–3 times the last.
RAMPS = (0.25, 0.5, 1.0, 2.0)


def ramp_cuts(cc: ClassCosts) -> list[list[int]]:
    """Greedy cuts (``greedy_cut``) with chunk c's F+B weighted 1 + α·(C − 1 − c)/(C − 1), α in ``RAMPS``: layers
    ramping up along the chunks, for an interleaved class (none for one round). The fill crosses the early chunks
    and the drain the early chunks' backwards last, while the steady state weighs every chunk alike, so a class's
    optimum leans late more often than not, gradually where ``first_round_cuts`` changes only the first round: NeMo
    Nemotron-4 340B on 128 H100, TP8 PP8 v4, and MLPerf v3.1 GPT-3 on 512 nodes, TP4 PP8 v5, answer 1.2 % and 1.6 %
    faster from one (docs/planner.md "Ramp cuts"). Only the cuts that fit memory."""
    C = cc.chunks
    return _fitting(
        cc, (greedy_cut(cc, weights=[1 + a * (C - 1 - c) / (C - 1) for c in range(C)]) for a in RAMPS if C > cc.cand.pp)
    )


def shaped_cuts(cc: ClassCosts) -> list[list[int]]:
    """The first-round and ramp cuts of a class (``first_round_cuts``, ``ramp_cuts``): ``uneven.polish``'s starts."""
    return first_round_cuts(cc) + ramp_cuts(cc)


def _fitting(cc: ClassCosts, cuts: Iterable[list[int]]) -> list[list[int]]:
    """The distinct ``cuts`` that fit every rank's memory, in order."""
    out: list[list[int]] = []
    for n in cuts:
        if n not in out and all(rank_memory(cc, n, r) <= cc.usable_bytes for r in range(cc.cand.pp)):
            out.append(n)
    return out


def local_search(
    cc: ClassCosts, start: list[int], max_evals: int = 60, deadline: float | None = None, guided: bool = False
) -> tuple[list[int], Evaluation, list[Counts]]:
    """Hill-climb over single-layer moves between chunks, scored by the exact objective (simulation);
    returns the best fitting cut found and the critical paths (as counts) of every simulated cut. Each climb takes
    the first move that improves, scanning sources and destinations in chunk order or, ``guided``, off the chunks
    the critical path of the best cut dwells on most onto those it dwells on least (NeMo Llama 2 7B, PP2 v6: from
    [1, 2, 3, …, 3, 2] the index scan spends 60 simulations before the move 11 → 1 that the guided one tries first,
    reaching the class's optimum, 4.006 → 3.997 s). The two end in different local optima (``uneven.polish``)."""
    cuts: dict[Counts, None] = {}

    def score(n: list[int]) -> tuple[int, Evaluation]:
        ev = evaluate(cc, n)
        cuts[critical_counts(cc, ev)] = None
        return (ev.objective_ns if ev.fits else ev.objective_ns + (1 << 50)), ev

    best_n = list(start)
    best_s, best_ev = score(best_n)
    evals = 1
    max_evals = min(max_evals, max(1, 200_000 // (2 * cc.m * cc.chunks)))  # ~0.5 s of simulation at most
    improved = True
    while improved and evals < max_evals:
        improved = False
        order = list(range(cc.chunks))
        if guided:  # the moves off the chunks the critical path dwells on most, onto those it dwells on least
            dwell = Counter(on for _k, _j, on in best_ev.sim.critical_path)
            order.sort(key=lambda c: -dwell[c])
        for a in order:
            for b in reversed(order) if guided else order:
                if a == b or best_n[a] <= 1:
                    continue
                if deadline is not None and time.perf_counter() >= deadline:
                    return best_n, best_ev, list(cuts)
                n = list(best_n)
                n[a] -= 1
                n[b] += 1
                sc, ev = score(n)
                evals += 1
                if sc < best_s:
                    best_n, best_s, best_ev, improved = n, sc, ev, True
                    break
            if improved or evals >= max_evals:
                break
    return best_n, best_ev, list(cuts)


def climbs(
    cc: ClassCosts, starts: tuple[list[int], ...], max_evals: int = 60, deadline: float | None = None
) -> tuple[list[int], Evaluation, list[Counts]]:
    """``local_search`` twice from the best of ``starts`` (fitting first, then step time and peak memory), in chunk
    order and guided by the critical path (each ends in local optima the other misses: ``uneven.polish``): the better
    cut (the chunk-order climb's on a tie), its evaluation, and the critical paths of both climbs."""

    start, _ = best_of(cc, starts)
    runs = [local_search(cc, list(start), max_evals, deadline, guided) for guided in (False, True)]
    cut, ev, _ = min(runs, key=lambda r: rank(r[1]))
    return cut, ev, list(dict.fromkeys(runs[0][2] + runs[1][2]))


def rank(ev: Evaluation) -> tuple:
    """How cuts of one class rank: a cut that fits first, then step time, then peak memory."""
    return not ev.fits, ev.objective_ns, ev.peak_memory_bytes


def best_of(cc: ClassCosts, cuts: tuple[list[int], ...]) -> tuple[list[int], Evaluation]:
    """The first of ``cuts`` ranked best (``rank``), with its evaluation: each distinct cut simulated once."""
    evs: dict[tuple[int, ...], Evaluation] = {}
    for n in cuts:
        if tuple(n) not in evs:
            evs[tuple(n)] = evaluate(cc, n)
    n = min(cuts, key=lambda n: rank(evs[tuple(n)]))
    return n, evs[tuple(n)]
