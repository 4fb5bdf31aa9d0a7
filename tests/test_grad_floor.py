"""``step_end.grad_floor`` and ``sync_lift``, the gradient sync's least exposed part (and the tied embeddings'
all-reduce) that ``search.lift`` adds to the search's bounds, checked against every cut of small instances
(``bruteforce.compositions``; ``end_terms`` at each cut and the simulation are the independent computations):

* Σ over the ranks of the exposed sync (``_grad_parts``' max) is never below ``grad_floor``, at any cut, on stacks that
  do not overlap the sync, that overlap it with the last backward, and that launch it chunk by chunk (interleaved 1F1B,
  Megatron-core's ``grad_sync_func``), with and without the overlapped parameter all-gather; the slowest rank's end of
  step is never below ``end_floor`` + ``sync_lift``; every bound of the search + the lift never above the best cut;
* tight: without the overlap the floor is Σ_r sync at every cut (the sync is all exposed); with it, some cut attains it
  exactly (every rank's first part binds, one layer in chunk r);
* teeth: the lift is positive on some class of every stack and pp, and the bounds + lift come within 3 % of the best
  cut on some class.
"""

from __future__ import annotations

import pytest
from test_end_floor import request

from planner.answer.request import context
from planner.compose.cost import class_costs, evaluate
from planner.compose.step_end import _grad_parts, end_floor, end_terms, grad_floor, rank_end, sync_lift
from planner.search.bounds import class_bound, fitting_bound, quick_bound
from planner.search.bruteforce import compositions
from planner.search.interleaved import interleaved_bound
from planner.search.lift import lift
from planner.search.space import enumerate_candidates
from planner.specs import ParallelPins, SearchOptions

STACKS = {
    "no overlap": "megatron",
    "overlap": {"base": "megatron", "overlap_grad_reduce": True},
    "overlap + gathers": {"base": "megatron", "overlap_grad_reduce": True, "overlap_param_gather": True},
    "deepspeed": "deepspeed",
}


def classes(stack: object, gbs: int, pp: int):  # type: ignore[no-untyped-def]
    ctx = context(request(stack, gbs))
    pins = ParallelPins(tp=1, pp=pp, recompute="none")
    cands = [c for c in enumerate_candidates(ctx, pins, SearchOptions()) if c.chunks <= 8 and c.dp > 1]
    assert cands
    return ctx, cands


@pytest.mark.parametrize("name", list(STACKS))
@pytest.mark.parametrize("pp", [1, 2, 4])
def test_grad_floor_and_lift_never_exceed_any_cut(name: str, pp: int) -> None:
    ctx, cands = classes(STACKS[name], 16, pp)
    tight = lifted = 0
    for c in cands:
        cc = class_costs(ctx, c)
        s, L, p = cc.shared, cc.num_layers, c.pp
        grads, gconst = grad_floor(s, c, L)
        ends, const = end_floor(s, c, L)
        up = sync_lift(s, c, L)
        assert up == lift(ctx, c) >= 0
        lifted += up > 0
        least = None
        for n in compositions(L, cc.chunks):
            terms = [end_terms(s, c, n, r) for r in range(p)]
            exposed = sum(max(_grad_parts(t)) for t in terms)
            assert grads + p * gconst <= exposed, (c, n)
            assert ends / p + const + up <= max(rank_end(t) for t in terms), (c, n)
            least = exposed if least is None else min(least, exposed)
            if s.hidden_bwd.layer == 0 and s.hidden_bwd.const == 0:  # no overlap: the whole sync, at every cut
                assert grads + p * gconst == sum(t.sync for t in terms), (c, n)
        tight += least == grads + p * gconst
    assert tight > 0  # the floor is attained by some cut of some class
    assert lifted > 0  # teeth: the sync's least is positive on some class


@pytest.mark.parametrize("name", list(STACKS))
def test_bounds_plus_the_lift_never_exceed_the_best_cut(name: str) -> None:
    ctx, cands = classes(STACKS[name], 16, 2)
    close = 0
    for c in cands:
        cc = class_costs(ctx, c)
        best = min(evaluate(cc, n).objective_ns for n in compositions(cc.num_layers, cc.chunks))
        up = lift(ctx, c)
        bounds = [class_bound(cc), quick_bound(ctx, c), fitting_bound(cc), interleaved_bound(cc)]
        for b in bounds:
            assert b + up <= best, (c, b, up, best)
        close += max(bounds) + up > 0.97 * best
    assert close > 0  # within 3 % of the best cut on some class: a lift 3 % higher would fail there
