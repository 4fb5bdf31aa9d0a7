"""Event simulation of pipeline schedules over per-chunk forward/backward times.

Every schedule is a fixed *order* of operations per pipeline rank (``F``/``B`` of one micro-batch on
one model chunk). An operation starts when its rank is free and its data dependency has arrived:

* ``F(mb, c)`` needs ``F(mb, c-1)`` plus the point-to-point lag of boundary ``c-1 → c``;
* ``B(mb, c)`` needs ``B(mb, c+1)`` plus the lag of boundary ``c → c+1`` (the last chunk's backward
  needs its own forward).

Sends are asynchronous (a lag, not rank time). Times are integers (the planner uses nanoseconds) so
the simulation, the brute force and the CP-SAT model compute exactly the same numbers.

Orders follow the reference implementations: GPipe (all forwards, then all backwards), 1F1B
(PipeDream-Flush: rank i warms up with ``p-i-1`` forwards), interleaved 1F1B (Megatron-LM
``forward_backward_pipelining_with_interleaving``: warm-up ``2(p-i-1) + (v-1)p``, everything warm-up
when ``m == p``; needs ``m % p == 0``). Chunk ``c`` lives on rank ``c % p``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Op = tuple[str, int, int]  # (kind "F"/"B", micro-batch, chunk)


def chunk_ranks(pp: int, v: int) -> list[int]:
    return [c % pp for c in range(pp * v)]


def rank_orders(schedule: str, pp: int, v: int, m: int) -> list[list[Op]]:
    """The operation order of every pipeline rank."""
    if schedule == "gpipe":
        return [[("F", j, i) for j in range(m)] + [("B", j, i) for j in range(m)] for i in range(pp)]
    if schedule == "1f1b":
        orders = []
        for i in range(pp):
            warm = min(pp - i - 1, m)
            ops: list[Op] = [("F", j, i) for j in range(warm)]
            for k in range(m - warm):
                ops += [("F", warm + k, i), ("B", k, i)]
            ops += [("B", j, i) for j in range(m - warm, m)]
            orders.append(ops)
        return orders
    if schedule == "interleaved-1f1b":
        if m % pp:
            raise ValueError(f"interleaved 1F1B needs the number of micro-batches ({m}) divisible by pp ({pp})")
        total = m * v

        def fwd(i: int, k: int) -> Op:
            return ("F", (k // (pp * v)) * pp + k % pp, ((k // pp) % v) * pp + i)

        def bwd(i: int, k: int) -> Op:
            return ("B", (k // (pp * v)) * pp + k % pp, (v - 1 - (k // pp) % v) * pp + i)

        orders = []
        for i in range(pp):
            warm = total if m == pp else min(2 * (pp - i - 1) + (v - 1) * pp, total)
            ops = [fwd(i, k) for k in range(warm)]
            for k in range(total - warm):
                ops += [fwd(i, warm + k), bwd(i, k)]
            ops += [bwd(i, k) for k in range(total - warm, total)]
            orders.append(ops)
        return orders
    raise ValueError(f"schedule {schedule!r} is not simulated")


@dataclass
class SimResult:
    makespan: int
    #: (rank, kind, micro-batch, chunk, start, end) of every operation, in execution order per rank.
    ops: list[tuple[int, str, int, int, int, int]]
    rank_finish: list[int]
    #: Operations on one critical (longest) path, first to last.
    critical_path: list[Op] = field(default_factory=list)
    #: Boundaries (index c = c → c+1) crossed by the critical path, with multiplicity.
    critical_lags: list[int] = field(default_factory=list)


def simulate(schedule: str, pp: int, v: int, m: int, fwd: list[int], bwd: list[int], lag: list[int] | None = None) -> SimResult:
    """Simulate one step. ``fwd``/``bwd``: duration of one micro-batch on each chunk (``pp*v``
    entries); ``lag``: p2p delay of each chunk boundary (``pp*v - 1`` entries, default 0)."""
    chunks = pp * v
    if len(fwd) != chunks or len(bwd) != chunks:
        raise ValueError("fwd and bwd need one duration per chunk")
    lag = list(lag) if lag is not None else [0] * (chunks - 1)
    where = chunk_ranks(pp, v)
    orders = rank_orders(schedule, pp, v, m)
    end: dict[Op, int] = {}
    pred: dict[Op, tuple[Op | None, int | None]] = {}  # binding predecessor, boundary of its lag
    pos = [0] * pp
    free = [0] * pp
    last: list[Op | None] = [None] * pp
    out: list[tuple[int, str, int, int, int, int]] = []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for r in range(pp):
            while pos[r] < len(orders[r]):
                op = orders[r][pos[r]]
                kind, j, c = op
                boundary = None
                if kind == "F":
                    dep = ("F", j, c - 1) if c > 0 else None
                    if c > 0 and where[c - 1] != where[c]:
                        boundary = c - 1
                else:
                    dep = ("B", j, c + 1) if c < chunks - 1 else ("F", j, c)
                    if c < chunks - 1 and where[c + 1] != where[c]:
                        boundary = c
                if dep is not None and dep not in end:
                    break
                gap = lag[boundary] if boundary is not None else 0
                ready = end[dep] + gap if dep is not None else 0
                start = max(free[r], ready)
                if dep is not None and ready >= free[r]:
                    pred[op] = (dep, boundary)
                else:
                    pred[op] = (last[r], None)
                finish = start + (fwd[c] if kind == "F" else bwd[c])
                end[op] = free[r] = finish
                last[r] = op
                out.append((r, kind, j, c, start, finish))
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError(f"schedule {schedule!r} deadlocked (pp={pp}, v={v}, m={m})")
    makespan = max(free)
    # Walk back one critical path from the operation that ends last.
    node: Op | None = max(end, key=lambda o: end[o])
    path: list[Op] = []
    lags: list[int] = []
    while node is not None:
        path.append(node)
        prev, boundary = pred[node]
        if boundary is not None:
            lags.append(boundary)
        node = prev
    path.reverse()
    return SimResult(makespan=makespan, ops=out, rank_finish=free, critical_path=path, critical_lags=lags)


def gpipe_makespan(fwd: list[int], bwd: list[int], lag: list[int], m: int) -> int:
    """GPipe's makespan in closed form: two flow shops of identical jobs,
    ``ΣF + ΣB + 2·Σlag + (m−1)·(max F + max B)`` (the tests check it against the simulation).
    1F1B has no such form once stages differ; the search uses critical-path cuts instead."""
    return sum(fwd) + sum(bwd) + 2 * sum(lag) + (m - 1) * (max(fwd) + max(bwd))


def path_length(path: list[Op], lags: list[int], fwd: list[int], bwd: list[int], lag: list[int]) -> int:
    """Length of a chain of operations (with the lags it crosses): a lower bound of the makespan."""
    return sum(fwd[c] if k == "F" else bwd[c] for k, _, c in path) + sum(lag[b] for b in lags)
