"""A cheaper first pass of ``screens.quick_may_fit``'s memory screen of a class without a cut: ``screens.layer_caps``
at each rank's one peak of most activation copies only. A rank's cap is the least over its peaks, so over a subset
of them it is at least as large, and ``caps_fit`` only fails more with smaller caps: when this pass rules a class
out, the full screen does too (the answer is the same; most classes the screen reaches are ruled out here). The
heaviest peaks are memoised on the request's ``Context`` (``Context.top_peaks``): nothing is kept between requests.

``warm_sums``: a pass before that one which walks no order: at each rank's peak at the end of interleaved 1F1B's warm-up
(its copies in closed form, no chunk done yet), one real peak of the rank's order; a rank's cap at it is at least its
cap over every peak (the peak is one of them or dominated by one, whose cap is no larger), so it too rules out only
classes the full screen rules out, before the class's peaks are walked (``grad_peaks``: a walk per shape, 1 ms on
pp 16, v 7; Llama 3 405B at 131K tokens screens ~5,400 interleaved classes, most ruled out by memory).

``peak_sums``, ``done_sums``, ``shape_sums``: the peaks as the numbers ``screens.summed_caps`` and
``screens.summed_done_caps`` read of each (a shape's, memoised with its peaks; the heaviest ones', on the ``Context``).
"""

from __future__ import annotations

from functools import lru_cache

from planner.compose.context import Context
from planner.compose.cost import Live, live_vectors_cached
from planner.compose.grad_peaks import Done, live_and_done
from planner.compose.pp_order import interleaved_warmup

#: Per rank, per peak: (copies alive in all, of chunk 0, of the last chunk, the least of the rank's chunks' or 0 when
#: one of them has none alive)
Sums = tuple[tuple[tuple[int, int, int, int], ...], ...]
#: With chunks done: per rank, per peak, the above's first three, the rank's chunks not done (how many, whether
#: chunk 0 and whether the last is one of them) and, for the rank's chunks not done and done (where any), the least and
#: the most copies alive: (pending, least, most)
DoneSums = tuple[tuple[tuple[int, int, int, int, bool, bool, tuple[tuple[bool, int, int], ...]], ...], ...]


def heaviest(ctx: Context, live: Live, done: Done | None, key: tuple) -> tuple[Live, Done | None]:
    """Per rank, its one peak of most copies alive (the first such), with its chunks done: memoised in
    ``ctx.top_peaks`` by ``key``, what ``cost.class_peaks`` reads (schedule, pp, v, m, whether the chunks done count)."""
    memo = ctx.top_peaks
    hit = memo.get(key)
    if hit is None:
        picks = [max(range(len(peaks)), key=lambda i, p=peaks: sum(x for _, x in p[i])) for peaks in live]  # type: ignore[misc]
        top = tuple((live[r][i],) for r, i in enumerate(picks))
        hit = memo[key] = (top, None if done is None else tuple((done[r][i],) for r, i in enumerate(picks)))
    return hit


def peak_sums(ctx: Context, live: Live, chunks: int, key: tuple) -> Sums:
    """``Sums`` of ``live`` (``chunks`` chunks, v = chunks / ranks per rank), memoised in ``ctx.top_peaks`` by
    ``("sums", *key)`` (``key``: what determines ``live``)."""
    memo = ctx.top_peaks
    k = ("sums", *key)
    hit = memo.get(k)
    if hit is None:
        hit = memo[k] = sums_of(live, chunks)
    return hit


def done_sums(ctx: Context, live: Live, done: Done, chunks: int, key: tuple) -> DoneSums:
    """``DoneSums`` of ``live`` with its chunks done, memoised in ``ctx.top_peaks`` by ``("done", *key)``."""
    memo = ctx.top_peaks
    k = ("done", *key)
    hit = memo.get(k)
    if hit is None:
        hit = memo[k] = done_sums_of(live, done, chunks)
    return hit


@lru_cache(maxsize=4096)
def shape_sums(schedule: str, pp: int, v: int, m: int, grads: bool) -> Sums | DoneSums:
    """The ``Sums`` (``DoneSums`` with ``grads``) of a schedule shape's peaks (``cost.class_peaks``: its
    ``grad_peaks.schedule_peaks``), memoised as those are."""
    if not grads:
        return sums_of(live_vectors_cached(schedule, pp, v, m), pp * v)
    live, done = live_and_done(schedule, pp, v, m)
    return done_sums_of(live, done, pp * v)


def warm_peaks(pp: int, v: int, m: int, all_warmup: bool) -> tuple[Live, Done]:
    """Per rank i, its peak at the end of the interleaved warm-up (``screens.interleaved_peak_copies``: after its
    first n = min(2(pp − i − 1) + (v − 1)·pp + 1, m·v) forwards, all m·v when m = pp in Megatron's order, ``all_warmup``,
    not in torch's nor Megatron-core's since 2024-11: ``compose.pp_order``; a backward or the end follows),
    as one ``Live`` peak with no chunk done: forward k runs local chunk (k // pp) mod v (``peak_walk.rank_arrays``), so
    chunk j has pp copies per full period of pp·v forwards and min(pp, rest − j·pp) of the rest.
    ``tests/test_prescreen.py`` checks it is a state of every rank's walk (``peak_walk.walk_states``)."""
    live = []
    for i in range(pp):
        total = m * v
        warm = interleaved_warmup(pp, v, m, i, all_warmup)
        n = total if warm == total else warm + 1
        full, rest = divmod(n, pp * v)
        copies = [full * pp + min(pp, max(0, rest - j * pp)) for j in range(v)]
        live.append((tuple((j * pp + i, x) for j, x in enumerate(copies) if x > 0),))
    return tuple(live), tuple(((),) for _ in range(pp))


@lru_cache(maxsize=4096)
def warm_sums(pp: int, v: int, m: int, grads: bool, all_warmup: bool) -> Sums | DoneSums:
    """The ``Sums`` (``DoneSums`` with ``grads``) of ``warm_peaks``."""
    live, done = warm_peaks(pp, v, m, all_warmup)
    return done_sums_of(live, done, pp * v) if grads else sums_of(live, pp * v)


def sums_of(live: Live, chunks: int) -> Sums:
    """``Sums`` of ``live``, each distinct row once (the caps are least over the rows: Mixtral's peaks share a third
    of theirs)."""
    v, last = chunks // len(live), chunks - 1
    return tuple(
        tuple(
            dict.fromkeys(
                (
                    sum(x for _, x in vec),
                    sum(x for ch, x in vec if ch == 0),
                    sum(x for ch, x in vec if ch == last),
                    min([x for _, x in vec]) if len(vec) == v else 0,
                )
                for vec in peaks
            )
        )
        for peaks in live
    )


def done_sums_of(live: Live, done: Done, chunks: int) -> DoneSums:
    """``DoneSums`` of ``live`` with its chunks done."""
    pp, last = len(live), chunks - 1
    out = []
    for r, peaks in enumerate(live):
        own = range(r, chunks, pp)
        rows = []
        for vec, d in zip(peaks, done[r]):
            copies = dict(vec)
            left = [ch for ch in own if ch not in d]
            groups = []
            for pend in (True, False):
                xs = [copies.get(ch, 0) for ch in own if (ch not in d) == pend]
                if xs:
                    groups.append((pend, min(xs), max(xs)))
            rows.append(
                (
                    sum(x for _, x in vec),
                    copies.get(0, 0),
                    copies.get(last, 0),
                    len(left),
                    0 in left,
                    last in left,
                    tuple(groups),
                )
            )
        out.append(tuple(dict.fromkeys(rows)))  # each distinct row once, as ``sums_of``
    return tuple(out)
