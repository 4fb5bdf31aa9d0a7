"""The explanation's variants of a plan (``explain._variants``), each costed and memory-checked (``Priced``), and the
fastest of a setting's variants (``best``), simulated only while one can still win.

A variant's step time at its one cut is bounded below by ``cut_floor`` (the cost model's own chunk times, lags and
end of step), far closer than its class's ``class_bound`` over every cut: ``best`` skips the simulation of a variant
whose floor already loses to the fastest so far (or to the plan it must beat), which cannot change the variant chosen
(``tests/test_explain_variants.py`` against the former selection, kept there)."""

from __future__ import annotations

from typing import Literal

from planner.compose.cost import ClassCosts, Evaluation, chunk_times, evaluate, rank_end_terms
from planner.compose.memory import rank_memory
from planner.compose.step_end import rank_end
from planner.search.bounds import class_bound
from planner.specs import ParallelPins, Plan, PlanRequest
from planner.specs.layout import even_stage_layers

#: The settings a reader questions, in the order they are explained (``explain.SETTINGS``).
Setting = Literal[
    "tp", "cp", "pp", "micro_batch_size", "schedule", "recompute", "sequence_parallel", "zero_stage", "ep", "etp"
]


def cut_floor(cc: ClassCosts, n: list[int]) -> int:
    """A lower bound of ``evaluate(cc, n).objective_ns``: the longest rank chain of the simulated schedule — F(0)
    through the chunks before rank i (each boundary with its p2p lag), every operation of rank i (m·(F + B) of each of
    its chunks), B(m − 1) back through those chunks (every schedule starts rank i with F(0) of its first chunk and
    ends it with B(m − 1) of that chunk) — plus the exact end of step (``Evaluation.end_ns``, the same function)."""
    c = cc.cand
    p, k = c.pp, cc.moe_counts(n)
    fwd, bwd = chunk_times(cc, n, k)
    t = [f + b for f, b in zip(fwd, bwd)]
    head = 0  # F + B of the chunks before rank i, with their boundaries' lags both ways
    chain = 0
    for i in range(p):
        chain = max(chain, head + cc.m * sum(t[i::p]))
        head += t[i] + (2 * cc.lag[i] if i < p - 1 else 0)
    return chain + max(rank_end(rank_end_terms(cc, n, r, k)) for r in range(p))


class Priced:
    """One variant, costed and memory-checked; simulated (``evaluation``) and estimated (``estimate``) on demand."""

    def __init__(self, ctx, request: PlanRequest, setting: Setting, d: dict, plan: Plan):
        from planner.answer.request import complete_pins
        from planner.compose.cost import class_costs

        same_cut = (d["pp"], d["virtual_stages"]) == (plan.parallel.pp, plan.parallel.virtual_stages)
        n = (
            list(plan.parallel.stage_layers)
            if same_cut
            else even_stage_layers(ctx.model.num_layers, d["pp"] * d["virtual_stages"])
        )
        req = request.model_copy(update={"parallel": ParallelPins(**d, stage_layers=n)})
        self.cand, self.n = complete_pins(ctx, req)  # MeshplanError: a rule rules it out
        self.ctx, self.setting, self.d = ctx, setting, d
        self.cut: Literal["plan", "even"] = "plan" if same_cut else "even"
        self.cc = class_costs(ctx, self.cand)
        self.peak_bytes = max(rank_memory(self.cc, self.n, r) for r in range(self.cand.pp))
        self.fits = self.peak_bytes <= self.cc.usable_bytes  # = bounds.fits_at, = evaluate's fits
        self.bound = class_bound(self.cc)
        self._estimate = None

    @property
    def evaluation(self) -> Evaluation:
        return evaluate(self.cc, self.n)  # memoised by cut (``ClassCosts.evaluations``)

    @property
    def step_s(self) -> float:
        """The step time, s: ``estimate.step_time_s`` (``build_estimate``'s ``objective_ns / 1e9``)."""
        return self.evaluation.objective_ns / 1e9

    @property
    def estimate(self):
        if self._estimate is None:
            from planner.answer.estimate import build_estimate

            self._estimate = build_estimate(self.ctx, self.cc, self.n, self.evaluation)
        return self._estimate

    def parallel(self):
        from planner.answer.estimate import parallel_config

        return parallel_config(self.cand, self.n)


def best(priced: list[Priced], want_fit: bool, faster_than_ns: float | None = None) -> Priced | None:
    """The fastest variant (then least memory) with ``fits == want_fit`` (and faster than ``faster_than_ns``, when
    given; ties: the first in bound order). Variants are taken in bound order while a bound can still beat the best
    so far (or ``faster_than_ns``); one whose ``cut_floor`` cannot is not simulated. The floor F ≤ the step time T in
    integer ns, so F/1e9 ≤ T/1e9 (rounding is monotone): F/1e9 above the best's step time puts T above it too, and
    (F/1e9)·1e9 ≥ ``faster_than_ns`` puts T at or above it — either way the variant is not chosen."""
    top: Priced | None = None
    for v in sorted((v for v in priced if v.fits == want_fit), key=lambda v: v.bound):
        limit = top.step_s * 1e9 if top is not None else faster_than_ns
        if limit is not None and v.bound > limit:
            break
        floor_s = cut_floor(v.cc, v.n) / 1e9
        if (top is not None and floor_s > top.step_s) or (
            faster_than_ns is not None and floor_s * 1e9 >= faster_than_ns
        ):
            continue
        if faster_than_ns is not None and v.step_s * 1e9 >= faster_than_ns:
            continue
        if (
            top is None
            or v.step_s < top.step_s
            or (v.step_s == top.step_s and v.estimate.peak_memory_gib < top.estimate.peak_memory_gib)
        ):
            top = v
    return top
