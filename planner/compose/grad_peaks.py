"""Activation peaks that also say which chunks hold their gradients (cost model 51): for a class whose gradients
accumulate unsharded across the step's micro-batches (``workload.accumulation.DpSchedule.whole_grads``: FSDP2 under
``torch.distributed.pipelining``, FSDP1 under ``no_sync``), a chunk's accumulated gradient exists only from that
chunk's first backward of the step on. FSDP2's ``post_backward`` creates it (``to_accumulated_grad_if_needed``:
``unsharded_accumulated_grad = grad.to(reduce_dtype)``, torch 2.13.0 ``_fsdp_param_group.py:606-611``,
``_fsdp_param.py:802-819``) and frees it after the last backward's reduce-scatter; the sharded gradient of the
previous step is gone by then (torchtitan's ``optimizers.zero_grad()``: ``set_to_none`` by default). So a peak of
the schedule's order that precedes a chunk's first backward (interleaved 1F1B's and GPipe's warm-up, 1F1B's first
forward on rank i with m ≤ pp − i) holds none of that chunk's gradients.

``schedule_peaks`` walks every rank's order (``simulate.rank_orders``) once for both: the activation peaks (after a
forward followed by a backward or at the end; ``cost.live_vectors_cached``) and, where asked (``grads``), also the
state right after each chunk's first backward (its gradient just allocated, one activation copy fewer), each peak
then with the chunks whose backward has run (``live_and_done``); those another one dominates (as many copies of
every chunk, every chunk it has done done) dropped. ``memory.pending_grads`` prices what a peak lacks."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from planner.compose.simulate import rank_orders

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
    lives, dones = [], []
    for r, ops in enumerate(rank_orders(schedule, pp, v, m)):
        alive = [0] * v  # copies alive of the rank's chunks r, r + pp, … (local index c // pp)
        seen: tuple[int, ...] = ()  # local indices of the chunks forwarded so far, sorted
        done: tuple[int, ...] = ()  # ... whose backward has run (with ``grads``)
        done_ids: tuple[int, ...] = ()  # the same as chunk ids
        # each peak as the sorted (chunk, copies) of the chunks seen, memoised by the counts (the steady
        # state repeats a few of them m·v times)
        as_items: dict[tuple[tuple[int, ...], tuple[int, ...]], Items] = {}
        acts: set[Items] = set()  # the peaks without ``grads``
        with_done: set[Peak] = set()  # ... with
        for idx, (kind, _, c) in enumerate(ops):
            k = c // pp
            if kind == "F":
                if k not in seen:
                    seen = tuple(sorted((*seen, k)))
                alive[k] += 1
                if idx + 1 == len(ops) or ops[idx + 1][0] == "B":  # a local maximum of the activations
                    items = _items(as_items, pp, r, alive, seen)
                    if grads:
                        with_done.add((items, done_ids))
                    else:
                        acts.add(items)
            else:
                alive[k] -= 1
                if grads and k not in done:  # the chunk's gradient allocated
                    done = tuple(sorted((*done, k)))
                    done_ids = tuple(x * pp + r for x in done)
                    with_done.add((_items(as_items, pp, r, alive, seen), done_ids))
        peaks = list(with_done) if grads else [(p, ()) for p in acts]
        keep = [p for p in peaks if not any(q != p and _dominates(q, p) for q in peaks)]
        if grads:
            keep.sort()
        lives.append(tuple(p[0] for p in keep))
        dones.append(tuple(p[1] for p in keep))
    return tuple(lives), tuple(dones) if grads else None


def _items(
    memo: dict[tuple[tuple[int, ...], tuple[int, ...]], Items], pp: int, r: int, alive: list[int], seen: tuple[int, ...]
) -> Items:
    """Rank r's copies alive of the chunks seen (local indices → chunk ids), memoised by the counts."""
    key = (seen, tuple(alive))
    items = memo.get(key)
    if items is None:
        items = memo[key] = tuple((x * pp + r, alive[x]) for x in seen)
    return items


def _dominates(q: Peak, p: Peak) -> bool:
    """Whether q needs at least p's memory: as many copies of every chunk, and every chunk done at p done at q."""
    copies = dict(q[0])
    return all(copies.get(c, 0) >= k for c, k in p[0]) and set(p[1]) <= set(q[1])
