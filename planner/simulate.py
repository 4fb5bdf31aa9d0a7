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
from functools import lru_cache

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


@lru_cache(maxsize=256)
def _coded_orders(schedule: str, pp: int, v: int, m: int) -> tuple[tuple[int, ...], ...]:
    chunks = pp * v
    return tuple(
        tuple(((0 if k == "F" else 1) * m + j) * chunks + c for k, j, c in order)
        for order in rank_orders(schedule, pp, v, m)
    )


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


def simulate(
    schedule: str,
    pp: int,
    v: int,
    m: int,
    fwd: list[int],
    bwd: list[int],
    lag: list[int] | None = None,
    record: bool = True,
) -> SimResult:
    """Simulate one step. ``fwd``/``bwd``: duration of one micro-batch on each chunk (``pp*v``
    entries); ``lag``: p2p delay of each chunk boundary (``pp*v - 1`` entries, default 0).
    ``record=False`` skips the per-operation timeline (the critical path is always kept)."""
    chunks = pp * v
    if len(fwd) != chunks or len(bwd) != chunks:
        raise ValueError("fwd and bwd need one duration per chunk")
    lag = list(lag) if lag is not None else [0] * (chunks - 1)
    where = chunk_ranks(pp, v)
    # Operation id: ((kind * m) + j) * chunks + c, kind 0 = F, 1 = B.
    n_ops = 2 * m * chunks
    end = [-1] * n_ops
    pred = [-1] * n_ops  # binding predecessor id
    pred_lag = [-1] * n_ops  # boundary whose lag the binding edge carries
    fwd_gap = [lag[c - 1] if c > 0 and where[c - 1] != where[c] else -1 for c in range(chunks)]
    bwd_gap = [lag[c] if c < chunks - 1 and where[c + 1] != where[c] else -1 for c in range(chunks)]
    coded = _coded_orders(schedule, pp, v, m)
    pos = [0] * pp
    free = [0] * pp
    last = [-1] * pp
    out: list[tuple[int, str, int, int, int, int]] = []
    remaining = n_ops
    mc = m * chunks
    while remaining:
        progressed = False
        for r in range(pp):
            ops = coded[r]
            p_ = pos[r]
            while p_ < len(ops):
                op = ops[p_]
                c = op % chunks
                if op < mc:  # forward
                    if c > 0:
                        dep = op - 1
                        gap = fwd_gap[c]
                        boundary = c - 1
                    else:
                        dep, gap, boundary = -1, -1, -1
                    dur = fwd[c]
                else:
                    if c < chunks - 1:
                        dep = op + 1
                        gap = bwd_gap[c]
                        boundary = c
                    else:
                        dep, gap, boundary = op - mc, -1, -1
                    dur = bwd[c]
                if dep >= 0:
                    if end[dep] < 0:
                        break
                    ready = end[dep] + (gap if gap > 0 else 0)
                else:
                    ready = 0
                start = free[r]
                if dep >= 0 and ready >= start:
                    start = ready
                    pred[op] = dep
                    pred_lag[op] = boundary if gap >= 0 else -1
                else:
                    pred[op] = last[r]
                finish = start + dur
                end[op] = free[r] = finish
                last[r] = op
                if record:
                    out.append((r, "F" if op < mc else "B", (op % mc) // chunks, c, start, finish))
                p_ += 1
                remaining -= 1
                progressed = True
            pos[r] = p_
        if not progressed:
            raise RuntimeError(f"schedule {schedule!r} deadlocked (pp={pp}, v={v}, m={m})")
    makespan = max(free)
    node = end.index(max(end))
    path: list[Op] = []
    lags: list[int] = []
    while node >= 0:
        path.append(("F" if node < mc else "B", (node % mc) // chunks, node % chunks))
        if pred_lag[node] >= 0:
            lags.append(pred_lag[node])
        node = pred[node]
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
