"""Activation peaks that also say which chunks hold their gradients (cost model 51): for a class whose gradients
accumulate unsharded across the step's micro-batches (``workload.accumulation.DpSchedule.whole_grads``: FSDP2 under
``torch.distributed.pipelining``, FSDP1 under ``no_sync``), a chunk's accumulated gradient exists only from that
chunk's first backward of the step on. FSDP2's ``post_backward`` creates it (``to_accumulated_grad_if_needed``:
``unsharded_accumulated_grad = grad.to(reduce_dtype)``, torch 2.13.0 ``_fsdp_param_group.py:606-611``,
``_fsdp_param.py:802-819``) and frees it after the last backward's reduce-scatter; the sharded gradient of the
previous step is gone by then (torchtitan's ``optimizers.zero_grad()``: ``set_to_none`` by default). So a peak of
the schedule's order that precedes a chunk's first backward (interleaved 1F1B's and GPipe's warm-up, 1F1B's first
forward on rank i with m ≤ pp − i) holds none of that chunk's gradients.

``live_and_done`` walks every rank's order (``simulate.rank_orders``) and keeps, besides the activation peaks
(after a forward followed by a backward or at the end, as ``cost.live_vectors_cached``), the state right after each
chunk's first backward (its gradient just allocated, one activation copy fewer): each as the (chunk, copies alive)
pairs of the chunks seen so far and the chunks whose backward has run; those another one dominates (as many copies
of every chunk, every chunk it has done done) dropped. ``memory.pending_grads`` prices what a peak lacks."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from planner.compose.simulate import rank_orders

if TYPE_CHECKING:
    from planner.compose.cost import Live

#: Per rank, aligned with its peaks in ``Live``: the chunks whose first backward of the step has run at the peak.
Done = tuple[tuple[tuple[int, ...], ...], ...]

Peak = tuple[tuple[tuple[int, int], ...], tuple[int, ...]]


@lru_cache(maxsize=1024)
def live_and_done(schedule: str, pp: int, v: int, m: int) -> tuple[Live, Done]:
    """Per rank, its non-dominated peaks (``Live``) and the chunks done at each (``Done``), from its order."""
    lives, dones = [], []
    for r, ops in enumerate(rank_orders(schedule, pp, v, m)):
        alive = [0] * v  # by local chunk index c // pp
        seen: tuple[int, ...] = ()
        done: tuple[int, ...] = ()
        peaks: set[Peak] = set()
        for idx, (kind, _, c) in enumerate(ops):
            k = c // pp
            if kind == "F":
                if k not in seen:
                    seen = tuple(sorted((*seen, k)))
                alive[k] += 1
                if idx + 1 == len(ops) or ops[idx + 1][0] == "B":  # a local maximum of the activations
                    peaks.add(_peak(pp, r, alive, seen, done))
            else:
                alive[k] -= 1
                if k not in done:  # the chunk's gradient allocated
                    done = tuple(sorted((*done, k)))
                    peaks.add(_peak(pp, r, alive, seen, done))
        keep = [p for p in peaks if not any(q != p and _dominates(q, p) for q in peaks)]
        keep.sort()
        lives.append(tuple(p[0] for p in keep))
        dones.append(tuple(p[1] for p in keep))
    return tuple(lives), tuple(dones)


def _peak(pp: int, r: int, alive: list[int], seen: tuple[int, ...], done: tuple[int, ...]) -> Peak:
    """Rank r's state: the copies alive of the chunks seen, the chunks done (local indices → chunk ids)."""
    return tuple((x * pp + r, alive[x]) for x in seen), tuple(x * pp + r for x in done)


def _dominates(q: Peak, p: Peak) -> bool:
    """Whether q needs at least p's memory: as many copies of every chunk, and every chunk done at p done at q."""
    copies = dict(q[0])
    return all(copies.get(c, 0) >= k for c, k in p[0]) and set(p[1]) <= set(q[1])
