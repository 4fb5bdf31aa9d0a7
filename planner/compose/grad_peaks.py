"""Activation peaks that also say which chunks hold their gradients (cost model 51): for a class whose gradients
accumulate unsharded across the step's micro-batches (``workload.accumulation.DpSchedule.whole_grads``: FSDP2 under
``torch.distributed.pipelining``, FSDP1 under ``no_sync``), a chunk's accumulated gradient exists only from that
chunk's first backward of the step on. FSDP2's ``post_backward`` creates it (``to_accumulated_grad_if_needed``:
``unsharded_accumulated_grad = grad.to(reduce_dtype)``, torch 2.13.0 ``_fsdp_param_group.py:606-611``,
``_fsdp_param.py:802-819``) and frees it after the last backward's reduce-scatter; the sharded gradient of the
previous step is gone by then (torchtitan's ``optimizers.zero_grad()``: ``set_to_none`` by default). So a peak of
the schedule's order that precedes a chunk's first backward (interleaved 1F1B's and GPipe's warm-up, 1F1B's first
forward on rank i with m ≤ pp − i) holds none of that chunk's gradients.

``schedule_peaks`` walks every rank's order (``simulate.rank_orders``, as arrays: ``peak_walk``) once for both: the
activation peaks (after a forward followed by a backward or at the end; ``cost.live_vectors_cached``) and, where
asked (``grads``), also the state right after each chunk's first backward (its gradient just allocated, one
activation copy fewer), each peak then with the chunks whose backward has run (``live_and_done``); those another one
dominates (as many copies of every chunk, every chunk it has done done) dropped. ``memory.pending_grads`` prices
what a peak lacks."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from planner.compose.peak_walk import all_rank_states

if TYPE_CHECKING:
    from planner.compose.cost import Live

#: Per rank, aligned with its peaks in ``Live``: the chunks whose first backward of the step has run at the peak.
Done = tuple[tuple[tuple[int, ...], ...], ...]

Items = tuple[tuple[int, int], ...]  # a peak's (chunk, copies alive) pairs, by chunk
Peak = tuple[Items, tuple[int, ...]]


def live_and_done(schedule: str, pp: int, v: int, m: int) -> tuple[Live, Done]:
    """Per rank, its non-dominated peaks (``Live``) and the chunks done at each (``Done``), from its order."""
    live, done = schedule_peaks(schedule, pp, v, m, True)
    assert done is not None
    return live, done


@lru_cache(maxsize=4096)
def schedule_peaks(schedule: str, pp: int, v: int, m: int, grads: bool) -> tuple[Live, Done | None]:
    """Per rank, its non-dominated activation peaks and, with ``grads``, the chunks done at each (sorted), else None
    (the activation peaks alone, in the order ``cost.live_vectors_cached`` has always had: the set's)."""
    if v == 1 and not grads:  # closed forms: GPipe keeps all m, 1F1B keeps min(p - i, m) on rank i
        return tuple(((((i, m if schedule == "gpipe" else min(pp - i, m)),),)) for i in range(pp)), None
    return _peaks(schedule, pp, v, periodic_m(schedule, pp, v, m), grads)


def periodic_m(schedule: str, pp: int, v: int, m: int) -> int:
    """The fewest micro-batches m' ≡ m (mod pp), m' ≤ m, whose (1F1B or interleaved 1F1B) orders have the same peaks as
    m's, in the same order of first occurrence (``_both_peaks`` of m' is m's: the walk costs O(m'·v) rather than
    O(m·v), and the shapes of one (pp, v) share it). Rank i's order is a warm-up of w_i forwards (independent of m once
    m ≥ 2·pp), s_i = m·v − w_i steady (F, B) pairs, then backwards only. Forward and backward n run local chunk
    (n // pp) mod v (``rank_arrays``; 1F1B: always 0), so with P = pp·v every chunk gains pp forwards and pp backwards
    per P ops of each: the copies alive at steady peak k (after F(w_i + k)) repeat with period P, every chunk is seen
    from the first steady peak on (w_i ≥ (v − 1)·pp) and done once B((v − 1)·pp) has run, the last first backward.
    The peaks and first backwards of steps k < K = (v − 1)·pp + 1 are the same for m and m', the ones from K on repeat
    those of [K, K + P), and the warm-up and the backwards after the steady pairs add none (no forward followed by a
    backward, no first backward). So m' keeps s_i ≥ K + P on every rank (the least at i = 0) and m' ≥ 2·pp.
    ``tests/test_grad_peaks_undominated.py`` checks ``_both_peaks`` of both on every shape up to pp = 8, v = 8."""
    if schedule == "gpipe":  # its peaks grow with m
        return m
    warm = pp - 1 if schedule == "1f1b" else 2 * (pp - 1) + (v - 1) * pp  # rank 0's warm-up, the longest
    least = max(2 * pp, -(-((2 * v - 1) * pp + 1 + warm) // v))
    return m if m <= least else m - (m - least) // pp * pp


@lru_cache(maxsize=4096)
def _walks(schedule: str, pp: int, v: int, m: int) -> tuple:
    """Every rank's distinct states (``peak_walk.rank_states``): one walk of the orders for both variants, of all
    ranks at once (``peak_walk.all_rank_states``)."""
    return all_rank_states(schedule, pp, v, m)


@lru_cache(maxsize=4096)
def _peaks(schedule: str, pp: int, v: int, m: int, grads: bool) -> tuple[Live, Done | None]:
    """``schedule_peaks`` of a shape (m already ``periodic_m``'s), each variant built only when asked (a stack whose
    gradients are held throughout never asks the chunks done). The walk's states are distinct and a peak's (chunk,
    copies) items are its (seen, copies) one to one (a chunk not seen has no copy alive), so the dominance filter reads
    each state's copies and chunks done as they are (``rows_undominated``) and only the peaks it keeps are made items
    (the grads variant; the other's set of every peak's items keeps the order it has always had) — the same peaks in
    the same order as ``undominated`` over every peak's items (``tests/test_grad_peaks_undominated.py``)."""
    lives, dones = [], []
    wide = v > 62
    for r, (with_done, acts) in enumerate(_walks(schedule, pp, v, m)):
        # each distinct peak by (seen, copies, done), in order of first occurrence (the steady state repeats a few
        # of them m·v times: ``peak_walk.rank_states``); made (chunk, copies) items once each below, the same sets
        # built in the same order as the walk that made (chunk, copies) items at each peak had
        as_items: dict[tuple[tuple[int, ...], tuple[int, ...]], Items] = {}
        if not grads:
            act_set = {_items(as_items, pp, r, counts, sn) for sn, counts in acts}  # (its order: a set's)
            copies = {items: alive for (_, alive), items in as_items.items()}
            order = list(act_set)
            ok = _rows_ok([copies[p] for p in order], None, v, wide)
            lives.append(tuple(p for p, k in zip(order, ok) if k))
            continue
        ok = _rows_ok([counts for _, counts, _ in with_done], [dn for _, _, dn in with_done], v, wide)
        keep = sorted(
            (_items(as_items, pp, r, counts, sn), tuple(x * pp + r for x in dn))
            for (sn, counts, dn), k in zip(with_done, ok)
            if k
        )
        lives.append(tuple(p[0] for p in keep))
        dones.append(tuple(p[1] for p in keep))
    return tuple(lives), (tuple(dones) if grads else None)


def _rows_ok(counts: list[tuple[int, ...]], done: list[tuple[int, ...]] | None, v: int, wide: bool) -> list[bool]:
    """``rows_undominated`` of peaks given as their copies of each local chunk and their local chunks done (None: none)."""
    n = len(counts)
    if n <= 1:
        return [True] * n
    vecs = np.array(counts, dtype=np.int64).reshape(n, v)
    masks: np.ndarray
    if wide:
        masks = np.zeros((n, v), dtype=bool)
        for i, d in enumerate(done or ()):
            masks[i, list(d)] = True
    else:
        bits: dict[tuple[int, ...], int] = {}
        masks = np.zeros(n, dtype=np.int64)
        if done is not None:
            masks[:] = [bits[d] if d in bits else bits.setdefault(d, sum(1 << x for x in d)) for d in done]
    return rows_undominated(vecs, masks, wide)


def _both_peaks(schedule: str, pp: int, v: int, m: int) -> tuple[tuple[Live, Done | None], tuple[Live, Done | None]]:
    """``schedule_peaks`` without and with ``grads`` of the shape itself (no ``periodic_m``), unmemoised (tests)."""
    return _peaks.__wrapped__(schedule, pp, v, m, False), _peaks.__wrapped__(schedule, pp, v, m, True)


def _items(
    memo: dict[tuple[tuple[int, ...], tuple[int, ...]], Items],
    pp: int,
    r: int,
    alive: tuple[int, ...],
    seen: tuple[int, ...],
) -> Items:
    """Rank r's copies alive of the chunks seen (local indices → chunk ids), memoised by the counts."""
    key = (seen, alive)
    items = memo.get(key)
    if items is None:
        items = memo[key] = tuple((x * pp + r, alive[x]) for x in seen)
    return items


def _dominates(q: Peak, p: Peak) -> bool:
    """Whether q needs at least p's memory: as many copies of every chunk, and every chunk done at p done at q."""
    copies = dict(q[0])
    return all(copies.get(c, 0) >= k for c, k in p[0]) and set(p[1]) <= set(q[1])


def undominated(peaks: list[Peak], pp: int, v: int) -> list[bool]:
    """Per peak, whether no other one dominates it (``_dominates``), all pairs at once: each peak as its copies of
    the rank's v chunks (local index chunk // pp) and its chunks done as a bit mask (v > 62: a boolean row; before,
    the pairs one by one in Python: 0.27 s CPU for pp 2, v 63, m 6). ``tests/test_grad_peaks_undominated.py`` checks
    both against ``_dominates`` pair by pair."""
    n = len(peaks)
    if n <= 1:
        return [True] * n
    wide = v > 62  # the chunks done as a boolean row rather than an int64 bit mask (v = 63: pp 2 on 126 layers)
    vecs = np.zeros((n, v), dtype=np.int64)
    masks = np.zeros((n, v) if wide else n, dtype=bool if wide else np.int64)
    for i, (items, done) in enumerate(peaks):
        for c, k in items:
            vecs[i, c // pp] = k
        if wide:
            masks[i, [c // pp for c in done]] = True
        else:
            masks[i] = sum(1 << (c // pp) for c in done)
    return rows_undominated(vecs, masks, wide)


def rows_undominated(vecs: np.ndarray, masks: np.ndarray, wide: bool, pack: bool = True) -> list[bool]:
    """``undominated`` of peaks as rows: ``vecs`` [peak, local chunk] their copies alive, ``masks`` their local chunks
    done (an int64 bit mask per peak, or with ``wide`` a boolean row). ``pack``: the copies packed in one int64 a peak
    where they fit (one comparison a pair of peaks rather than one a chunk; ``tests/test_grad_peaks_undominated.py``
    checks it against the chunk-by-chunk comparison)."""
    n, v = vecs.shape
    keep = np.ones(n, dtype=bool)
    bits = int(vecs.max()).bit_length() + 1 if n and v else 1  # a chunk's copies and a guard bit above them
    if pack and not wide and v * bits <= 62 and int(vecs.min()) >= 0:
        # every peak's copies in one int64, ``bits`` a chunk: q has at least p's copies of every chunk iff each
        # chunk's guard bit survives (q | guard) − p (a chunk's field stays ≥ 0 there: no borrow from the next)
        packed = (vecs << (np.arange(v, dtype=np.int64) * bits)).sum(axis=1)
        guard = sum(1 << (j * bits + bits - 1) for j in range(v))
        step = max(1, 4_000_000 // n)
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            dom = (((packed[:, None] | guard) - packed[None, lo:hi]) & guard) == guard
            dom &= (masks[None, lo:hi] & ~masks[:, None]) == 0
            dom[np.arange(lo, hi), np.arange(hi - lo)] = False
            keep[lo:hi] = ~dom.any(axis=0)
        return keep.tolist()
    step = max(1, 4_000_000 // (n * v))  # the peaks p checked at once (q × p × v booleans)
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        dom = np.asarray((vecs[:, None, :] >= vecs[None, lo:hi, :]).all(axis=2))  # [q, p]: as many of each chunk
        if wide:  # every chunk done at p done at q
            dom &= ~(masks[None, lo:hi, :] & ~masks[:, None, :]).any(axis=2)
        else:
            dom &= (masks[None, lo:hi] & ~masks[:, None]) == 0
        dom[np.arange(lo, hi), np.arange(hi - lo)] = False  # q ≠ p (the peaks are distinct)
        keep[lo:hi] = ~dom.any(axis=0)
    return keep.tolist()
