"""The search's queue of configuration classes, best lower bound first, each bound tightened lazily.

A class enters with ``bounds.lean_bound`` (from its layer times alone: one per (mbs, tp, SP, recompute,
pp, schedule, v, dp), shared by the ZeRO stages), is re-keyed by ``bounds.quick_bound`` (its
``terms.shared_terms``: ZeRO, the end of step) when it reaches the front — unless the memory screen the search
applies to it anyway (``screens.quick_may_fit``, from its memory terms alone) rules it out first: then it leaves
at its lean bound and its times are never priced (DeepSeek-V3 on 2,048 GPUs: 258 of 2,092 shared terms priced), and a class with one allowed
cut (interleaved's uniform split) once more by ``bounds.cut_bound``; the search may push a costed class
back by its exact ``bounds.fitting_bound``. Every key is a valid lower bound of the class's objective
and never falls, so classes leave the queue in the order of their tightest bound: only the classes that
get near the front pay for the tighter ones (GPT-3 175B on 1,024 A100: 12,960 classes, ~2,500 quick
bounds instead of all).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from enum import IntEnum
from typing import NamedTuple

from planner.compose.cost import Candidate, Context
from planner.search.bounds import cut_bound, lean_bound, quick_bound, quick_may_fit
from planner.search.space import forced_cut, simplicity
from planner.specs import ParallelPins


class Key(IntEnum):
    LEAN = 0  # ``lean_bound``
    QUICK = 1  # ``quick_bound`` of a one-cut class, ``cut_bound`` still to come
    SETTLED = 2  # the tightest bound before costing


class QueueItem(NamedTuple):
    """A class waiting in the queue (a NamedTuple: compared as a tuple, at C speed)."""

    bound: int  # a valid lower bound of its objective
    order: tuple  # ``simplicity``: ties are visited simplest first (it ends with the candidate: unique)
    key: Key

    @property
    def cand(self) -> Candidate:
        return self.order[-1]


class Frontier:
    def __init__(self, ctx: Context, pins: ParallelPins, cands: list[Candidate]):
        self.ctx, self.pins = ctx, pins
        self._quick: dict[tuple, int] = {}
        lean: dict[tuple, int] = {}
        loads: dict[tuple, int] = {}  # ``lean_bound``'s busiest-rank loads, shared by dp and the schedule
        self.heap: list[QueueItem] = []
        heap, lean_key = self.heap, Key.LEAN
        for c in cands:
            k = (
                c.micro_batch_size,
                c.tp,
                c.sequence_parallel,
                c.recompute,
                c.pp,
                c.schedule,
                c.virtual_stages,
                c.dp,
                c.cp,
                c.tp_comm_overlap,
                c.ep,
                c.etp,
            )
            b = lean.get(k)
            if b is None:
                b = lean[k] = lean_bound(ctx, c, loads)
            heap.append(QueueItem(b, simplicity(c), lean_key))
        heapq.heapify(heap)

    def quick(self, c: Candidate) -> int:
        """``quick_bound``, memoised (the interleaved one does not depend on v: shared)."""
        k: tuple = (
            c.tp,
            c.pp,
            c.dp,
            c.cp,
            c.cp_comm,
            c.micro_batch_size,
            c.recompute,
            c.sequence_parallel,
            c.zero_stage,
            c.tp_comm_overlap,
            c.ep,
            c.etp,
        )
        if c.virtual_stages == 1:
            k = (*k, c.schedule)
        if k not in self._quick:
            self._quick[k] = quick_bound(self.ctx, c)
        return self._quick[k]

    def _quick_item(self, item: QueueItem) -> QueueItem:
        c = item.cand
        if self.pins.stage_layers is None and c.virtual_stages == 1 and c.pp > 1 and not quick_may_fit(self.ctx, c):
            # memory rules out every cut (the search's own screen of such a class, from its memory terms alone):
            # settled at its lean bound, the search drops it, and its times are never priced
            return item._replace(key=Key.SETTLED)
        one_cut = c.virtual_stages > 1 and forced_cut(self.ctx, self.pins, c) is not None
        return QueueItem(max(item.bound, self.quick(c)), item.order, Key.QUICK if one_cut else Key.SETTLED)

    def pop(self) -> QueueItem | None:
        """The class with the smallest bound, its bound settled; None when the queue is empty."""
        heap = self.heap
        while heap:
            item = heapq.heappop(heap)
            if item.key == Key.SETTLED:
                return item
            if item.key == Key.LEAN:
                heapq.heappush(heap, self._quick_item(item))
                continue
            cut = forced_cut(self.ctx, self.pins, item.cand)
            assert cut is not None
            if self.pins.stage_layers is None and not quick_may_fit(self.ctx, item.cand, cut):
                return item._replace(key=Key.SETTLED)  # memory rules it out (the loop says so): no need to re-key
            heapq.heappush(
                heap, QueueItem(max(item.bound, cut_bound(self.ctx, item.cand, cut)), item.order, Key.SETTLED)
            )
        return None

    def push(self, item: QueueItem) -> None:
        heapq.heappush(self.heap, item)

    def remaining(self) -> list[QueueItem]:
        return sorted(self.heap)

    def by_quick_bound(self, keep: Callable[[Candidate], bool]) -> Iterator[QueueItem]:
        """The classes ``keep`` accepts in the order of their quick bound (then simplicity), lazily: what
        ``search.probe`` visits (the queue itself is left as it is)."""
        heap = [item for item in self.heap if keep(item.cand)]
        heapq.heapify(heap)
        while heap:
            item = heapq.heappop(heap)
            if item.key == Key.LEAN:
                heapq.heappush(heap, item._replace(bound=max(item.bound, self.quick(item.cand)), key=Key.SETTLED))
            else:
                yield item
