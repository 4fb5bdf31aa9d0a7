"""``sim_order.first_order`` and ``sim_order.fast_order`` (a new shape's execution order, found without times, then
replayed by ``simulate._run``) against the simulation that sweeps the ranks while timing them (the planner's earlier
``_first_run``, kept here as the reference): the sweeps' order step for step, and from either order the same ends,
binding predecessors, rank finishes, timeline and critical path, on a table of schedule shapes — small and large m,
m == pp, v up to 4 — with uneven per-chunk times and lags."""

from __future__ import annotations

import random

import numpy as np
import pytest

from planner.compose import sim_order
from planner.compose import simulate as sim
from planner.compose.sim_order import coded_orders, fast_order, first_order, op_links, rank_grid, topological


def sweep_reference(schedule, pp, v, m, fwd, bwd, lag):
    """Sweep the ranks' orders (``simulate.rank_orders``) up and down, each rank running while its data is there,
    timing each operation as it runs: (steps, last, end, pred, pred_lag, timeline)."""
    chunks = pp * v
    mc = m * chunks
    where = sim.chunk_ranks(pp, v)
    dur = list(fwd) + list(bwd)
    gap = [lag[c - 1] if c > 0 and where[c - 1] != where[c] else -1 for c in range(chunks)]
    gap += [lag[c] if c < chunks - 1 and where[c + 1] != where[c] else -1 for c in range(chunks)]
    coded = [
        [((0 if k == "F" else 1) * m + j) * chunks + c for k, j, c in o] for o in sim.rank_orders(schedule, pp, v, m)
    ]
    end = [-1] * (2 * mc) + [0]
    pred, pred_lag = [-1] * (2 * mc), [-1] * (2 * mc)
    out, steps = [], []
    pos, last = [0] * pp, [-1] * pp
    sweep = 0
    while len(steps) < 2 * mc:
        sweep += 1
        progressed = False
        for r in range(pp) if sweep % 2 else range(pp - 1, -1, -1):
            ops, p_, prev = coded[r], pos[r], last[r]
            while p_ < len(ops):
                op = ops[p_]
                c = op % chunks
                if op < mc:
                    dep, boundary = (op - 1, c - 1) if c > 0 else (-1, -1)
                else:
                    dep, boundary = (op + 1, c) if c < chunks - 1 else (op - mc, -1)
                key = (op // mc) * chunks + c
                start = end[prev]
                if dep >= 0:
                    if end[dep] < 0:
                        break
                    g = gap[key]
                    ready = end[dep] + g if g > 0 else end[dep]
                    if ready >= start:
                        start, pred[op] = ready, dep
                        if g >= 0:
                            pred_lag[op] = boundary
                    else:
                        pred[op] = prev
                else:
                    pred[op] = prev
                end[op] = start + dur[key]
                out.append((r, "F" if op < mc else "B", (op % mc) // chunks, c, start, end[op]))
                steps.append((op, r, prev, dep, boundary, key))
                prev, p_ = op, p_ + 1
                progressed = True
            pos[r], last[r] = p_, prev
        assert progressed
    end.pop()
    return tuple(steps), tuple(last), end, pred, pred_lag, out


SHAPES = [
    ("gpipe", 1, 1, 1),
    ("gpipe", 4, 1, 6),
    ("1f1b", 1, 1, 3),
    ("1f1b", 2, 1, 1),
    ("1f1b", 4, 1, 3),
    ("1f1b", 4, 1, 16),
    ("1f1b", 8, 1, 40),
    ("interleaved-1f1b", 2, 2, 2),
    ("interleaved-1f1b", 2, 3, 4),
    ("interleaved-1f1b", 4, 2, 4),
    ("interleaved-1f1b", 4, 2, 8),
    ("interleaved-1f1b", 4, 3, 12),
    ("interleaved-1f1b", 4, 4, 32),
    ("interleaved-1f1b", 8, 2, 16),
    ("interleaved-1f1b", 8, 4, 64),
    ("interleaved-1f1b", 32, 2, 64),
    ("interleaved-1f1b", 32, 4, 256),
]


@pytest.mark.parametrize("schedule,pp,v,m", SHAPES)
def test_coded_orders_are_rank_orders(schedule, pp, v, m):
    chunks = pp * v
    want = [
        [((0 if k == "F" else 1) * m + j) * chunks + c for k, j, c in o] for o in sim.rank_orders(schedule, pp, v, m)
    ]
    assert coded_orders(schedule, pp, v, m) == want


@pytest.mark.parametrize("schedule,pp,v,m", SHAPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_first_order_replay_is_the_sweeping_simulation(schedule, pp, v, m, seed):
    rnd = random.Random(seed * 1000 + pp * 100 + v * 10 + m)
    chunks = pp * v
    fwd = [rnd.randint(1, 50) for _ in range(chunks)]  # uneven per-chunk (so per-rank) times
    bwd = [rnd.randint(1, 100) for _ in range(chunks)]
    lag = [rnd.choice([0, 0, 3, 17]) for _ in range(chunks - 1)]
    steps, last, end, pred, pred_lag, out = sweep_reference(schedule, pp, v, m, fwd, bwd, lag)
    o = first_order((schedule, pp, v, m))
    assert o.last == last
    assert list(zip(o.ops, o.prev, o.dep, o.key)) == [(op, prev, dep, key) for op, _, prev, dep, _, key in steps]
    for op, r, prev, dep, boundary, key in steps:  # the same by op id
        assert (o.prev_of[op], op_links(op, m, chunks), op % chunks % pp) == (prev, (dep, boundary, key), r)
    shape = (schedule, pp, v, m)
    sim._ORDERS.pop(shape + (True,), None)
    sim._ORDERS.pop(shape + (False,), None)
    for record in (True, False, True, False):  # a new shape, then replays
        res = sim.simulate(schedule, pp, v, m, fwd, bwd, lag, record=record)
        assert res.makespan == max(end)
        assert res.rank_finish == [end[op] if op >= 0 else 0 for op in last]
        assert res.ops == (out if record else [])
        path, lags = sim._backtrack(end.index(max(end)), m * chunks, chunks, pred, pred_lag)
        if not (not record and schedule == "1f1b" and m >= 2 * (pp + sim.probe_rounds(pp))):
            assert (res.critical_path, res.critical_lags) == (path, lags)


@pytest.mark.parametrize("schedule,pp,v,m", SHAPES + [("gpipe", 8, 1, 300), ("1f1b", 32, 1, 40), ("1f1b", 64, 1, 200)])
def test_rank_grid_is_coded_orders(schedule, pp, v, m):
    assert rank_grid(schedule, pp, v, m).tolist() == coded_orders(schedule, pp, v, m)


@pytest.mark.parametrize("schedule,pp,v,m", SHAPES + [("gpipe", 8, 1, 300), ("1f1b", 32, 1, 40), ("1f1b", 64, 1, 200)])
@pytest.mark.parametrize("seed", [0, 1])
def test_fast_order_replay_is_the_sweeping_simulation(schedule, pp, v, m, seed, monkeypatch):
    """The formula's order on every shape (``FAST_FROM`` 0: small ones too) is topological without falling back,
    holds the same ops, previous ops and last ops as the sweeps' order, and its replay (no timeline) gives the
    sweeping simulation's makespan, rank finishes and critical path."""
    sweeps = first_order((schedule, pp, v, m))
    monkeypatch.setattr(sim_order, "FAST_FROM", 0)
    monkeypatch.setattr(sim_order, "first_order", lambda shape: pytest.fail(f"{shape}: the formula's order failed"))
    rnd = random.Random(seed * 1000 + pp * 100 + v * 10 + m)
    chunks = pp * v
    fwd = [rnd.randint(1, 50) for _ in range(chunks)]
    bwd = [rnd.randint(1, 100) for _ in range(chunks)]
    lag = [rnd.choice([0, 0, 3, 17]) for _ in range(chunks - 1)]
    _, last, end, pred, pred_lag, _ = sweep_reference(schedule, pp, v, m, fwd, bwd, lag)
    o = fast_order((schedule, pp, v, m))
    assert sorted(o.ops) == list(range(2 * m * chunks))
    assert o.last == last
    assert o.prev_of == sweeps.prev_of
    assert list(o.prev) == [o.prev_of[op] for op in o.ops]
    assert list(zip(o.dep, o.key)) == [op_links(op, m, chunks)[::2] for op in o.ops]
    shape = (schedule, pp, v, m)
    sim._ORDERS.pop(shape + (False,), None)
    for _ in range(2):  # a new shape, then a replay
        res = sim.simulate(schedule, pp, v, m, fwd, bwd, lag, record=False)
        assert res.makespan == max(end)
        assert res.rank_finish == [end[op] if op >= 0 else 0 for op in last]
        if not (schedule == "1f1b" and m >= 2 * (pp + sim.probe_rounds(pp))):
            path, lags = sim._backtrack(end.index(max(end)), m * chunks, chunks, pred, pred_lag)
            assert (res.critical_path, res.critical_lags) == (path, lags)


def test_topological_check_and_fallback(monkeypatch):
    """``topological`` rejects an order with one op before its data (or its rank's previous op); ``fast_order``
    then returns the sweeps' order."""
    shape = ("interleaved-1f1b", 8, 4, 64)
    monkeypatch.setattr(sim_order, "FAST_FROM", 0)
    o = fast_order(shape)
    order, prev, dep = np.array(o.ops), np.array(o.prev), np.array(o.dep)
    assert topological(order, prev, dep)
    for i in (int(np.flatnonzero(dep >= 0)[0]), int(np.flatnonzero(prev >= 0)[5])):
        j = int(np.flatnonzero(order == (dep[i] if dep[i] >= 0 else prev[i]))[0])  # its predecessor, moved after it
        swap = np.r_[0 : min(i, j), max(i, j), min(i, j) + 1 : max(i, j), min(i, j), max(i, j) + 1 : len(order)]
        assert not topological(order[swap], prev[swap], dep[swap])
    monkeypatch.setattr(sim_order, "topological", lambda *a: False)
    assert fast_order(shape) == first_order(shape)


def test_recent_results_are_those_of_their_inputs() -> None:
    """``simulate._SIMS``: a repeated call without the timeline returns the earlier result (the same object) only for
    the very same inputs; any one duration or lag changed is simulated afresh, as without the memo."""
    schedule, pp, v, m = "interleaved-1f1b", 4, 2, 8
    rnd = random.Random(7)
    fwd = [rnd.randint(1, 50) for _ in range(pp * v)]
    bwd = [rnd.randint(1, 100) for _ in range(pp * v)]
    lag = [rnd.choice([0, 3, 17]) for _ in range(pp * v - 1)]

    def fresh(f, b, g):  # type: ignore[no-untyped-def]
        sim._SIMS.clear()
        return sim.simulate(schedule, pp, v, m, f, b, g, record=False)

    first = fresh(fwd, bwd, lag)
    assert sim.simulate(schedule, pp, v, m, list(fwd), list(bwd), list(lag), record=False) is first
    for which in range(3):
        for i in range(len((fwd, bwd, lag)[which])):
            args = [list(fwd), list(bwd), list(lag)]
            args[which][i] += 5
            sim._SIMS.clear()
            sim.simulate(schedule, pp, v, m, fwd, bwd, lag, record=False)  # the original in the memo
            got = sim.simulate(schedule, pp, v, m, *args, record=False)
            assert got is not sim._SIMS[(schedule, pp, v, m, *fwd, *bwd, *lag)]
            want = fresh(*args)
            assert (got.makespan, got.rank_finish, got.critical_path, got.critical_lags) == (
                want.makespan,
                want.rank_finish,
                want.critical_path,
                want.critical_lags,
            )


def test_recent_tolerates_entries_another_thread_drops() -> None:
    """``simulate._recent`` (``_ORDERS``, ``_SIMS``): an entry dropped between the look-up and the reordering (another
    thread's eviction) is no error; the cache keeps at most ``kept`` entries, the least recently used dropped."""
    from collections import OrderedDict

    class Dropping(OrderedDict):
        def get(self, key, default=None):  # type: ignore[no-untyped-def]
            hit = super().get(key, default)
            self.pop(key, None)  # gone before ``_recent`` reorders it
            return hit

    c = Dropping({(1,): "a"})
    assert sim._recent(c, (1,), 4, lambda: "new") == "a"
    lru: OrderedDict = OrderedDict()
    for k in (1, 2, 1, 3):
        sim._recent(lru, (k,), 2, lambda k=k: k)
    assert list(lru) == [(1,), (3,)]
