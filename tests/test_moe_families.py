"""A mixture of experts' families as the enumeration hands them to the queue (``search.families``, issues 23 and 26),
checked against what they replace, on the catalog's mixtures of experts on the bench clusters and on seeded random
instances:

- ``space.enumerate_classes``' families hold every class of ``enumerate_candidates`` once, each family's classes
  differing only in ZeRO stage, CP exchange and (ep, etp);
- ``families.chain`` equals ``frontier.family_chain`` of the family's classes grouped by ``frontier.FAMILY_KEY`` (the
  same groups, members in the same order), and its least members equal ``min(…, key=IN_FAMILY)`` of each group and
  every later one;
- the queue built from the families pops the same classes with the same settled bounds in the same order as the queue
  that regroups the classes;
- the queue's memory screen of a MoE class before its quick bound (``Frontier._quick_item``: at the class's one cut,
  else every cut's) leaves the classes that pass the search's own screen (``driver.one_cut``, ``quick_may_fit``) in the
  same order with the same settled bounds as the queue that prices the quick bound first.
"""

from __future__ import annotations

import pytest

from planner.answer.request import context
from planner.compose.context import Context
from planner.search import frontier
from planner.search.bounds import quick_may_fit
from planner.search.driver import one_cut
from planner.search.families import chain
from planner.search.space import enumerate_candidates, enumerate_classes
from planner.specs import ParallelPins, PlanRequest, SearchOptions
from tests.plan_support import search_request
from tests.test_expert_floor import random_instance

CASES = [  # bench_plan's mixtures of experts and bench_plan_wide's, on their clusters
    ("deepseek-v3", "h100-sxm5-80gb", 256, 8, 15360, 4096, "megatron"),
    ("mixtral-8x22b", "h100-sxm5-80gb", 16, 8, 256, 4096, "megatron"),
    ("qwen3-30b-a3b", "h100-sxm5-80gb", 2, 8, 512, 4096, "megatron"),
    ("qwen3-30b-a3b", "h100-sxm5-80gb", 4, 8, 512, 4096, "torchtitan"),
    ("gpt-oss-120b", "h100-sxm5-80gb", 8, 8, 512, 4096, "megatron"),
    ("mixtral-8x7b", "h100-sxm5-80gb", 8, 8, 64, 32768, "megatron"),  # long context: cp > 1, its CP exchanges
]


def request(model, gpu, nodes, gpn, gbs, seq, stack) -> PlanRequest:
    return search_request(model, gpu, nodes, gpn, gbs, seq, {"stack": stack})


def check_families(ctx: Context, pins: ParallelPins, options: SearchOptions) -> int:
    """The families against the regrouped classes; the number of families."""
    cands, families = enumerate_classes(ctx, pins, options)
    assert cands == enumerate_candidates(ctx, pins, options)
    flat = [c for _, rows in families for row in rows for c in row]
    assert sorted(flat) == sorted(cands) and len(set(map(id, flat))) == len(cands)
    grouped: dict[tuple, list] = {}
    for c in cands:
        grouped.setdefault(frontier.FAMILY_KEY(c), []).append(c)
    assert len(grouped) == len(families)
    memo: dict = {}
    for family in families:
        pairs, rows = family
        assert all([(c.ep, c.etp) for c in row] == pairs for row in rows)
        members = grouped[frontier.FAMILY_KEY(rows[0][0])]
        assert sorted(c for row in rows for c in row) == sorted(members)
        got, least = chain(ctx, family, memo)
        want = frontier.family_chain(ctx, members)
        assert [got[i] for i in range(len(got))] == want
        assert [got.first(i) for i in range(len(got))] == [g[0] for g in want]
        assert least == [min((c for g in want[i:] for c in g), key=frontier.IN_FAMILY) for i in range(len(want))]
    return len(families)


@pytest.mark.parametrize(("model", "gpu", "nodes", "gpn", "gbs", "seq", "stack"), CASES)
def test_families_are_the_regrouped_classes_on_the_catalog(model, gpu, nodes, gpn, gbs, seq, stack) -> None:
    req = request(model, gpu, nodes, gpn, gbs, seq, stack)
    assert check_families(context(req), req.parallel, req.options) > 10


def test_families_are_the_regrouped_classes_on_random_instances() -> None:
    assert sum(check_families(random_instance(seed), ParallelPins(), SearchOptions()) for seed in range(24)) > 100


def popped(ctx: Context, pins: ParallelPins, q: frontier.Frontier, n: int) -> list[tuple]:
    out = []
    while len(out) < n and (item := q.pop()) is not None:
        out.append((item.bound, item.cand))
    return out


@pytest.mark.parametrize("case", [CASES[0], CASES[1], CASES[2]])
def test_the_queue_from_families_pops_as_the_regrouping_one(case) -> None:
    req = request(*case)
    ctx = context(req)
    cands, families = enumerate_classes(ctx, req.parallel, req.options)
    with_families = popped(ctx, req.parallel, frontier.Frontier(ctx, req.parallel, cands, families), 3000)
    ctx = context(req)
    regrouped = popped(
        ctx,
        req.parallel,
        frontier.Frontier(ctx, req.parallel, enumerate_candidates(ctx, req.parallel, req.options)),
        3000,
    )
    assert len(with_families) == min(3000, len(cands))
    assert with_families == regrouped


@pytest.mark.parametrize("case", CASES)
def test_the_memory_screen_first_keeps_the_classes_that_fit_in_order(case, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the search keeps of the queue (the classes its own memory screen passes) is the same with the screen before
    the quick bound and after it; the screen rules out classes the quick-bound-first queue priced (the test checks)."""
    req = request(*case)
    pins = req.parallel

    def kept(screen_first: bool, n: int = 40) -> tuple[list[tuple], int]:
        """The first ``n`` classes the search keeps, and how many it rules out by memory before them."""
        ctx = context(req)
        cands, families = enumerate_classes(ctx, pins, req.options)
        q = frontier.Frontier(ctx, pins, cands, families)
        assert q._moe
        q._moe = screen_first
        out, ruled = [], 0
        while len(out) < n and (item := q.pop()) is not None:
            if quick_may_fit(ctx, item.cand, one_cut(ctx, pins, item.cand)):
                out.append((item.bound, item.cand))
            else:
                ruled += 1
        return out, ruled

    first, ruled_first = kept(True)
    after, ruled_after = kept(False)
    assert first and first == after
    assert ruled_first > 0


@pytest.mark.parametrize("case", CASES)
def test_the_probe_order_screened_first_keeps_the_classes_that_fit_in_order(case) -> None:
    """``Frontier.by_quick_bound`` (what ``driver.probe`` visits) with a MoE class's memory screen before its quick
    bound: the one-cut classes that pass the probe's own screen come in the same order with the same bounds as when
    every class is priced first (the probe skips the rest; only where they fall in its scan moves)."""
    req = request(*case)
    pins = req.parallel

    def one_cut_only(c) -> bool:
        return c.chunks == 1 or (context(req).stack.even_stages and c.virtual_stages > 1)

    def kept(screen_first: bool, n: int = 40) -> tuple[list[tuple], int]:
        ctx = context(req)
        cands, families = enumerate_classes(ctx, pins, req.options)
        q = frontier.Frontier(ctx, pins, cands, families)
        q._moe = screen_first
        out, ruled = [], 0
        for item in q.by_quick_bound(one_cut_only):
            if len(out) >= n:
                break
            if quick_may_fit(ctx, item.cand, one_cut(ctx, pins, item.cand)):
                out.append((item.bound, item.cand))
            else:
                ruled += 1
        return out, ruled

    first, _ = kept(True)
    after, _ = kept(False)
    assert first == after


def test_a_windowed_moe_floor_is_its_lean_bound() -> None:
    """MoE blocks windowed and full (gpt-oss): ``lean_bound(floor=True)`` is ``lean_bound`` on every class, so the queue
    enters such a class at its lean bound (``Frontier``'s ``exact_floor``), not at that floor re-keyed by the same
    value; and it pops the same classes with the same bounds in the same order as queued at the floor."""
    from planner.search.bounds import lean_bound

    req = request(*CASES[4])
    ctx = context(req)
    cands = enumerate_candidates(ctx, req.parallel, req.options)
    assert not frontier.moe_families(ctx)
    for c in cands[::7]:
        assert lean_bound(ctx, c, floor=True) == lean_bound(ctx, c), c
    q = frontier.Frontier(ctx, req.parallel, cands)
    assert {item.key for item in q.heap} == {frontier.Key.LEAN}
    entered = popped(ctx, req.parallel, q, 1500)

    ctx = context(req)
    floors = frontier.Frontier(ctx, req.parallel, [])  # queued at the floor, as before: the same pops
    floors.heap = [
        frontier.QueueItem(lean_bound(ctx, c, floor=True), frontier.simplicity(c), frontier.Key.FLOOR) for c in cands
    ]
    frontier.heapq.heapify(floors.heap)
    assert popped(ctx, req.parallel, floors, 1500) == entered


@pytest.mark.parametrize("case", [CASES[4], ("gpt-oss-120b", "h100-sxm5-80gb", 8, 8, 64, 65536, "megatron")])
def test_the_window_view_prices_the_experts_alike(case) -> None:
    """``experts.expert_terms`` is shared between a context and its window view (``blocks.window_view``) where it
    has no profile: the view's own terms, priced afresh, equal the context's at every point the search prices (a
    long context: CP views and their window views too)."""
    from planner.compose.blocks import window_view
    from planner.compose.context_parallel import cp_view
    from planner.compose.experts import expert_terms

    req = request(*case)
    ctx = context(req)
    assert ctx.profile is None and window_view(ctx).expert_terms is ctx.expert_terms
    points = {
        (c.cp, c.micro_batch_size, c.tp, c.sequence_parallel, c.recompute, c.ep, c.etp)
        for c in enumerate_candidates(ctx, req.parallel, req.options)
    }
    assert len(points) > 50
    for cp, *point in sorted(points):
        view = cp_view(ctx, cp)
        assert expert_terms.__wrapped__(view, *point) == expert_terms.__wrapped__(window_view(view), *point), point
