"""``grad_peaks.schedule_peaks``' walk of a rank's order, vectorised: the order as arrays (``rank_arrays``, the same
as ``simulate.rank_orders``' — ``tests/test_grad_peaks_undominated.py`` checks them op by op), the copies alive, the
chunks seen and the chunks done after every op as cumulative sums/maxima, and the distinct states at the peaks in
order of first occurrence (``rank_states``), so that the steady state's m·v repeats cost no Python work.
"""

from __future__ import annotations

import numpy as np

from planner.compose.pp_order import CAPPED, INTERLEAVED, interleaved_warmup

#: ``rank_states``' distinct states: (seen, copies alive, done) by local chunk index, in order of first occurrence
States = list[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]


def rank_arrays(schedule: str, pp: int, v: int, m: int, i: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank i's order as (is a forward, local chunk index c // pp) per op, as ``simulate.rank_orders`` has it
    (``pp_order.CAPPED``: interleaved 1F1B without Megatron-LM's all-forwards rule at m = pp)."""
    if schedule == "gpipe":
        return np.repeat(np.array([True, False]), m), np.zeros(2 * m, dtype=np.int64)
    if schedule == "1f1b":
        warm = min(pp - i - 1, m)
        fwd = np.concatenate([np.ones(warm, bool), np.tile([True, False], m - warm), np.zeros(warm, bool)])
        return fwd, np.zeros(2 * m, dtype=np.int64)
    if schedule in INTERLEAVED:
        if m % pp:
            raise ValueError(f"interleaved 1F1B needs the number of micro-batches ({m}) divisible by pp ({pp})")
        total = m * v
        warm = interleaved_warmup(pp, v, m, i, schedule != CAPPED)  # ``pp_order``
        k = np.arange(total)
        f_chunk, b_chunk = (k // pp) % v, v - 1 - (k // pp) % v
        steady = total - warm
        mid = np.empty(2 * steady, dtype=np.int64)
        mid[0::2], mid[1::2] = f_chunk[warm:], b_chunk[:steady]
        chunks = np.concatenate([f_chunk[:warm], mid, b_chunk[steady:]])
        fwd = np.concatenate([np.ones(warm, bool), np.tile([True, False], steady), np.zeros(warm, bool)])
        return fwd, chunks
    raise ValueError(f"schedule {schedule!r} is not simulated")


#: a rank's order this long or longer is walked with numpy (shorter: a plain loop, cheaper there)
VECTOR_OPS = 256

#: The most chunks ``all_rank_states`` codes as one int64 bit mask: the mask and its range (2^v, ``_first_rows``'
#: mixed radix reads max + 1) must stay within int64; finer interleavings (v = L/pp reaches 63 on a 126-layer model at
#: pp 2) walk rank by rank (``vector_states``, boolean columns).
MASK_BITS = 61


def rank_states(schedule: str, pp: int, v: int, m: int, i: int) -> tuple[States, list[tuple[tuple[int, ...], ...]]]:
    """Rank i's distinct states at its activation peaks (a forward followed by a backward or at the end) and right
    after each chunk's first backward, with the chunks done; and the distinct (seen, copies) at the activation
    peaks alone: each in order of first occurrence."""
    if 2 * m * v < VECTOR_OPS:
        return walk_states(schedule, pp, v, m, i)
    return vector_states(schedule, pp, v, m, i)


def walk_states(schedule: str, pp: int, v: int, m: int, i: int) -> tuple[States, list[tuple[tuple[int, ...], ...]]]:
    """``rank_states`` by a plain loop over the order."""
    fwd, chunks = rank_arrays(schedule, pp, v, m, i)
    ops, last = list(zip(fwd.tolist(), chunks.tolist())), 2 * m * v - 1
    alive = [0] * v
    seen: tuple[int, ...] = ()
    done: tuple[int, ...] = ()
    acts: dict[tuple[tuple[int, ...], tuple[int, ...]], None] = {}
    with_done: dict[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]], None] = {}
    for idx, (f, k) in enumerate(ops):
        if f:
            if k not in seen:
                seen = tuple(sorted((*seen, k)))
            alive[k] += 1
            if idx == last or not ops[idx + 1][0]:  # a local maximum of the activations
                counts = tuple(alive)
                acts[(seen, counts)] = None
                with_done[(seen, counts, done)] = None
        else:
            alive[k] -= 1
            if k not in done:  # the chunk's gradient allocated
                done = tuple(sorted((*done, k)))
                with_done[(seen, tuple(alive), done)] = None
    return list(with_done), list(acts)


def vector_states(schedule: str, pp: int, v: int, m: int, i: int) -> tuple[States, list[tuple[tuple[int, ...], ...]]]:
    """``rank_states`` by cumulative sums and maxima over the whole order."""
    fwd, chunks = rank_arrays(schedule, pp, v, m, i)
    n = len(fwd)
    hot = np.zeros((n, v), dtype=np.int64)
    hot[np.arange(n), chunks] = np.where(fwd, 1, -1)
    alive = np.cumsum(hot, axis=0)
    seen = np.maximum.accumulate(hot > 0, axis=0)
    done = np.maximum.accumulate(hot < 0, axis=0)
    peak = fwd & np.append(~fwd[1:], True)  # a forward followed by a backward, or the last op
    first_b = np.zeros(n, dtype=bool)
    backs = np.flatnonzero(~fwd)
    _, first = np.unique(chunks[backs], return_index=True)
    first_b[backs[first]] = True
    rows = np.concatenate([seen, alive, done], axis=1).astype(np.int64)
    with_done = _distinct(rows, np.flatnonzero(peak | first_b))
    acts = _distinct(rows[:, : 2 * v], np.flatnonzero(peak))
    w = 2 * v
    states = [(_ones(r, 0, v), tuple(r[v:w]), _ones(r, w, v)) for r in with_done.tolist()]
    return states, [(_ones(r, 0, v), tuple(r[v:w])) for r in acts.tolist()]


def _distinct(rows: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The distinct rows among ``rows[at]``, in order of first occurrence."""
    if len(at) == 0:
        return rows[:0]
    return rows[at[_first_rows(rows[at])]]


def _first_rows(sub: np.ndarray) -> np.ndarray:
    """The indices of ``sub``'s distinct rows (non-negative integers) at their first occurrence, ascending."""
    radix, size = [], 1  # each row as one integer in the mixed radix of its columns' ranges (exact: no collision)
    for hi in (sub.max(axis=0) + 1).tolist():
        radix.append(size)
        size *= hi
    if size < 1 << 62:
        _, first = np.unique(sub @ np.array(radix, dtype=np.int64), return_index=True)
    else:
        _, first = np.unique(sub, axis=0, return_index=True)
    return np.sort(first)


def _ones(row: list[int], start: int, v: int) -> tuple[int, ...]:
    """The local chunk indices whose flag is set in ``row[start : start + v]``."""
    return tuple(j for j in range(v) if row[start + j])


def all_rank_states(schedule: str, pp: int, v: int, m: int) -> tuple:
    """``rank_states`` of every rank, the numpy walk of all ranks at once (the ranks' orders are of one length,
    2·m·v): each rank's cumulative sums as ``vector_states``' and its distinct states by one ``np.unique`` over
    (rank, state) codes, in order of rank, then of first occurrence; the chunk sets made once per distinct set
    (bit mask) — the same states in the same order (``tests/test_grad_peaks_undominated.py`` checks it against
    ``walk_states`` rank by rank)."""
    if 2 * m * v < VECTOR_OPS:
        return tuple(walk_states(schedule, pp, v, m, r) for r in range(pp))
    if v > MASK_BITS:  # a chunk set as an int64 bit mask (and its range + 1) needs v ≤ 61 bits
        return tuple(vector_states(schedule, pp, v, m, r) for r in range(pp))
    arrays = [rank_arrays(schedule, pp, v, m, r) for r in range(pp)]
    fwd = np.stack([f for f, _ in arrays])
    chunks = np.stack([c for _, c in arrays])
    n = fwd.shape[1]
    hot = np.zeros((pp, n, v), dtype=np.int64)
    hot[np.arange(pp)[:, None], np.arange(n)[None, :], chunks] = np.where(fwd, 1, -1)
    alive = np.cumsum(hot, axis=1).reshape(pp * n, v)
    seen = np.maximum.accumulate(hot > 0, axis=1)
    done = np.maximum.accumulate(hot < 0, axis=1)
    peak = fwd & np.concatenate([~fwd[:, 1:], np.ones((pp, 1), dtype=bool)], axis=1)
    first_b = np.zeros((pp, n), dtype=bool)  # a chunk's first backward: where its done flag turns on
    first_b[:, 0] = done[:, 0].any(axis=1)
    first_b[:, 1:] = (done[:, 1:] & ~done[:, :-1]).any(axis=2)
    bits = 1 << np.arange(v, dtype=np.int64)
    seen_mask, done_mask = seen.reshape(pp * n, v) @ bits, done.reshape(pp * n, v) @ bits
    sets: dict[int, tuple[int, ...]] = {}

    def as_sets(masks: np.ndarray) -> list[tuple[int, ...]]:
        out = masks.tolist()
        for x in set(out) - sets.keys():
            sets[x] = tuple(j for j in range(v) if x >> j & 1)
        return list(map(sets.__getitem__, out))

    with_done: list[list] = [[] for _ in range(pp)]
    acts: list[list] = [[] for _ in range(pp)]
    for flags, cols, into in (
        (peak | first_b, (seen_mask, alive, done_mask), with_done),
        (peak, (seen_mask, alive), acts),
    ):
        at = np.flatnonzero(flags.ravel())
        keep = _first_by_rank(np.column_stack([c[at] for c in cols]), at, n)
        parts = [as_sets(seen_mask[keep]), list(map(tuple, alive[keep].tolist()))]
        if len(cols) == 3:
            parts.append(as_sets(done_mask[keep]))
        ends = np.searchsorted(keep // n, np.arange(1, pp + 1)).tolist()
        states = list(zip(*parts))
        for r in range(pp):
            into[r] = states[ends[r - 1] if r else 0 : ends[r]]
    return tuple(zip(with_done, acts))


def _first_by_rank(sub: np.ndarray, at: np.ndarray, n: int) -> np.ndarray:
    """Of the rows ``sub`` (those of ops ``at``, rank r's ops r·n … (r + 1)·n − 1), the ops of each rank's distinct
    rows at their first occurrence, in order."""
    if len(at) == 0:
        return at
    return at[_first_rows(np.column_stack([sub, at // n]))]  # (row, rank): distinct per rank
