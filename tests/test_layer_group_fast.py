"""Exact speedups of the layer groups and the MoE queue (issues 23, 24, 26), each against the code it replaced, kept
here:

- ``layer_group._layer_group`` builds a ``LayerGroup`` from ``experts.with_experts``' plain values (no
  ``dataclasses.replace`` of the block's times, no pydantic copy of its saved bytes), its loss buffer from
  ``DenseParts.logits_fp32`` (priced once per dense point): equal, field by field, to the former construction at every
  point the search prices (every class's (mbs, tp, SP, recompute, TP overlap, ep, etp), every block kind, CP views and
  window views);
- ``layer_group.moe_floor`` reads the dense block's work from ``dense_parts`` instead of building the dense
  ``LayerGroup``: the same integers as from that group's ``work_f[0]``, ``work_b[0]``;
- ``frontier.Frontier.members`` keys a FAMILY item's first group by the item's own bound: that is
  ``floor(chain.first(i))`` on every FAMILY item the queue unfolds.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from planner.answer.request import context
from planner.compose.affine import Affine
from planner.compose.blocks import WINDOW, block_sequence, window_view
from planner.compose.context import Context
from planner.compose.context_parallel import cp_view
from planner.compose.experts import expert_floor, expert_terms
from planner.compose.layer_group import NS, LayerGroup, dense_parts, layer_group, moe_floor, ns
from planner.compose.memory import loss_buffer_bytes
from planner.compose.recompute_modules import MODULES, module_recompute
from planner.pricing.expert_parallel import all_to_all_seconds
from planner.search import frontier
from planner.search.space import enumerate_candidates, enumerate_classes
from planner.specs import PlanRequest
from planner.specs.vocab import local_vocab
from planner.workload.ops import MOE_BLOCK
from tests.plan_support import search_request

CASES = [  # the cases of issue 23/24/26's speed list, on their clusters
    ("deepseek-v3", "h100-sxm5-80gb", 256, 8, 15360, 4096, {"stack": "megatron"}),
    ("gpt-oss-120b", "h100-sxm5-80gb", 8, 8, 512, 4096, {"stack": "megatron"}),
    ("gpt-oss-120b", "h100-sxm5-80gb", 8, 8, 64, 65536, {"stack": "megatron"}),  # CP views and their window views
    ("qwen3-30b-a3b", "h100-sxm5-80gb", 2, 8, 512, 4096, {"stack": "megatron"}),
    ("mixtral-8x22b", "h100-sxm5-80gb", 16, 8, 256, 4096, {"stack": "megatron"}),
    (
        "llama3-70b",
        "h100-sxm5-80gb",
        8,
        8,
        1024,
        8192,
        {"precision": "fp8", "fp8_recipe": "tensorwise", "stack": "torchtitan"},
    ),
]


def former_layer_group(ctx: Context, key: tuple) -> LayerGroup:
    """``layer_group._layer_group`` as it was (with ``experts.with_experts`` as it was, inline; Megatron's
    ``layernorm+moe_act`` as ``compose.recompute_modules`` added it)."""
    mbs, tp, sp, recompute, tpo, ep, etp, kind = key
    model, seq = ctx.model, ctx.training.seq_len
    d = dense_parts(ctx, mbs, tp, sp, "none" if recompute == MODULES else recompute, tpo)
    blk, emb, head, lp_blk, lp_emb, lp_head, act = d.blk, d.emb, d.head, d.lp_blk, d.lp_emb, d.lp_head, d.act
    (blk_tp_f, emb_tp_f, head_tp_f), (blk_tp_b, emb_tp_b, head_tp_b) = d.tp_f, d.tp_b
    f_more, b_more = d.f_more, d.b_more
    vocab_local = local_vocab(model, tp)
    saved = lp_blk.saved_activation_bytes
    p_blk, x = lp_blk.param_count, None
    if kind == MOE_BLOCK:
        x = expert_terms(ctx, mbs, tp, sp, recompute if recompute == "full" else "none", ep, etp)
        blk = replace(
            blk,
            fwd=blk.fwd + x.fwd - x.tp_fwd,
            bwd=blk.bwd + x.bwd - x.tp_bwd,
            flops_fwd=blk.flops_fwd + x.flops_fwd,
            flops_bwd=blk.flops_bwd + x.flops_bwd,
        )
        saved = saved.model_copy(
            update={"none": int(saved.none + x.saved_none), "selective": int(saved.selective + x.saved)}
        )
        p_blk, blk_tp_f, blk_tp_b = p_blk + x.params, blk_tp_f + x.tp_fwd, blk_tp_b + x.tp_bwd
    kept, tmp = (saved.for_mode(recompute), None) if recompute != MODULES else (saved.none, 0)
    if recompute == MODULES:
        mr = module_recompute(ctx, mbs, tp, sp, ep, etp, kind == MOE_BLOCK)
        kept, tmp = max(0, int(saved.none - mr.saved_less)), int(mr.saved_less)
        blk = replace(blk, bwd=blk.bwd + mr.bwd_more)
    work_f = (blk.fwd + f_more + blk_tp_f, emb.fwd + emb_tp_f, head.fwd + head_tp_f)
    work_b = (blk.bwd + b_more + blk_tp_b, emb.bwd + emb_tp_b, head.bwd + head_tp_b)
    return LayerGroup(
        work_f=work_f,
        work_b=work_b,
        fwd=Affine(0, *map(ns, work_f)),
        bwd=Affine(0, *map(ns, work_b)),
        fwd_tp=Affine(0, ns(blk_tp_f), ns(emb_tp_f), ns(head_tp_f)),
        bwd_tp=Affine(0, ns(blk_tp_b), ns(emb_tp_b), ns(head_tp_b)),
        params=(p_blk, lp_emb.param_count, lp_head.param_count),
        act=act,
        recompute_tmp={"none": 0, "selective": max(0, saved.none - saved.selective), "full": saved.none}.get(
            recompute, tmp
        ),
        logits_fp32=loss_buffer_bytes(ctx.stack, mbs * seq, vocab_local, ctx.elt, tp),
        acts=Affine(0, int(kept), lp_emb.saved_activation_bytes.none, lp_head.saved_activation_bytes.none),
        flops=(blk.flops_fwd + blk.flops_bwd, emb.flops_fwd + emb.flops_bwd, head.flops_fwd + head.flops_bwd),
        fwd_ep=Affine(0, ns(x.a2a_fwd)) if x else Affine(),
        bwd_ep=Affine(0, ns(x.a2a_bwd)) if x else Affine(),
        expert_params=x.expert_params if x else 0,
    )


def former_moe_floor(ctx: Context, mbs, tp, sp, recompute, tpo, ep, etp) -> tuple[int, int]:
    """``layer_group.moe_floor`` as it was: the dense block's work from its ``LayerGroup``."""
    part = expert_floor(ctx, mbs, tp, sp, recompute, etp)
    dense = layer_group(ctx, mbs, tp, sp, recompute, tpo, kind="transformer_block")
    moe = ctx.model.moe
    a2a = all_to_all_seconds(ctx, part.dispatched, ep, tp)
    g = part.scale * part.grouped(moe.num_experts, ep)
    f = dense.work_f[0] + part.fwd + g + part.a2a_counts[0] * a2a
    b = dense.work_b[0] + part.bwd + (3 if part.rerun else 2) * g + part.a2a_counts[1] * a2a
    low = -(2**62)
    return (
        math.floor(f * NS) - 2 if math.isfinite(f) else low,
        math.floor(b * NS) - 2 if math.isfinite(b) else low,
    )


def points(ctx: Context, req: PlanRequest) -> set[tuple]:
    """Every (cp, mbs, tp, SP, recompute, TP overlap, ep, etp) of the request's classes."""
    return {
        (c.cp, c.micro_batch_size, c.tp, c.sequence_parallel, c.recompute, c.tp_comm_overlap, c.ep, c.etp)
        for c in enumerate_candidates(ctx, req.parallel, req.options)
    }


@pytest.mark.parametrize("case", CASES)
def test_layer_groups_and_moe_floors_as_before(case) -> None:
    req = search_request(*case)
    ctx, fresh = context(req), context(req)  # the former code on a context of its own
    kinds = block_sequence(ctx)[0]
    seen = moe = 0
    for cp, *at in sorted(points(ctx, req)):
        view, before = cp_view(ctx, cp), cp_view(fresh, cp)
        for kind in kinds:
            got = layer_group(view, *at, kind=kind)
            if kind.endswith(WINDOW):  # priced in the window view (``layer_group``)
                v, k = window_view(before), kind.removesuffix(WINDOW)
            else:
                v, k = before, kind
            ep, etp = (at[5], at[6]) if k == MOE_BLOCK else (1, 1)
            assert got == former_layer_group(v, (*at[:5], ep, etp, k)), (cp, at, kind)
            seen += 1
        if ctx.model.moe is not None:
            for v, b in (
                (view, before),
                *(((window_view(view), window_view(before)),) if len(kinds) > 1 and kinds[1].endswith(WINDOW) else ()),
            ):
                assert moe_floor(v, *at) == former_moe_floor(b, *at), (cp, at)
                moe += 1
    assert seen > 100
    assert (moe > 100) == (ctx.model.moe is not None)


def former_members(self, item):
    """``Frontier.members`` as it was: the first group's floor key priced (memoised) again; the least orders of every
    group (``simplicity``) built at once (now: when their item is made)."""
    chain, least = self._families[id(item.cand)]
    mins = [frontier.simplicity(c) for c in least]
    i = item.rest
    fb = self.floor(chain.first(i))
    out = [frontier.QueueItem(fb, frontier.simplicity(c), frontier.Key.FLOOR) for c in chain[i]]
    if i + 1 < len(chain):
        self._families[id(least[i + 1])] = (chain, least)  # (the queue's entry for the next item, as it now keeps)
        out.append(frontier.QueueItem(self.floor(chain.first(i + 1)), mins[i + 1], frontier.Key.FAMILY, i + 1))
    return out


@pytest.mark.parametrize("case", [CASES[0], CASES[3], CASES[4]])
def test_a_family_item_is_keyed_by_its_first_groups_floor(case, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every FAMILY item the queue unfolds (the search's pops and the probe's scan) has the floor key of its group's
    first member as its bound (what ``members`` now reads instead of pricing it again), and the queue's probe scan
    and pops are those of the former ``members``."""
    req = search_request(*case)
    members = frontier.Frontier.members
    checked = []

    def checking(self, item):
        chain, _ = self._families[id(item.cand)]
        assert item.bound == self.floor(chain.first(item.rest))
        checked.append(item.rest)
        return members(self, item)

    def run() -> tuple[list, list]:
        ctx = context(req)
        cands, families = enumerate_classes(ctx, req.parallel, req.options)
        q = frontier.Frontier(ctx, req.parallel, cands, families)
        scan = []
        for item in q.by_quick_bound(lambda c: True):
            scan.append(item)
            if len(scan) > 2000:
                break
        pops = []
        while len(pops) < 3000 and (item := q.pop()) is not None:
            pops.append(item)
        return scan, pops

    monkeypatch.setattr(frontier.Frontier, "members", checking)
    now = run()
    monkeypatch.setattr(frontier.Frontier, "members", former_members)
    assert run() == now
    assert len(checked) > 400 and any(checked)


@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[5]])
def test_layer_times_price_the_analytic_parts_once(case, monkeypatch: pytest.MonkeyPatch) -> None:
    """``layer_times.parts`` (``analytic_parts`` memoised by (kind, mbs, tp, SP), read by every recompute mode and by
    selective recomputation's share) gives the layer times of pricing them at each call, as before, at every point of
    the request's classes in every view (CP, window; torchtitan's op-level selective share on the FP8 case)."""
    from planner.pricing import layer_times as lt

    req = search_request(*case)

    def every(ctx: Context) -> dict[tuple, object]:
        out = {}
        for cp, mbs, tp, sp, rec, *_ in sorted(points(ctx, req)):
            views = [cp_view(ctx, cp)]
            if len(block_sequence(ctx)[0]) > 1 and block_sequence(ctx)[0][1].endswith(WINDOW):
                views.append(window_view(views[0]))
            for i, v in enumerate(views):
                for kind in ("transformer_block", "embedding", "lm_head"):
                    out[(cp, i, kind, mbs, tp, sp, rec)] = lt.layer_times(v, kind, mbs, tp, sp, rec)
        return out

    now = every(context(req))

    def each_time(ctx, kind, mbs, tp, sp):
        lp = ctx.layer(kind, mbs, tp, sp)
        return lp, lt.analytic_parts(ctx, lp, kind, mbs, tp, sp)

    monkeypatch.setattr(lt, "parts", each_time)
    assert every(context(req)) == now
    assert len(now) > 300


def former_pop(self):
    """``Frontier.pop`` as it was: every re-keyed item pushed, then the queue's least popped."""
    from planner.search.bounds import cut_bound, quick_may_fit
    from planner.search.space import forced_cut

    heap = self.heap
    K = frontier.Key
    while heap:
        item = frontier.heapq.heappop(heap)
        if item.key == K.SETTLED:
            return item
        if item.key == K.FAMILY:
            for member in self.members(item):
                frontier.heapq.heappush(heap, member)
            continue
        if item.key == K.FLOOR:
            frontier.heapq.heappush(heap, frontier.QueueItem(max(item.bound, self.lean(item.cand)), item.order, K.LEAN))
            continue
        if item.key == K.LEAN:
            frontier.heapq.heappush(heap, self._quick_item(item))
            continue
        cut = forced_cut(self.ctx, self.pins, item.cand)
        assert cut is not None
        if self.pins.stage_layers is None and not quick_may_fit(self.ctx, item.cand, cut):
            return item._replace(key=K.SETTLED)
        b = max(item.bound, cut_bound(self.ctx, item.cand, cut))
        frontier.heapq.heappush(heap, frontier.QueueItem(b, item.order, K.SETTLED))
    return None


@pytest.mark.parametrize("case", CASES[:2] + CASES[4:])
def test_the_queue_pops_as_with_push_then_pop(case, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Frontier.pop`` with ``heappushpop`` pops the same items, in the same order, as pushing every re-keyed item
    and popping the least, to the queue's end (every class, the re-keyed one-cut classes among them)."""
    req = search_request(*case)

    def run() -> list:
        ctx = context(req)
        q = frontier.Frontier(ctx, req.parallel, enumerate_candidates(ctx, req.parallel, req.options))
        out = []
        while (item := q.pop()) is not None:
            out.append(item)
        return out

    now = run()
    monkeypatch.setattr(frontier.Frontier, "pop", former_pop)
    assert run() == now
    assert len(now) == len(enumerate_candidates(context(req), req.parallel, req.options))


@pytest.mark.parametrize("case", [CASES[1], CASES[2]])
def test_a_window_view_shares_the_contexts_dense_parts_but_the_block(case) -> None:
    """``layer_group.window_parts`` (the context's ``DenseParts`` with the view's block times and profile) equals the
    window view's own ``DenseParts`` priced afresh, at every (cp, mbs, tp, SP, recompute, TP overlap) of gpt-oss's
    classes (CP views at 64K tokens); and a layer group of the windowed kind is priced from it."""
    from planner.compose.layer_group import _dense_parts, window_parts

    req = search_request(*case)
    ctx, fresh = context(req), context(req)
    n = 0
    for cp, mbs, tp, sp, rec, tpo, ep, etp in sorted(points(ctx, req)):
        view, other = cp_view(ctx, cp), window_view(cp_view(fresh, cp))
        point = (mbs, tp, sp, rec, tpo)
        dense = (mbs, tp, sp, "none" if rec == MODULES else rec, tpo)  # the dense op list's (``_layer_group``)
        assert window_parts(view, window_view(view), dense) == _dense_parts(other, *dense), (cp, point)
        kind = block_sequence(ctx)[0][1]
        assert layer_group(view, *point, ep, etp, kind) == former_layer_group(other, (*point, ep, etp, MOE_BLOCK))
        assert window_view(view).dense_parts[dense] == _dense_parts(other, *dense)
        n += 1
    assert n > 500
