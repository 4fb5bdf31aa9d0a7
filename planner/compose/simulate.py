"""Event simulation of pipeline schedules over per-chunk forward/backward times.

Every schedule is a fixed *order* of operations per pipeline rank (``F``/``B`` of one micro-batch on
one model chunk). An operation starts when its rank is free and its data dependency has arrived:

* ``F(mb, c)`` needs ``F(mb, c-1)`` plus the point-to-point lag of boundary ``c-1 → c``;
* ``B(mb, c)`` needs ``B(mb, c+1)`` plus the lag of boundary ``c → c+1`` (the last chunk's backward
  needs its own forward).

A shape simulated before replays a recorded order of its operations (``_ORDERS``; ``sim_order``): one pass, no
waiting checks. A long 1F1B pipeline is simulated exactly from a short one once its steady state is
periodic (``periodic_1f1b``: Llama 3 70B's 512 micro-batches from 28–30).

Sends are asynchronous (a lag, not rank time). Times are integers (the planner uses nanoseconds) so
the simulation, the brute force and the CP-SAT model compute exactly the same numbers.

Orders follow the reference implementations: GPipe (all forwards, then all backwards), 1F1B
(PipeDream-Flush: rank i warms up with ``p-i-1`` forwards), interleaved 1F1B (Megatron-LM
``forward_backward_pipelining_with_interleaving``: warm-up ``2(p-i-1) + (v-1)p``, everything warm-up
when ``m == p``; needs ``m % p == 0``). Chunk ``c`` lives on rank ``c % p``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from planner.compose.pp_order import interleaved_warmup
from planner.compose.sim_order import Order, fast_order, first_order, op_links

Op = tuple[str, int, int]  # (kind "F"/"B", micro-batch, chunk)


def chunk_ranks(pp: int, v: int) -> list[int]:
    return [c % pp for c in range(pp * v)]


@lru_cache(maxsize=8)  # read only; both the live activations (``cost``) and a new shape's first simulation use it
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
            warm = interleaved_warmup(pp, v, m, i, all_warmup=True)  # the time order keeps Megatron's (``pp_order``)
            ops = [fwd(i, k) for k in range(warm)]
            for k in range(total - warm):
                ops += [fwd(i, warm + k), bwd(i, k)]
            ops += [bwd(i, k) for k in range(total - warm, total)]
            orders.append(ops)
        return orders
    raise ValueError(f"schedule {schedule!r} is not simulated")


#: The operation order of recently simulated schedule shapes, by (schedule, pp, v, m, record), replayed by ``_run``:
#: ``sim_order.fast_order`` without the timeline, ``sim_order.first_order`` (the sweeps', the timeline's order) with
#: it; op id = ((kind·m) + j)·chunks + c, kind 0 = F, 1 = B.
_ORDERS: OrderedDict[tuple[str, int, int, int, bool], Order] = OrderedDict()
ORDERS_KEPT = 32


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
    ``record=False`` skips the per-operation timeline (the critical path is always kept), lets a
    long 1F1B pipeline be extrapolated from a shorter one once it is periodic (``periodic_1f1b``), and returns a
    recent result of the same inputs (``_SIMS``: the same object, read only)."""
    chunks = pp * v
    if len(fwd) != chunks or len(bwd) != chunks:
        raise ValueError("fwd and bwd need one duration per chunk")
    lag = list(lag) if lag is not None else [0] * (chunks - 1)
    if record:
        return _simulate(schedule, pp, v, m, fwd, bwd, lag, True)
    key = (schedule, pp, v, m, *fwd, *bwd, *lag)
    return _recent(_SIMS, key, SIMS_KEPT, lambda: _simulate(schedule, pp, v, m, fwd, bwd, lag, False))


def _recent(cache: OrderedDict, key: tuple, kept: int, make: Callable[[], Any]) -> Any:
    """``cache[key]``, made by ``make`` when absent, the least recently used dropped beyond ``kept``. The service
    plans in threads: an entry another thread drops between two steps here is no error (made again when next asked)."""
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = make()
        while len(cache) > kept:
            try:
                cache.popitem(last=False)
            except KeyError:
                break
    else:
        try:
            cache.move_to_end(key)
        except KeyError:
            pass
    return hit


#: Recent results without the timeline, by their inputs (the schedule shape and every duration and lag: a class and
#: its ZeRO or optimizer variants share the pipeline's times); shared, read only.
_SIMS: OrderedDict[tuple, SimResult] = OrderedDict()
SIMS_KEPT = 16


def _simulate(
    schedule: str, pp: int, v: int, m: int, fwd: list[int], bwd: list[int], lag: list[int], record: bool
) -> SimResult:
    if not record and schedule == "1f1b" and v == 1 and m >= 2 * (pp + probe_rounds(pp)) and min(fwd + bwd) > 0:
        res = periodic_1f1b(pp, m, fwd, bwd, lag)
        if res is not None:
            return res
    end, pred, pred_lag, out, last = _run(schedule, pp, v, m, fwd, bwd, lag, record)
    free = [end[op] if op >= 0 else 0 for op in last]
    makespan = max(end)
    path, lags = _backtrack(end.index(makespan), m * pp * v, pp * v, pred, pred_lag)
    return SimResult(makespan=makespan, ops=out, rank_finish=free, critical_path=path, critical_lags=lags)


def _run(
    schedule: str, pp: int, v: int, m: int, fwd: list[int], bwd: list[int], lag: list[int], record: bool
) -> tuple[list[int], Sequence[int], Sequence[int], list[tuple[int, str, int, int, int, int]], tuple[int, ...]]:
    """Every operation's end, binding predecessor and the boundary whose lag that edge carries (op ids as
    in ``_ORDERS``), the timeline when ``record``, and each rank's last op (-1: none). An operation starts
    when its rank's previous one has ended and its data (plus the lag, when the boundary joins two ranks)
    has arrived. A shape simulated before replays its recorded order (``_ORDERS``: one pass, no waiting
    checks); a new one first finds its order (``sim_order``: any order with each op after its rank's previous one
    and its data gives the same ends; the timeline lists them in the sweeps' order, ``first_order``)."""
    chunks = pp * v
    where = chunk_ranks(pp, v)
    mc = m * chunks
    # Per (kind, chunk) key kind·chunks + c: the duration and the lag of the incoming data (-1: same rank)
    dur = list(fwd) + list(bwd)
    gap = [lag[c - 1] if c > 0 and where[c - 1] != where[c] else -1 for c in range(chunks)]
    gap += [lag[c] if c < chunks - 1 and where[c + 1] != where[c] else -1 for c in range(chunks)]
    shape = (schedule, pp, v, m)  # a new shape: its order (``sim_order``), then replayed as any other
    o: Order = _recent(_ORDERS, (*shape, record), ORDERS_KEPT, lambda: (first_order if record else fast_order)(shape))
    end = [0] * (2 * mc + 1)  # end[-1] = 0: the start of a rank's first operation
    if not record:  # the ends alone; the binding predecessors of the ops a critical path asks (``_Bindings``)
        # end = max(rank free, data ready) + duration, as max(end[prev] + dur, end[dep] + max(gap, 0) + dur): an op
        # without data dependency (dep -1) reads end[-1] = 0 with a gap of -1 (chunk 0's F), never later than its rank
        late = [d + (g if g > 0 else 0) for d, g in zip(dur, gap)]
        for op, prev, dep, key in zip(o.ops, o.prev, o.dep, o.key):
            x = end[prev] + dur[key]
            y = end[dep] + late[key]
            end[op] = x if x >= y else y
        end.pop()
        bindings = _Bindings(o, end, gap, m, chunks)
        return end, bindings.pred, bindings.lag, [], o.last
    pred = [-1] * (2 * mc)  # binding predecessor id
    pred_lag = [-1] * (2 * mc)  # boundary whose lag the binding edge carries
    out: list[tuple[int, str, int, int, int, int]] = []
    for op, prev, dep, key in zip(o.ops, o.prev, o.dep, o.key):
        # the same rule as the record=False loop's (inline in both: this loop runs ~10⁵ times per plan)
        start = end[prev]
        if dep >= 0:
            g = gap[key]
            ready = end[dep] + g if g > 0 else end[dep]
            if ready >= start:
                start = ready
                pred[op] = dep
                if g >= 0:  # a boundary between ranks: c − 1 → c (F) or c → c + 1 (B), ``op_links``
                    pred_lag[op] = op % chunks - 1 if op < mc else op % chunks
            else:
                pred[op] = prev
        else:
            pred[op] = prev
        finish = end[op] = start + dur[key]
        c = op % chunks
        out.append((c % pp, "F" if op < mc else "B", (op % mc) // chunks, c, start, finish))
    end.pop()
    return end, pred, pred_lag, out, o.last


class _Bindings:
    """The binding predecessor and the boundary of its lag (``_run``'s ``pred``, ``pred_lag``) of the operations
    asked — a critical path's — by ``_run``'s rule from the ends, rather than of all of them during the replay
    (``pred[op]``, ``lag[op]``)."""

    def __init__(self, o: Order, end: list[int], gap: list[int], m: int, chunks: int):
        self.o, self.end, self.gap, self.m, self.chunks = o, end, gap, m, chunks
        self.pred, self.lag = _Bound(self, 0), _Bound(self, 1)

    def bind(self, op: int) -> tuple[int, int]:
        end = self.end
        prev = self.o.prev_of[op]
        dep, bnd, key = op_links(op, self.m, self.chunks)
        if dep >= 0:
            start = end[prev] if prev >= 0 else 0
            g = self.gap[key]
            ready = end[dep] + g if g > 0 else end[dep]
            if ready >= start:
                return dep, bnd if g >= 0 else -1
        return prev, -1


class _Bound(Sequence[int]):
    """One of ``_Bindings``' two columns, indexed by op id."""

    def __init__(self, b: _Bindings, col: int):
        self.b, self.col = b, col

    def __getitem__(self, op):
        return self.b.bind(op)[self.col]

    def __len__(self) -> int:
        return len(self.b.o.ops)


def _backtrack(
    node: int, mc: int, chunks: int, pred: Sequence[int], pred_lag: Sequence[int]
) -> tuple[list[Op], list[int]]:
    """The critical path ending at op ``node``: its binding predecessors back to the first operation."""
    path: list[Op] = []
    lags: list[int] = []
    if isinstance(pred, _Bound):  # a replay's bindings: ``_Bindings.bind`` inline (a path of thousands of ops)
        b = pred.b
        end, gap, prev_of, last = b.end, b.gap, b.o.prev_of, chunks - 1
        while node >= 0:
            c = node % chunks
            forward = node < mc
            path.append(("F" if forward else "B", (node % mc) // chunks, c))
            prev = prev_of[node]
            # ``op_links``: F(j, c) needs F(j, c − 1) (chunk 0: nothing); B(j, c) needs B(j, c + 1) (the last
            # chunk: its own F, no boundary)
            if forward:
                dep, bnd, key = (node - 1, c - 1, c) if c else (-1, -1, 0)
            else:
                dep, bnd, key = (node + 1, c, chunks + c) if c < last else (node - mc, -1, chunks + c)
            if dep >= 0:
                start = end[prev] if prev >= 0 else 0
                g = gap[key]
                ready = end[dep] + g if g > 0 else end[dep]
                if ready >= start:
                    if g >= 0:
                        lags.append(bnd)
                    node = dep
                    continue
            node = prev
        path.reverse()
        return path, lags
    while node >= 0:
        path.append(("F" if node < mc else "B", (node % mc) // chunks, node % chunks))
        node, lag = pred[node], pred_lag[node]
        if lag >= 0:
            lags.append(lag)
    path.reverse()
    return path, lags


#: Longest period (in rounds) looked for (``periodic_1f1b``): ties between the slowest stages can make the
#: steady state repeat every few rounds rather than every one (Llama 3 70B's TP4×PP8 cut: every 3).
MAX_PERIOD = 6


def probe_rounds(pp: int) -> int:
    """Steady-state rounds simulated before a long 1F1B pipeline is extrapolated (``periodic_1f1b``)."""
    return max(12, 2 * pp)


def periodic_1f1b(pp: int, m: int, fwd: list[int], bwd: list[int], lag: list[int]) -> SimResult | None:
    """1F1B with one chunk per rank and m micro-batches, exactly, from a simulation of p +
    ``probe_rounds`` (+ < c) micro-batches, or 2, 4, … times as many rounds while that is at most m / 2;
    None when none of them is periodic yet (then simulate all m).

    Round k of the steady state is, on every rank r, F(k + p − 1 − r) then B(k) (rank r warms up with
    p − 1 − r forwards). F of round k needs rank r − 1's F of round k − 1 and rank r's B of round k − 1;
    B of round k needs rank r's F and rank r + 1's B of round k. So for 1 ≤ k ≤ K = m − p the ends of
    round k, x(k), are a fixed max-plus function of x(k − 1) (the same durations every round): once
    x(k*) = x(k* − c) + Λ (every component), x(k + c) = x(k) + Λ for every k ≥ k* − c, and every round
    from k* − c + 1 on binds on the same predecessors as the one c rounds before. The long pipeline is
    then a short one of ms micro-batches with J = m − ms (a multiple of c) more rounds: the same head,
    rounds after k* repeating those c rounds earlier, and the short one's last rounds and cool-down
    shifted by J micro-batches and J/c·Λ (its makespan and rank finishes; its critical path backtracks
    through the repeated rounds). ``tests/test_planner_simulate.py`` checks it against the full simulation."""
    rounds, found = probe_rounds(pp), None
    while found is None and pp + rounds <= m // 2:  # longer probes while they cost at most half of m
        probe = pp + rounds
        end, pred, blag, _, _ = _run("1f1b", pp, 1, probe, fwd, bwd, lag, False)
        found = _period(pp, probe, end)
        rounds *= 2  # a bottleneck shared by ranks can take ~100 rounds to settle (Llama 3 70B, PP8)
    if found is None:
        return None
    kstar, c, big = found
    J = (m - probe) // c * c
    ms = m - J  # probe … probe + c − 1: J rounds of the period
    if ms != probe:
        end, pred, blag, _, _ = _run("1f1b", pp, 1, ms, fwd, bwd, lag, False)
    C, mcs = pp, ms * pp

    # Backtrack the long pipeline's critical path through the short one's predecessors (inlined: m can be
    # in the thousands)
    last = end.index(max(end))  # B(ms − 1) on rank 0: every operation precedes it
    kind, j, r = last // mcs, (last % mcs) // C + J, last % C
    path: list[Op] = []
    lags: list[int] = []
    while True:
        path.append(("B" if kind else "F", j, r))
        k = j if kind else j - (pp - 1 - r)  # its round
        shift = 0 if k <= kstar else min(J, -(-(k - kstar) // c) * c)
        small = (kind * ms + j - shift) * C + r
        if blag[small] >= 0:
            lags.append(blag[small])
        p_ = pred[small]
        if p_ < 0:
            break
        kind, j, r = p_ // mcs, (p_ % mcs) // C + shift, p_ % C
    path.reverse()
    makespan = max(end)
    finish = [end[mcs + (ms - 1) * C + r] + J // c * big for r in range(pp)]  # each rank ends with B(m − 1)
    return SimResult(makespan + J // c * big, [], finish, critical_path=path, critical_lags=lags)


def _period(pp: int, ms: int, end: list[int]) -> tuple[int, int, int] | None:
    """(k*, c, Λ): the first round k* ≤ ms − p of a 1F1B simulation of ms micro-batches whose ends are
    those of round k* − c plus Λ on every rank, c ≤ ``MAX_PERIOD``; None if none."""
    C, mcs = pp, ms * pp
    xs: list[list[int]] = []
    for k in range(ms - pp + 1):  # round k's ends: F(k + p − 1 − r) and B(k) on every rank r
        xs.append([end[(k + pp - 1 - r) * C + r] for r in range(pp)] + [end[mcs + k * C + r] for r in range(pp)])
        x = xs[k]
        for c in range(1, min(MAX_PERIOD, k) + 1):
            y = xs[k - c]
            d = x[0] - y[0]  # one difference on every rank (stops at the first other one)
            if all(a - b == d for a, b in zip(x, y)):
                return k, c, d
    return None


def gpipe_makespan(fwd: list[int], bwd: list[int], lag: list[int], m: int) -> int:
    """GPipe's makespan in closed form: two flow shops of identical jobs,
    ``ΣF + ΣB + 2·Σlag + (m−1)·(max F + max B)`` (the tests check it against the simulation).
    1F1B has no such form once stages differ; the search uses critical-path cuts instead."""
    return sum(fwd) + sum(bwd) + 2 * sum(lag) + (m - 1) * (max(fwd) + max(bwd))


def path_length(path: list[Op], lags: list[int], fwd: list[int], bwd: list[int], lag: list[int]) -> int:
    """Length of a chain of operations (with the lags it crosses): a lower bound of the makespan."""
    return sum(fwd[c] if k == "F" else bwd[c] for k, _, c in path) + sum(lag[b] for b in lags)
