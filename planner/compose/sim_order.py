"""The execution order of a schedule shape not simulated before (``simulate._run``'s ``_ORDERS``): the ranks'
operation orders visited in sweeps up and down the ranks, each rank running until it waits for data (an operation
whose data dependency has not run yet). The order depends on the schedule only, not on durations, so it is found
without times — one pass of "has its dependency run" checks — and the times come from ``_run``'s replay of it
(the same rule on the same order: the same ends, bindings and timeline as simulating while sweeping).

Op ids as in ``simulate``: op id = ((kind·m) + j)·chunks + c, kind 0 = F, 1 = B."""

from __future__ import annotations

from typing import NamedTuple


class Order(NamedTuple):
    """A shape's operations in execution order (``ops``) with, aligned, each one's previous operation on its rank
    (``prev``, -1: none), its data dependency (``dep``, -1: none) and its (kind, chunk) key kind·chunks + c
    (``key``): what the replay reads; the same by op id (``*_of``, and the boundary whose lag its data crosses,
    ``bnd_of``, -1: none, and its rank, ``rank_of``): what a critical path's bindings and the timeline read; and
    each rank's last op (-1: none)."""

    ops: list[int]
    prev: list[int]
    dep: list[int]
    key: list[int]
    prev_of: list[int]
    dep_of: list[int]
    key_of: list[int]
    bnd_of: list[int]
    rank_of: list[int]
    last: tuple[int, ...]


def coded_orders(schedule: str, pp: int, v: int, m: int) -> list[list[int]]:
    """Every rank's operation order (``simulate.rank_orders``) as op ids; interleaved 1F1B built from its formula
    directly (``rank_orders``' ``fwd``/``bwd``: the k-th forward of rank i is micro-batch (k // pp·v)·pp + k % pp on
    chunk ((k // pp) % v)·pp + i, its k-th backward the same micro-batch on chunk (v − 1 − (k // pp) % v)·pp + i)."""
    chunks = pp * v
    if schedule != "interleaved-1f1b" or m % pp:
        from planner.compose.simulate import rank_orders  # noqa: PLC0415 (simulate imports this module)

        return [
            [((0 if k == "F" else 1) * m + j) * chunks + c for k, j, c in order]
            for order in rank_orders(schedule, pp, v, m)
        ]
    total, pv, mc = m * v, pp * v, m * chunks
    # rank 0's op ids; rank i's are these + i (its chunks are rank 0's + i)
    fb = [((k // pv) * pp + k % pp) * chunks + ((k // pp) % v) * pp for k in range(total)]
    bb = [mc + ((k // pv) * pp + k % pp) * chunks + (v - 1 - (k // pp) % v) * pp for k in range(total)]
    out = []
    for i in range(pp):
        warm = total if m == pp else min(2 * (pp - i - 1) + (v - 1) * pp, total)
        f = [x + i for x in fb]
        b = [x + i for x in bb]
        mid = [0] * (2 * (total - warm))
        mid[0::2] = f[warm:]
        mid[1::2] = b[: total - warm]
        out.append(f[:warm] + mid + b[total - warm :])
    return out


def first_order(shape: tuple[str, int, int, int]) -> Order:
    """Shape (schedule, pp, v, m)'s operations in the order the sweeps run them (``Order``)."""
    schedule, pp, v, m = shape
    chunks = pp * v
    mc = m * chunks
    coded = coded_orders(schedule, pp, v, m)
    n_ops = 2 * mc
    # per op id: its data dependency (-1: none), the boundary its lag crosses, its (kind, chunk) key
    cs = list(range(chunks))
    f_dep = [-1] + [c - 1 for c in cs[1:]]
    b_dep = [c + 1 for c in cs[:-1]] + [-1]
    dep: list[int] = []
    for j in range(m):
        base = j * chunks
        dep += [base + d if d >= 0 else -1 for d in f_dep]
    for j in range(m):
        base = mc + j * chunks
        dep += [base + d if d >= 0 else base - mc + chunks - 1 for d in b_dep]
    f_bnd = [c - 1 for c in cs]
    b_bnd = [c if c < chunks - 1 else -1 for c in cs]
    bnd = f_bnd * m + b_bnd * m
    key = cs * m + [chunks + c for c in cs] * m
    done = bytearray(n_ops)
    pos = [0] * pp
    order: list[int] = []
    rank_of = [0] * n_ops
    prev_of = [-1] * n_ops
    for r, ops in enumerate(coded):
        for p_, op in enumerate(ops):
            rank_of[op] = r
            if p_:
                prev_of[op] = ops[p_ - 1]
    up, down = range(pp), range(pp - 1, -1, -1)
    sweep = 0
    while len(order) < n_ops:
        progressed = False
        sweep += 1
        for r in up if sweep % 2 else down:  # forwards flow up the ranks, backwards down: sweep both ways
            ops = coded[r]
            p0 = p_ = pos[r]
            n = len(ops)
            while p_ < n:
                op = ops[p_]
                d = dep[op]
                if d >= 0 and not done[d]:
                    break  # its data is not there yet: the next rank
                done[op] = 1
                p_ += 1
            if p_ > p0:
                order += ops[p0:p_]
                pos[r] = p_
                progressed = True
        if not progressed:
            raise RuntimeError(f"schedule {schedule!r} deadlocked (pp={pp}, v={v}, m={m})")
    return Order(
        order,
        [prev_of[op] for op in order],
        [dep[op] for op in order],
        [key[op] for op in order],
        prev_of,
        dep,
        key,
        bnd,
        rank_of,
        tuple(ops[-1] if ops else -1 for ops in coded),
    )
