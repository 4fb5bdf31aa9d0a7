"""Settings of a class the search visits beside its degrees: overlapped TP (``tp_overlaps``) and, on a
mixture-of-experts model, the expert-parallel degrees (``expert_options``, issue 23)."""

from __future__ import annotations

from planner.compose.context_parallel import cp_view
from planner.compose.cost import Candidate, Context
from planner.compose.terms import layer_group
from planner.specs import ParallelPins, rules


def expert_options(ctx: Context, pins: ParallelPins, tp: int, dp: int, sp: bool) -> list[tuple[int, int]]:
    """The (ep, etp) pairs searched at (tp, dp, sp): (1, 1) on a dense model; on a MoE model every ep dividing dp
    and the routed experts that the stack runs, with etp 1 or tp (``planner.specs.ep_rules``)."""
    moe = ctx.model.moe
    if moe is None:
        return [(1, 1)]
    key = (tp, dp, sp, pins.ep, pins.etp)
    pairs = ctx.expert_pairs.get(key)
    if pairs is None:
        pairs = ctx.expert_pairs[key] = _expert_options(ctx, pins, tp, dp, sp)
    return pairs


def _expert_options(ctx: Context, pins: ParallelPins, tp: int, dp: int, sp: bool) -> list[tuple[int, int]]:
    moe = ctx.model.moe
    assert moe is not None  # checked by the caller
    eps = (
        [pins.ep] if pins.ep is not None else [e for e in range(1, dp + 1) if dp % e == 0 and moe.num_experts % e == 0]
    )
    etps = [pins.etp] if pins.etp is not None else sorted({1, tp})
    out = []
    for ep in eps:
        for etp in etps:
            c = Candidate(tp, 1, dp, 1, "1f1b", 1, "none", sp, 0, ep=ep, etp=etp)
            if rules.expert_parallel_rules(ctx.stack, ctx.model, c) is None:
                out.append((ep, etp))
    return out


def tp_overlaps(
    ctx: Context, pins: ParallelPins, mbs: int, tp: int, sp: bool, recompute: str, cp: int = 1
) -> list[bool]:
    """The ``tp_comm_overlap`` settings the search visits: the pin; off where the stack does not overlap TP or
    without SP (``rules.tp_overlap_needs_sp``). Else the one that is no slower in every layer term (forward and
    backward of the block, embedding and LM head: nothing else of a class depends on it, and a step's time only
    grows with them), both when neither is (overlap costs more than it hides in some term)."""
    if pins.tp_comm_overlap is not None:
        return [pins.tp_comm_overlap]
    if not sp or tp == 1 or not rules.overlaps_tp(ctx.stack):  # async TP in compiled blocks only
        return [False]
    view = cp_view(ctx, cp)  # the layer at the local s / cp tokens
    off, on = layer_group(view, mbs, tp, sp, recompute, False), layer_group(view, mbs, tp, sp, recompute, True)
    a, b = (*off.fwd, *off.bwd), (*on.fwd, *on.bwd)
    if all(x <= y for x, y in zip(a, b)):
        return [False]
    if all(y <= x for x, y in zip(a, b)):
        return [True]
    return [False, True]
