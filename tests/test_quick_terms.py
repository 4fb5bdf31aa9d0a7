"""``context_parallel.quick_terms`` (a CP class's quick bound from its terms without the exchange and the ns the
exchange adds a layer, the class's own terms never built) against ``pipe_bound`` of ``context_parallel.class_terms``
— the quick bound as it was — on every class (or every k-th) of CP requests on three stacks: the same integer."""

from __future__ import annotations

import pytest

from planner.answer.request import context
from planner.compose.context_parallel import class_terms
from planner.compose.cost import num_microbatches
from planner.search.bounds import pipe_bound, quick_bound
from planner.search.space import enumerate_candidates
from tests.plan_support import search_request

REQUESTS = [
    # (model, gpu, nodes, gpus per node, gbs, seq, training extras, every k-th class)
    ("llama3-405b", "h100-sxm5-80gb", 2048, 8, 128, 131072, {}, 7),  # the bench's 16,384-GPU CP case
    ("llama3.1-70b", "h100-sxm5-80gb", 8, 8, 16, 65536, {"stack": "torchtitan"}, 1),  # torch's ring, all-gather bytes
    ("llama3.1-8b", "h100-sxm5-80gb", 2, 8, 32, 131072, {"stack": "megatron"}, 1),
    ("qwen2.5-7b", "h100-sxm5-80gb", 1, 8, 16, 65536, {"stack": "meshplan"}, 1),
]


@pytest.mark.parametrize("spec", REQUESTS)
def test_quick_bound_is_class_terms_pipe_bound(spec: tuple) -> None:
    model, gpu, nodes, gpn, gbs, seq, extra, every = spec
    req = search_request(model, gpu, nodes, gpn, gbs, seq, extra)
    fast, slow = context(req), context(req)  # each on its own context: nothing shared between the two ways
    cands = enumerate_candidates(fast, req.parallel, req.options)[::every]
    assert sum(c.cp > 1 for c in cands) > 20
    L = fast.model.num_layers
    for c in cands:
        want = pipe_bound(class_terms(slow, c), c, num_microbatches(slow, c), L, 0)
        assert quick_bound(fast, c) == want, c
    # and on the context where the class's own terms were built first (the search costs some classes first)
    for c in cands[:200]:
        assert quick_bound(slow, c) == pipe_bound(class_terms(slow, c), c, num_microbatches(slow, c), L, 0)


def test_frontier_quick_memo_is_by_class() -> None:
    """``Frontier.quick``'s memo, keyed by the class itself (every field, as the former tuple of ``QUICK_KEY`` with the
    schedule and v): its values are ``quick_bound``'s, an equal class built apart hits the entry, distinct classes have
    their own."""
    from planner.search.frontier import Frontier

    model, gpu, nodes, gpn, gbs, seq, extra, _ = REQUESTS[2]
    req = search_request(model, gpu, nodes, gpn, gbs, seq, extra)
    ctx = context(req)
    cands = enumerate_candidates(ctx, req.parallel, req.options)
    queue = Frontier(ctx, req.parallel, cands)
    for c in cands[::5]:
        assert queue.quick(c) == quick_bound(context(req), c)
        assert queue.quick(c.variant()) == queue.quick(c)  # an equal copy (its own object, no kept hash)
    assert len(queue._quick) == len(cands[::5])
