"""``seed_pool.seed_pool`` (``driver.expert_seeds``' classes grouped once) against the filters it replaces, and the
scans ``space.cp1_fits`` and ``scope.unsearched`` now make (``heapq.nsmallest``, ``map``) against their former
forms, on the catalog's requests of bench_plan (a dense model, FP8 on torchtitan, two mixtures of experts)."""

from __future__ import annotations

import pytest

from planner.answer.request import context
from planner.search.seed_pool import seed_pool
from planner.search.space import enumerate_candidates
from planner.specs import ParallelPins, PlanRequest
from tests.plan_support import search_request

CASES = [
    ("llama3-70b", 8, {}),
    ("llama3-70b", 8, {"precision": "fp8", "fp8_recipe": "tensorwise", "stack": "torchtitan"}),
    ("mixtral-8x22b", 16, {"stack": "megatron"}),
    ("deepseek-v3", 256, {"stack": "megatron", "global_batch_size": 15360, "seq_len": 4096}),
]


def _request(model: str, nodes: int, training: dict) -> PlanRequest:
    return search_request(model, "h100-sxm5-80gb", nodes, 8, 256, 4096, training)


def former_pool(cands, gpn):
    """``driver.expert_seeds``' former filters: (recompute, pp) → the classes, as it visited them."""
    tps = {c.tp for c in cands}
    tp = max((t for t in tps if t <= gpn), default=min(tps))
    pool = [c for c in cands if c.tp == tp]
    sp = any(c.sequence_parallel for c in pool)
    pool = [c for c in pool if c.sequence_parallel == sp]
    out = {}
    for recompute in ("selective", "full", "none", "layernorm+moe_act"):
        level = [c for c in pool if c.recompute == recompute]
        for pp in sorted({c.pp for c in level}):
            out[recompute, pp] = [c for c in level if c.pp == pp]
    return out


@pytest.mark.parametrize("model, nodes, training", CASES)
def test_seed_pool_is_the_former_filters(model: str, nodes: int, training: dict) -> None:
    req = _request(model, nodes, training)
    ctx = context(req)
    cands = enumerate_candidates(ctx, req.parallel, req.options)
    got, ref = seed_pool(cands, 8), former_pool(cands, 8)
    assert set(got) == set(ref) and all(got[k] == ref[k] for k in ref)
    for recompute in ("selective", "full", "none"):  # the pp degrees visited, in order
        assert sorted(p for r, p in got if r == recompute) == sorted(p for r, p in ref if r == recompute)
    # ``cp1_fits``' filters (``compress``) and ``scope``'s scans (``map``) against the former comprehensions
    from itertools import compress, repeat
    from operator import attrgetter, eq

    for field, value in (("cp", 1), ("recompute", "full")):
        got_ = list(compress(cands, map(eq, map(attrgetter(field), cands), repeat(value))))
        assert got_ == [c for c in cands if getattr(c, field) == value]
    assert (max((c.cp for c in cands), default=1) == 1) == (not any(c.cp > 1 for c in cands))
    pv = {pp for pp, v in {(c.pp, c.virtual_stages) for c in cands} if v > 1}
    assert pv == {c.pp for c in cands if c.virtual_stages > 1}


def test_nsmallest_is_sorted_head() -> None:
    """``cp1_fits``' ``heapq.nsmallest(64, …, key)``: ``sorted(…, key)[:64]``, ties kept in their order."""
    import heapq

    req = _request("llama3-70b", 8, {})
    ctx = context(req)
    cands = enumerate_candidates(ctx, req.parallel, req.options)

    def key(c):
        return (c.recompute != "full", -c.zero_stage, -c.tp * c.pp, c.virtual_stages)

    for seq in (cands, [c for c in cands if c.recompute == "full"], cands[:50]):
        assert heapq.nsmallest(64, seq, key=key) == sorted(seq, key=key)[:64]


def test_queue_items_built_as_tuples_are_the_named_tuples() -> None:
    """``frontier._item`` (``tuple.__new__``) builds the very ``QueueItem`` its constructor and ``_replace`` do."""
    from planner.search.frontier import Key, QueueItem, _item

    a, b = QueueItem(7, (1, "x"), Key.FLOOR), _item(QueueItem, (7, (1, "x"), Key.FLOOR, 0))
    assert (
        a == b
        and type(b) is QueueItem
        and (b.bound, b.order, b.key, b.rest, b.cand) == (7, (1, "x"), Key.FLOOR, 0, "x")
    )
    assert a._replace(key=Key.SETTLED) == _item(QueueItem, (7, (1, "x"), Key.SETTLED, 0))
    f = QueueItem(3, (2,), Key.FAMILY, 4)
    assert f._replace(key=Key.SETTLED) == _item(QueueItem, (f.bound, f.order, Key.SETTLED, f.rest))


@pytest.mark.parametrize("model, nodes, training", CASES[1:])
def test_screen_at_a_cut_memoised_is_the_screen(model: str, nodes: int, training: dict) -> None:
    """``screens.quick_may_fit`` at a cut (memoised by class and cut) against ``_quick_may_fit`` on every one-cut class
    (one stage; an even-only stack's interleaved split), asked twice as the frontier and the search do."""
    from planner.search.driver import one_cut
    from planner.search.screens import _quick_may_fit, quick_may_fit

    req = _request(model, nodes, training)
    ctx = context(req)
    cands = enumerate_candidates(ctx, req.parallel, req.options)
    checked = 0
    for c in cands[::7]:
        cut = one_cut(ctx, req.parallel, c)
        if cut is None or c.chunks > ctx.model.num_layers:
            continue
        want = _quick_may_fit(ctx, c, cut)
        assert quick_may_fit(ctx, c, cut) == want == quick_may_fit(ctx, c, list(cut))
        checked += 1
    assert checked > 20


def _former_members(self, item):
    """``Frontier.members`` before its members were keyed by their lean bound at once: at the family's floor key."""
    from planner.search.frontier import _FAMILY, _FLOOR, QueueItem, simplicity

    entry = self._families[id(item.order[-1])]
    chain, least = entry
    i, fb = item.rest, item.bound
    out = [QueueItem(fb, simplicity(c), _FLOOR) for c in chain[i]]
    if i + 1 < len(chain):
        nxt = least[i + 1]
        self._families[id(nxt)] = entry
        out.append(QueueItem(self.floor(chain.first(i + 1)), simplicity(nxt), _FAMILY, i + 1))
    return out


@pytest.mark.parametrize("model, nodes, training", CASES[2:])
def test_members_at_their_lean_keys_leave_in_the_former_order(
    model: str, nodes: int, training: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A MoE queue popped with its family members keyed by their lean bound at once leaves its classes in the very
    order (bound, order, key) the former members at their floor keys did: the first 3,000 pops, and what
    ``remaining`` then lists (its first 3,000)."""
    from itertools import islice

    from planner.search.frontier import Frontier
    from planner.search.space import enumerate_classes

    req = _request(model, nodes, training)
    ctx = context(req)
    cands, families = enumerate_classes(ctx, req.parallel, req.options)
    new = Frontier(ctx, req.parallel, cands, families)
    got = [new.pop() for _ in range(3000)]
    rest = list(islice(new.remaining(), 3000))
    monkeypatch.setattr(Frontier, "members", _former_members)
    old = Frontier(ctx, req.parallel, cands, families)
    want = [old.pop() for _ in range(3000)]
    assert got == want and any(x is not None for x in got)
    assert rest == list(islice(old.remaining(), 3000))


@pytest.mark.parametrize("model, nodes, training", CASES)
def test_scope_from_families_is_the_scope_from_classes(model: str, nodes: int, training: dict) -> None:
    """``scope.unsearched`` read from one class a family: the note it writes from every class."""
    from planner.search.scope import unsearched
    from planner.search.space import enumerate_classes

    for pins in ({}, {"schedule": "1f1b"}, {"virtual_stages": 2}):
        req = _request(model, nodes, training).model_copy(update={"parallel": ParallelPins(**pins)})
        ctx = context(req)
        cands, families = enumerate_classes(ctx, req.parallel, req.options)
        for budget in (None, "some interleaved classes"):
            want = unsearched(ctx, req.parallel, cands, budget)
            assert unsearched(ctx, req.parallel, cands, budget, families) == want
