"""The search's queue of configuration classes, best lower bound first, each bound tightened lazily.

A class enters with ``bounds.lean_bound`` (from its layer times alone: one per (mbs, tp, SP, recompute,
pp, schedule, v, dp), shared by the ZeRO stages; a mixture of experts' class one level lower, at its floor key
``lean_bound(floor=True)``, which prices no (ep, etp) layout, re-keyed by its lean bound at the front), is re-keyed by ``bounds.quick_bound`` (its
``terms.shared_terms``: ZeRO, the end of step) when it reaches the front — unless the memory screen the search
applies to it anyway (``screens.quick_may_fit``, from its memory terms alone) rules it out first: then it leaves
at its lean bound and its times are never priced (DeepSeek-V3 on 2,048 GPUs: 258 of 2,092 shared terms priced), and a class with one allowed
cut (an even-only stack's split) once more by ``bounds.cut_bound``; the search may push a costed class
back by its exact ``bounds.fitting_bound``. Every key is a valid lower bound of the class's objective
and never falls, so classes leave the queue in the order of their tightest bound: only the classes that
get near the front pay for the tighter ones (GPT-3 175B on 1,024 A100: 12,960 classes, ~2,500 quick
bounds instead of all).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from enum import IntEnum
from itertools import accumulate
from operator import attrgetter
from typing import NamedTuple

from planner.compose.blocks import WINDOW, block_sequence, has_moe_blocks
from planner.compose.context_parallel import cp_view
from planner.compose.cost import Candidate, Context
from planner.compose.layer_group import moe_floor
from planner.search.bounds import cut_bound, floor_bound, lean_bound, quick_bound, quick_may_fit
from planner.search.dense_families import dense_families
from planner.search.families import Chain, Family
from planner.search.families import chain as family_groups
from planner.search.lean import LeanWeights
from planner.search.space import forced_cut, simplicity
from planner.specs import ParallelPins


class Key(IntEnum):
    LEAN = 0  # ``lean_bound``
    FLOOR = (
        3  # a first key below ``lean_bound`` (a CP class's ``floor_bound``; a MoE model's ``lean_bound(floor=True)``)
    )
    QUICK = 1  # ``quick_bound`` of a one-cut class, ``cut_bound`` still to come
    SETTLED = 2  # the tightest bound before costing
    FAMILY = 4  # a MoE model's classes that differ only in ZeRO stage, CP exchange and (ep, etp): their least floor key


#: ``Key``'s members as module constants: an enum member read off its class (``Key.SETTLED``) costs ~0.4 µs on
#: Python 3.11, a module global ~20 ns, and the queue's loops read them for every item popped (DeepSeek-V3 on 2,048
#: GPUs: ~36,000 pops of a plan)
_LEAN, _FLOOR, _QUICK, _SETTLED, _FAMILY = Key.LEAN, Key.FLOOR, Key.QUICK, Key.SETTLED, Key.FAMILY


class QueueItem(NamedTuple):
    """A class waiting in the queue (a NamedTuple: compared as a tuple, at C speed)."""

    bound: int  # a valid lower bound of its objective
    order: tuple  # ``simplicity``: ties are visited simplest first (it ends with the candidate: unique)
    key: Key
    #: a FAMILY item: its first group of members still folded in it (``family_chain``; (bound, order, key) are unique
    #: in a queue, so this is never compared)
    rest: int = 0

    @property
    def cand(self) -> Candidate:
        return self.order[-1]


#: ``QueueItem(bound, order, key, rest)`` as ``tuple.__new__(QueueItem, (…))``, every field given: the same tuple
#: without the NamedTuple's ``__new__`` (a Python function, ~0.5 µs) or ``_replace`` (~2 µs); the queue builds ~60k
#: items a plan on DeepSeek-V3 (``tests/test_search_fast_paths.py`` checks the two equal)
_item = tuple.__new__


#: The fields ``lean_bound`` reads, as a tuple: its memo's key (an ``attrgetter``: asked of every class popped).
lean_key: Callable[[Candidate], tuple] = attrgetter(
    "micro_batch_size",
    "tp",
    "sequence_parallel",
    "recompute",
    "pp",
    "schedule",
    "virtual_stages",
    "dp",
    "cp",
    "tp_comm_overlap",
    "ep",
    "etp",
)


def moe_families(ctx: Context) -> bool:
    """Whether a MoE model's floor key reads a class's (ep, etp) pair only through ``layer_group.moe_floor`` (every
    model of MoE blocks but a windowed one's two kinds, which ``lean_bound(floor=True)`` prices exactly)."""
    return not block_sequence(ctx)[0][-1].endswith(WINDOW)


def family_chain(ctx: Context, members: list[Candidate], memo: dict | None = None) -> list[list[Candidate]]:
    """A family's members (classes that differ only in ZeRO stage, CP exchange and (ep, etp)) grouped by their MoE block floor F + B (``moe_floor``), least first: ``lean_bound(floor=True)`` reads
    the pair through that sum alone and ``lean_pipe`` is non-decreasing in it (the MoE layers' weight; every layer's
    on a model of MoE blocks alone), so the groups' floor keys are non-decreasing along the chain and a group's
    members share one. ``tests/test_expert_floor.py`` checks both on every family. ``memo``: the weights by (cp, mbs,
    tp, SP, recompute, TP overlap) and the pair (shared by the families of other pp, schedules, v, dp)."""
    c0 = members[0]
    view = cp_view(ctx, c0.cp)
    at = (c0.micro_batch_size, c0.tp, c0.sequence_parallel, c0.recompute, c0.tp_comm_overlap)
    weights: dict[tuple[int, int], int] = memo.setdefault((c0.cp, *at), {}) if memo is not None else {}
    groups: dict[int, list[Candidate]] = {}
    for c in members:
        pair = (c.ep, c.etp)
        w = weights.get(pair)
        if w is None:
            w = weights[pair] = sum(moe_floor(view, *at, *pair))
        groups.setdefault(w, []).append(c)
    return [groups[w] for w in sorted(groups)]


#: The fields a family's members differ in, in ``simplicity``'s order of them: the least member's order is the least
#: ``simplicity`` of the family (its other fields are one class's).
IN_FAMILY = attrgetter("zero_stage", "ep", "etp", "cp_comm")
#: ``lean_key`` less (ep, etp): a family's key.
FAMILY_KEY = attrgetter(
    "micro_batch_size",
    "tp",
    "sequence_parallel",
    "recompute",
    "pp",
    "schedule",
    "virtual_stages",
    "dp",
    "cp",
    "tp_comm_overlap",
)


def family_floor(
    ctx: Context,
    members: list[Candidate],
    floors: dict[tuple, int | None],
    loads: dict[tuple, int],
    weights: dict[tuple, LeanWeights] | None = None,
) -> int:
    """The least ``lean_bound(floor=True)`` (memoised in ``floors`` by ``lean_key``) of a family's members: its first
    group's (``family_chain``). ``tests/test_expert_floor.py`` checks it is the minimum."""
    best = family_chain(ctx, members)[0][0]
    k = lean_key(best)
    fb = floors.get(k)
    if fb is None:
        fb = lean_bound(ctx, best, loads, True, weights)
        floors[k] = fb
    return fb


class Frontier:
    def __init__(self, ctx: Context, pins: ParallelPins, cands: list[Candidate], families: list[Family] | None = None):
        """``families``: ``cands`` as ``space.enumerate_classes`` grouped them (``families.chain``), when it is they."""
        self.ctx, self.pins = ctx, pins
        self._quick: dict[Candidate, int] = {}
        self._lean: dict[tuple, int] = {}
        self._loads: dict[tuple, int] = {}  # ``lean_bound``'s busiest-rank loads, shared by dp and the schedule
        self._weights: dict[tuple, LeanWeights] = {}  # ``lean_bound``'s layer weights, shared by pp, dp, the schedule
        # ``floor_bound``'s (CP) or ``lean_bound(floor=True)``'s (MoE), by ``lean_key``
        floors: dict[tuple, int | None] = {}
        layer_floors: dict[tuple, tuple[int, int] | None] = {}  # ``floor_bound``'s memo
        # A mixture of experts enters at its floor key (``lean_bound(floor=True)``: the MoE blocks' times at every ep's
        # floor), re-keyed by its lean bound when it reaches the front: only the (ep, etp) pairs of the classes near
        # the front are priced (DeepSeek-V3 on 2,048 GPUs: 2,466 layer groups → 290). Every key a bound ≤ the next.
        self._moe = moe = has_moe_blocks(ctx)
        self.heap: list[QueueItem] = []
        self._floors = floors
        # a FAMILY item's chain of member groups (``family_chain``) and, per group, the least member from it on (its
        # ``simplicity``: the least order): by the class a FAMILY item's order ends with (its ``cand``), entered when
        # that item is made (by the class's id: the classes are kept alive by the chains, and an item's ``cand`` is
        # that very object); the orders of the groups never reached are never built (DeepSeek-V3: 7,644 of 35,790)
        self._families: dict[int, tuple[Chain, list[Candidate]]] = {}
        self._dense: set[int] = set()  # those of them ``dense_families`` made (by the same id), raised at the front
        heap, lean, lean_tag, floor_tag = self.heap, self._lean, _LEAN, _FLOOR
        # MoE blocks windowed and full (gpt-oss): ``lean_bound(floor=True)`` prices the layers exactly, as ``lean_bound``
        # (``lean.lean_weights``), so a class enters at its lean bound, not at that floor then re-keyed by the same
        # value (gpt-oss 120B on 64 H100: 8,558 lean bounds priced twice)
        exact_floor = moe and block_sequence(ctx)[0][-1].endswith(WINDOW)
        if moe and moe_families(ctx):  # one item per family at its least floor key (``family_floor``)
            for chain, least in self._chains(cands, families):
                self._families[id(least[0])] = (chain, least)
                heap.append(_item(QueueItem, (self.floor(chain.first(0)), simplicity(least[0]), _FAMILY, 0)))
            heapq.heapify(heap)
            return
        if families is not None and not moe:  # a family's classes share their first key: one item (``dense_families``)
            items, cands = dense_families(ctx, families, floors, layer_floors, lean_key)
            for first_key, head, group in items:
                self._families[id(head)] = (group, [head])
                self._dense.add(id(head))
                heap.append(_item(QueueItem, (first_key, simplicity(head), _FAMILY, 0)))
        for c in cands:
            k = lean_key(c)
            if moe and not exact_floor:
                fb = floors.get(k)
                if fb is None:
                    fb = floors[k] = lean_bound(ctx, c, self._loads, True, self._weights)
                heap.append(_item(QueueItem, (fb, simplicity(c), floor_tag, 0)))
                continue
            b = lean.get(k)
            if b is None and exact_floor:  # ``lean_bound`` itself (its ``floor``: the same terms), entered as such
                b = lean[k] = lean_bound(ctx, c, self._loads, weights=self._weights)
            # a CP class: keyed by its FLOP floor, its layers (a view per cp) priced when it nears the front; classes
            # without CP share their layer groups across pp, dp and schedules, and the floor's extra re-keying cost
            # more than it saved there (Llama 3 70B on 64 H100: 231 -> 141 layer groups, 0.29 -> 0.38-0.42 s CPU)
            if b is None and c.cp > 1:
                fb = floors[k] if k in floors else floors.setdefault(k, floor_bound(ctx, c, layer_floors))
                if fb is not None:
                    heap.append(_item(QueueItem, (fb, simplicity(c), floor_tag, 0)))
                    continue
            if b is None:
                b = lean[k] = lean_bound(ctx, c, self._loads, weights=self._weights)
            heap.append(_item(QueueItem, (b, simplicity(c), lean_tag, 0)))
        heapq.heapify(heap)

    def _chains(self, cands: list[Candidate], families: list[Family] | None) -> Iterator[tuple[Chain, list[Candidate]]]:
        """Each family's ``family_chain`` and the least member (``IN_FAMILY``: the least ``simplicity``) of each
        group and after it: from the enumeration's families (``families.chain``), else grouping ``cands``."""
        memo: dict = {}
        if families is not None:
            yield from (family_groups(self.ctx, f, memo) for f in families)
            return
        groups: dict[tuple, list[Candidate]] = {}
        for c in cands:
            groups.setdefault(FAMILY_KEY(c), []).append(c)
        for members in groups.values():
            chain = family_chain(self.ctx, members, memo)
            least = [min(g, key=IN_FAMILY) for g in chain]
            for i in range(len(least) - 2, -1, -1):
                least[i] = min(least[i], least[i + 1], key=IN_FAMILY)
            flat = [c for g in chain for c in g]
            ends = list(accumulate(len(g) for g in chain))
            yield Chain([flat], [list(range(e - len(g), e)) for g, e in zip(chain, ends, strict=True)]), least

    def floor(self, c: Candidate) -> int:
        """``lean_bound(floor=True)``, memoised by ``lean_key``."""
        k = lean_key(c)
        b = self._floors.get(k)
        if b is None:
            b = lean_bound(self.ctx, c, self._loads, True, self._weights)
            self._floors[k] = b
        return b

    def members(self, item: QueueItem) -> list[QueueItem]:
        """A FAMILY item unfolded: the classes of its first group (``family_chain``) at their lean keys (their floor
        key, the family's, raised to their lean bound at once: every member item reached the front and was so re-keyed
        there — DeepSeek-V3 on 2,048 H100: 21,624 of 21,624 — and the queue leaves its classes in the order of their
        final keys however lazily they are raised, so the same order without a pop and a push a member), and the rest
        of the chain as one FAMILY item at the next group's floor key (≥ it: the chain's keys do not fall) and the least
        order of its members (≤ each): every class leaves the queue as it would queued at its own floor key, and the
        groups never reached are never keyed. ``tests/test_search_fast_paths.py`` checks the order against the former
        members at their floor keys."""
        entry = self._families[id(item.order[-1])]
        chain, least = entry
        i = item.rest
        fb = item.bound  # ``floor(chain.first(i))``, the item's key: the group's members share it (``family_chain``)
        lean = self.lean
        group = chain[i]
        if len(chain.idx[i]) == 1:  # one (ep, etp) pair: the members differ in ZeRO stage and CP exchange, one lean_key
            b = max(fb, lean(group[0]))
            out = [_item(QueueItem, (b, simplicity(c), _LEAN, 0)) for c in group]
        else:
            out = [_item(QueueItem, (max(fb, lean(c)), simplicity(c), _LEAN, 0)) for c in group]
        if i + 1 < len(chain):
            nxt = least[i + 1]
            self._families[id(nxt)] = entry
            out.append(_item(QueueItem, (self.floor(chain.first(i + 1)), simplicity(nxt), _FAMILY, i + 1)))
        return out

    def _raised(self, item: QueueItem) -> QueueItem | None:
        """A FAMILY item of ``dense_families`` (one group of one (ep, etp) pair: its members share ``lean_key``) at
        their lean bound, where that is above its key; else None (a MoE family's items keep their floor keys)."""
        if id(item.order[-1]) not in self._dense:
            return None
        chain = self._families[id(item.order[-1])][0]
        if (b := self.lean(chain.first(0))) <= item.bound:
            return None
        return _item(QueueItem, (b, item.order, _FAMILY, 0))

    def lean(self, c: Candidate) -> int:
        """``lean_bound``, memoised by ``lean_key``."""
        k = lean_key(c)
        b = self._lean.get(k)
        if b is None:
            b = self._lean[k] = lean_bound(self.ctx, c, self._loads, weights=self._weights)
        return b

    def quick(self, c: Candidate) -> int:
        """``quick_bound``, memoised by its class's shared terms and schedule. The interleaved one is keyed by v too:
        it is higher where v leaves one layer a chunk (Llama 3 8B on PP4: 31.44 s at v = 8, 28.52 s at v = 2…7), so a
        value shared across v would be valid only if the smaller v always asked first. Those fields are every field of
        the class: keyed by the class itself (its hash kept), not a tuple of them built each ask."""
        b = self._quick.get(c)
        if b is None:
            b = self._quick[c] = quick_bound(self.ctx, c)
        return b

    def _quick_item(self, item: QueueItem) -> QueueItem:
        c = item.cand
        # one chunk per rank: every cut's screen (memoised); else, on a mixture of experts, the class's one cut where it
        # has one (``driver.one_cut``), else every cut's (DeepSeek-V3 on 2,048 GPUs: 4,146 quick bounds of classes
        # memory rules out; elsewhere most classes at the front fit: Llama 3 405B at 131K tokens 1.8 -> 2.5 s CPU)
        spread = c.virtual_stages == 1 and c.pp > 1
        cut = None if spread else forced_cut(self.ctx, self.pins, c)
        at = cut if c.chunks > 1 else [self.ctx.model.num_layers]  # ``driver.one_cut``
        if self.pins.stage_layers is None and (spread or self._moe) and not quick_may_fit(self.ctx, c, at):
            # memory rules out every cut (the search's own screen of such a class, from its memory terms alone; at its
            # one cut, the very screen the search applies): settled at its lean bound, the search drops it, and its
            # times are never priced
            return _item(QueueItem, (item.bound, item.order, _SETTLED, item.rest))
        one_cut = c.virtual_stages > 1 and cut is not None
        return _item(QueueItem, (max(item.bound, self.quick(c)), item.order, _QUICK if one_cut else _SETTLED, 0))

    def pop(self) -> QueueItem | None:
        """The class with the smallest bound, its bound settled; None when the queue is empty. An item re-keyed goes
        back with ``heappushpop`` (the push and the next pop in one: the same item comes next, fewer heap moves)."""
        heap = self.heap
        if not heap:
            return None
        push, pushpop = heapq.heappush, heapq.heappushpop
        item = heapq.heappop(heap)
        while True:
            key = item.key
            if key == _SETTLED:
                return item
            if key == _FAMILY:
                if (up := self._raised(item)) is not None:  # at its members' lean bound first (``dense_families``)
                    item = pushpop(heap, up)
                    continue
                *first, last = self.members(item)
                for member in first:
                    push(heap, member)
                item = pushpop(heap, last)
            elif key == _FLOOR:
                item = pushpop(
                    heap, _item(QueueItem, (max(item.bound, self.lean(item.order[-1])), item.order, _LEAN, 0))
                )
            elif key == _LEAN:
                item = pushpop(heap, self._quick_item(item))
            else:
                cut = forced_cut(self.ctx, self.pins, item.cand)
                assert cut is not None
                if self.pins.stage_layers is None and not quick_may_fit(self.ctx, item.cand, cut):
                    return _item(
                        QueueItem, (item.bound, item.order, _SETTLED, 0)
                    )  # memory rules it out (the loop says so): no need to re-key
                b = max(item.bound, cut_bound(self.ctx, item.cand, cut))
                item = pushpop(heap, _item(QueueItem, (b, item.order, _SETTLED, 0)))

    def push(self, item: QueueItem) -> None:
        heapq.heappush(self.heap, item)

    def remaining(self) -> Iterator[QueueItem]:
        """The classes left, by bound, lazily (a floor key raised to the lean bound it stands for when it comes
        first: the order of the lean bounds, without pricing the classes never reached)."""
        heap = list(self.heap)
        while heap:
            item = heapq.heappop(heap)
            if item.key == _FAMILY:
                for member in self.members(item):
                    heapq.heappush(heap, member)
            elif item.key == _FLOOR:
                heapq.heappush(heap, QueueItem(max(item.bound, self.lean(item.cand)), item.order, _LEAN))
            else:
                yield item

    def by_quick_bound(self, keep: Callable[[Candidate], bool]) -> Iterator[QueueItem]:
        """The classes ``keep`` accepts in the order of their quick bound (then simplicity), lazily: what
        ``search.probe`` visits (the queue itself is left as it is)."""
        # ``order[-1]``: the class (``QueueItem.cand``); ``keep`` reads no field a family's members differ in
        heap = [item for item in self.heap if keep(item.order[-1])]
        heapq.heapify(heap)
        while heap:
            item = heapq.heappop(heap)
            if item.key == _FAMILY:
                for member in self.members(item):
                    heapq.heappush(heap, member)
            elif item.key == _FLOOR:  # its lean bound first (the layers only), then its quick bound
                heapq.heappush(heap, item._replace(bound=max(item.bound, self.lean(item.cand)), key=_LEAN))
            elif item.key == _LEAN and self._moe:  # memory screened first (``_quick_item``): the probe skips
                heapq.heappush(heap, self._quick_item(item))  # what it rules out, and its times are never priced
            elif item.key == _LEAN:
                heapq.heappush(heap, item._replace(bound=max(item.bound, self.quick(item.cand)), key=_SETTLED))
            else:
                yield item
