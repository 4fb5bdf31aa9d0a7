"""The execution order of a schedule shape not simulated before (``simulate._run``'s ``_ORDERS``). ``simulate._run``'s
replay computes each operation's end from its rank's previous operation and its data dependency alone, so any order
that puts every operation after those two (a topological order) gives the same ends, bindings and critical path; the
order depends on the schedule only, not on durations, so it is found without times. Two orders:

* ``first_order``: the ranks' operation orders visited in sweeps up and down the ranks, each rank running until it
  waits for data (an operation whose data dependency has not run yet) — one pass of "has its dependency run" checks.
  The timeline (``record``) lists the operations in this order.
* ``fast_order``: by position in the rank's order, forwards by rank upward, then backwards by rank downward — numpy,
  no per-operation Python (``rank_grid``); checked on every edge, the sweeps' order where the check fails. The
  replays without a timeline use it.

Op ids as in ``simulate``: op id = ((kind·m) + j)·chunks + c, kind 0 = F, 1 = B; its data dependency, the boundary
its lag crosses and its (kind, chunk) key follow from the id (``op_links``), its rank is c mod pp."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from planner.compose.pp_order import interleaved_warmup


class Order(NamedTuple):
    """A shape's operations in execution order (``ops``) with, aligned, each one's previous operation on its rank
    (``prev``, -1: none), its data dependency (``dep``, -1: none) and its (kind, chunk) key kind·chunks + c
    (``key``): what the replay reads; each op's previous operation by op id (``prev_of``): what a critical path's
    bindings read (its dependency, boundary and key: ``op_links``); and each rank's last op (-1: none)."""

    ops: list[int]
    prev: list[int]
    dep: list[int]
    key: list[int]
    prev_of: list[int]
    last: tuple[int, ...]


def op_links(op: int, m: int, chunks: int) -> tuple[int, int, int]:
    """(data dependency, boundary its lag crosses, (kind, chunk) key) of op id ``op``: F(j, c) needs F(j, c − 1)
    across boundary c − 1 (chunk 0: nothing), B(j, c) needs B(j, c + 1) across boundary c (the last chunk: its own
    F(j, c), no boundary)."""
    mc = m * chunks
    c = op % chunks
    if op < mc:
        return (op - 1, c - 1, c) if c else (-1, -1, 0)
    return (op + 1, c, chunks + c) if c < chunks - 1 else (op - mc, -1, chunks + c)


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
        warm = interleaved_warmup(pp, v, m, i, all_warmup=True)  # the time order keeps Megatron's (``pp_order``)
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
    # per op id: its data dependency (-1: none) and its (kind, chunk) key (``op_links``)
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
    key = cs * m + [chunks + c for c in cs] * m
    done = bytearray(n_ops)
    pos = [0] * pp
    order: list[int] = []
    prev_of = [-1] * n_ops
    for ops in coded:
        for p_ in range(1, len(ops)):
            prev_of[ops[p_]] = ops[p_ - 1]
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
        tuple(ops[-1] if ops else -1 for ops in coded),
    )


#: below this many operations a new shape's order is the sweeps' (``first_order``): numpy's fixed costs exceed them
FAST_FROM = 2048


def rank_grid(schedule: str, pp: int, v: int, m: int) -> np.ndarray:
    """``coded_orders`` as one (pp, 2·m·v) array: rank i runs its first ``warm`` forwards, then forwards and
    backwards alternately, then its remaining backwards — GPipe: warm = m; 1F1B: min(p − i − 1, m); interleaved
    1F1B: ``coded_orders``' formula (rank i's ops are rank 0's + i)."""
    chunks = pp * v
    mc = m * chunks
    if schedule == "interleaved-1f1b" and m % pp == 0:
        total = m * v
        k = np.arange(total)
        mb = (k // (pp * v)) * pp + k % pp
        f0 = mb * chunks + ((k // pp) % v) * pp
        b0 = mc + mb * chunks + (v - 1 - (k // pp) % v) * pp
        warm = [interleaved_warmup(pp, v, m, i, all_warmup=True) for i in range(pp)]
    elif schedule in ("gpipe", "1f1b") and v == 1:
        total = m
        f0 = np.arange(m) * chunks
        b0 = mc + f0
        warm = [m if schedule == "gpipe" else min(pp - i - 1, m) for i in range(pp)]
    else:
        return np.array(coded_orders(schedule, pp, v, m), dtype=np.int64).reshape(pp, 2 * m * v)
    grid = np.empty((pp, 2 * total), dtype=np.int64)
    for i, w in enumerate(warm):
        row = grid[i]
        row[:w] = f0[:w]
        row[w : 2 * total - w : 2] = f0[w:]
        row[w + 1 : 2 * total - w : 2] = b0[: total - w]
        row[2 * total - w :] = b0[total - w :]
        row += i
    return grid


def fast_order(shape: tuple[str, int, int, int]) -> Order:
    """Shape (schedule, pp, v, m)'s operations in a topological order from a formula: by position in the rank's
    order; at one position forwards by rank upward, then backwards by rank downward (a forward's data comes from
    the rank below, at that position or earlier; a backward's from the rank above). Every edge is checked (each op
    after its rank's previous op and its data dependency); where one fails, the sweeps' order (``first_order``).
    ``tests/test_sim_order.py`` checks the replay against the sweeping simulation."""
    schedule, pp, v, m = shape
    chunks = pp * v
    mc = m * chunks
    n_ops = 2 * mc
    if n_ops < FAST_FROM:
        return first_order(shape)
    grid = rank_grid(schedule, pp, v, m)
    ids = np.arange(n_ops)
    c = ids % chunks
    is_b = ids >= mc
    dep = np.where(is_b, np.where(c < chunks - 1, ids + 1, ids - mc), np.where(c > 0, ids - 1, -1))  # ``op_links``
    key = np.where(is_b, chunks + c, c)
    prev_of = np.full(n_ops, -1, dtype=np.int64)
    prev_of[grid[:, 1:]] = grid[:, :-1]
    ranks = np.arange(pp)[:, None]
    rows = np.argsort(np.where(grid >= mc, 2 * pp - 1 - ranks, ranks), axis=0, kind="stable")
    order = grid[rows, np.arange(grid.shape[1])].T.reshape(-1)
    prev, dep_ = prev_of[order], dep[order]
    if not topological(order, prev, dep_):
        return first_order(shape)
    return Order(
        order.tolist(), prev.tolist(), dep_.tolist(), key[order].tolist(), prev_of.tolist(), tuple(grid[:, -1].tolist())
    )


def topological(order: np.ndarray, prev: np.ndarray, dep: np.ndarray) -> bool:
    """Whether every op of ``order`` (all op ids 0 … n − 1 once) comes after its rank's previous op and its data
    dependency (``prev``, ``dep``: aligned with ``order``, -1: none)."""
    n = len(order)
    at = np.empty(n + 1, dtype=np.int64)  # each op's place in ``order``; at[-1] = -1: "none" comes first
    at[order] = np.arange(n)
    at[-1] = -1
    return bool((at[prev] < at[order]).all() and (at[dep] < at[order]).all())
