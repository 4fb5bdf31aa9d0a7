"""Explanations a user can check: the binding constraint cites a concrete configuration that really is
faster and really does not fit; each questioned setting's best alternative is the planner's own
estimate of it; every second of the breakdown lands in its column; the memory headroom is honoured."""

from __future__ import annotations

import functools
import re

import pytest

import planner
from planner.specs.config import CLASS_FIELDS
from planner.specs.errors import MeshplanError
from planner.specs.stacks import resolve as resolve_stack

H100 = "h100-sxm5-80gb"


def body(model: str, nodes: int, gbs: int, seq: int, **options) -> dict:
    return {
        "model": model,
        "cluster": {"gpu": H100, "num_nodes": nodes, "gpus_per_node": 8},
        "training": {"global_batch_size": gbs, "seq_len": seq},
        "options": {"num_workers": 1, **options},
    }


CASES = {
    "llama3-8b": body("llama3-8b", 1, 256, 8192),
    "llama3-70b": body("llama3-70b", 8, 1024, 8192),
    "tiny-gpt": body("tiny-gpt", 1, 32, 128),
}


@functools.cache
def planned(name: str, headroom: float | None = None):
    req = (
        CASES[name]
        if headroom is None
        else {**CASES[name], "options": {**CASES[name]["options"], "memory_headroom": headroom}}
    )
    return planner.plan(req)


def estimate_of(name: str, parallel, headroom: float | None = None):
    req = {**CASES[name], "parallel": parallel.model_dump()}
    if headroom is not None:
        req["options"] = {**req["options"], "memory_headroom": headroom}
    return planner.estimate(req)


@pytest.mark.parametrize("name", list(CASES))
def test_a_memory_binding_cites_the_nearest_faster_configuration_that_does_not_fit(name):
    """ "binding: memory" names a configuration one setting away that the planner's own estimate says
    is faster and does not fit (before: a class's lower bound, e.g. tp=1 pp=1 dp=64 mbs=8 for 70B,
    never estimated; an 8B plan at 57 of 80 GiB claimed memory without saying what)."""
    best = planned(name).plans[0]
    ex = best.explanation
    assert (ex.binding_constraint == "memory") == (ex.ruled_out is not None)
    if ex.ruled_out is None:
        return
    r = ex.ruled_out
    again = estimate_of(name, r.parallel)
    assert (
        again.step_time_s == pytest.approx(r.step_time_s, rel=1e-12) and again.step_time_s < best.estimate.step_time_s
    )
    assert not again.fits and again.peak_memory_gib == pytest.approx(r.peak_memory_gib, rel=1e-12)
    assert r.peak_memory_gib > r.usable_memory_gib == pytest.approx(0.95 * best.estimate.gpu_memory_gib)
    changed = [k for k in CLASS_FIELDS if getattr(r.parallel, k) != getattr(best.parallel, k)]
    # one setting changed, with what follows from it (dp fills the cluster, SP off at tp 1, ZeRO 0 at dp 1, …)
    assert r.settings_changed == changed and 1 <= len(changed) <= 3
    assert f"{best.estimate.peak_memory_gib:.1f} of {best.estimate.gpu_memory_gib:g} GiB" in ex.summary
    assert f"needs {r.peak_memory_gib:.1f} GiB" in ex.summary


def test_the_cited_configurations_of_the_bench_instances():
    """What a reader sees for the two bench instances the issue names."""
    ex8 = planned("llama3-8b").plans[0].explanation
    # Which faster configuration is ruled out moves with the cost model (v4: pp, dp; lean runtime: mbs; with
    # the overlap slowdown: PP1×DP8): whichever it is, it is faster than the plan, does not fit, and is the
    # planner's own estimate of that configuration.
    best = planned("llama3-8b").plans[0]
    r8 = ex8.ruled_out
    assert r8 is not None and 1 <= len(r8.settings_changed) <= 3
    assert r8.step_time_s < best.estimate.step_time_s and r8.peak_memory_gib > r8.usable_memory_gib
    e8 = estimate_of("llama3-8b", r8.parallel)
    assert not e8.fits and e8.step_time_s == pytest.approx(r8.step_time_s, rel=1e-9)
    ex70_best = planned("llama3-70b").plans[0]
    ex70 = ex70_best.explanation
    r = ex70.ruled_out
    # not tp=1 pp=1 dp=64 mbs=8. Since the lean runtime: TP1 at PP8 (dp 8 and SP off follow from tp 1); since
    # cost model 10 (the runtime's TP collectives, an all-reduce per column-parallel linear, priced on GPUs too)
    # the plan is ZeRO-3 over dp 64 with full recomputation and the ruled-out one keeps the activations instead.
    assert r is not None and 1 <= len(r.settings_changed) <= 3
    assert r.step_time_s < ex70_best.estimate.step_time_s and r.peak_memory_gib > r.usable_memory_gib
    assert (r.parallel.tp, r.parallel.pp, r.parallel.micro_batch_size) != (1, 1, 8)


@pytest.mark.parametrize("name", list(CASES))
def test_each_alternative_is_the_planners_estimate_of_that_configuration(name):
    best = planned(name).plans[0]
    alts = best.explanation.alternatives
    p = best.parallel
    expected = (
        {"tp", "pp", "micro_batch_size", "recompute"}
        | ({"schedule"} if p.pp > 1 else set())
        | ({"sequence_parallel"} if p.tp > 1 else set())
        | ({"zero_stage"} if p.dp > 1 else set())
        | ({"cp"} if resolve_stack(best.training.stack).cp_comms else set())  # context parallelism (issue 24)
    )
    if p.pp > 1 and "schedule" not in {a.setting for a in alts}:
        # no other schedule runs this plan (e.g. one micro-batch per pipeline: 1F1B needs as many as stages)
        for other in {"gpipe", "1f1b"} - {p.schedule}:
            with pytest.raises(MeshplanError):
                estimate_of(name, p.model_copy(update={"schedule": other}))
        expected.discard("schedule")
    assert {a.setting for a in alts} == expected
    for a in alts:
        assert getattr(a.parallel, a.setting) != getattr(p, a.setting) or a.setting == "schedule"
        e = estimate_of(name, a.parallel)
        assert e.step_time_s == pytest.approx(a.step_time_s, rel=1e-12)
        assert e.peak_memory_gib == pytest.approx(a.peak_memory_gib, rel=1e-12) and e.fits == a.fits
        assert a.delta_step_time_s == pytest.approx(a.step_time_s - best.estimate.step_time_s, abs=1e-9)
        assert a.delta_peak_memory_gib == pytest.approx(a.peak_memory_gib - best.estimate.peak_memory_gib, abs=1e-9)
        assert a.summary in best.explanation.details
        if a.fits:  # the plan is optimal: nothing that fits is faster (cut kept or even: an upper bound)
            assert a.step_time_s >= best.estimate.step_time_s - 1e-9


def test_zero_alternative_reads_as_the_issue_asks():
    alts = {a.setting: a for a in planned("llama3-8b").plans[0].explanation.alternatives}
    # Which ZeRO stage wins moves with the cost model (v4: ZeRO-3; with the overlap slowdown and the lean
    # runtime: ZeRO-2 at PP2): the summary reads the same way whichever it is.
    winner = planned("llama3-8b").plans[0].parallel.zero_stage
    assert re.match(
        rf"ZeRO-[0-3] instead of ZeRO-{winner}: (same time|[0-9.]+% (slower|faster) \([0-9.]+ s\)), "
        r"[+-][0-9.]+ GiB \([0-9.]+ GiB\)(; does not fit \([0-9.]+ of [0-9.]+ GiB usable\))?$",
        alts["zero_stage"].summary,
    )


# ---------------------------------------------------------------------------------------------
# The breakdown's columns


ZERO3_CASES = [  # (model, nodes, gbs, seq, pins, gathers exposed beyond compute)
    ("llama3-8b", 2, 256, 8192, {"tp": 1, "pp": 1, "micro_batch_size": 1, "recompute": "full"}, True),
    ("llama3-8b", 2, 128, 4096, {"tp": 1, "pp": 1, "micro_batch_size": 2}, True),
    ("llama3-8b", 2, 256, 4096, {"tp": 2, "pp": 2, "micro_batch_size": 1, "sequence_parallel": True}, False),
    ("llama3-70b", 2, 256, 4096, {"tp": 8, "pp": 1, "micro_batch_size": 1, "recompute": "full"}, True),
]


@pytest.mark.parametrize("model,nodes,gbs,seq,pins,exposed", ZERO3_CASES)
def test_zero3_parameter_gathers_are_communication_not_compute(model, nodes, gbs, seq, pins, exposed):
    """ZeRO-3's per-layer gathers beyond the layer's compute are DP communication (before: folded
    into compute, e.g. 8B pp1·dp16: compute 13.2 s, DP sync 0). The compute under them is slowed by the
    overlap (planner.compose.terms ``OVERLAP_SLOWDOWN``): that too is charged to the DP sync, so compute equals the
    ZeRO-1 plan's exactly and gathers that hide under the layers cost only that slowdown; the columns add up
    to the step. On the bundled runtime's engine with gradient sync on in every micro-batch (``fsdp2``): both stages
    then add the reduced 1/dp gradient shard alike (cost model 37; the default ``fsdp2_deferred`` ZeRO-1 adds whole
    fp32 gradients in every backward instead, compute that ZeRO-3 does not pay)."""
    from planner.compose.terms import OVERLAP_SLOWDOWN

    def est(z):
        training = {
            **body(model, nodes, gbs, seq)["training"],
            "stack": {"base": "meshplan", "grad_accumulation": "fsdp2"},
        }
        return planner.estimate(
            {**body(model, nodes, gbs, seq), "training": training, "parallel": {**pins, "zero_stage": z}}
        )

    z1, z3 = est(1), est(3)
    b1, b3 = z1.breakdown, z3.breakdown
    assert b3.compute_s == pytest.approx(b1.compute_s, rel=1e-9) and b3.tp_comm_s == pytest.approx(
        b1.tp_comm_s, rel=1e-9
    )
    assert b3.dp_sync_s > 0
    if not exposed:  # hidden under every layer's compute: only the slowdown of the compute under them
        assert b3.dp_sync_s <= OVERLAP_SLOWDOWN * (b1.compute_s + b1.tp_comm_s)
    total = b3.compute_s + b3.tp_comm_s + b3.pp_bubble_s + b3.pp_p2p_s + b3.dp_sync_s + b3.optimizer_s
    assert total == pytest.approx(z3.step_time_s, rel=1e-9)


# ---------------------------------------------------------------------------------------------
# Memory headroom


def test_headroom_keeps_plans_off_the_last_gib_and_estimate_honours_it():
    """With no headroom the 70B plan (TP8, ZeRO-1, 1F1B, micro-batch 4 pinned: proven optimal either way) peaks at
    98 % of HBM; the default (5 %) picks another plan below 95 %, and ``estimate`` of the headroom-0 plan says it
    does not fit under the default. (Unpinned, since cost model 5 prices TP all-reduces at nccl-tests' bus bandwidth
    and DP across nodes over every NIC, the optimum is FSDP at 63 GiB, where the headroom does not bind. Priced for
    Megatron: since cost model 6 the default stack's ZeRO-1 holds the bundled runtime's FSDP2 states, and its best
    TP8 ZeRO-1 plan peaks at 92 %. With the schedule free its TP8 ZeRO-1 plans are interleaved classes the search's
    CP-SAT budget leaves unproven (stop 46: a faster cut at 95 % answers both headrooms), so the schedule is pinned.)"""
    case = {**CASES["llama3-70b"], "training": {**CASES["llama3-70b"]["training"], "stack": "megatron"}}

    def plan_with(headroom: float):
        req = {
            **case,
            "parallel": {"tp": 8, "zero_stage": 1, "schedule": "1f1b", "micro_batch_size": 4},
            "options": {**case["options"], "memory_headroom": headroom},
        }
        return planner.plan(req).plans[0]

    tight, roomy = plan_with(0.0), plan_with(0.05)
    gpu = tight.estimate.gpu_memory_gib
    assert tight.estimate.peak_memory_gib / gpu > 0.95 and tight.estimate.memory_headroom == 0.0
    assert roomy.estimate.peak_memory_gib <= 0.95 * gpu and roomy.estimate.memory_headroom == 0.05
    assert roomy.estimate.usable_memory_gib == pytest.approx(0.95 * gpu)
    assert roomy.parallel != tight.parallel and roomy.estimate.step_time_s >= tight.estimate.step_time_s
    default = planner.estimate({**case, "parallel": tight.parallel.model_dump()})
    assert not default.fits and any("options.memory_headroom" in n for n in default.notes)
    zero = {**case, "parallel": tight.parallel.model_dump(), "options": {**case["options"], "memory_headroom": 0.0}}
    assert planner.estimate(zero).fits
    # the plan records its headroom, and re-estimating it with its own inputs reproduces the verdict
    from planner.answer.request import replay_request

    assert planner.estimate_plan(replay_request(tight)).estimate.fits


# ---------------------------------------------------------------------------------------------
# Profile coverage


def slow_profile(model: str, req: dict, mbs: list[int], tps: list[int], factor: float = 3.0):
    """A "measured" profile at some points only: every time ``factor`` × this model's analytic time there."""
    from planner.answer.request import context
    from planner.pricing.layer_times import analytic_time
    from planner.specs import PlanRequest
    from planner.specs.catalog import get_model
    from planner.workload.analytic import analytic_profile

    ctx = context(PlanRequest.model_validate(req))
    prof = analytic_profile(get_model(model), micro_batch_sizes=mbs, seq_len=req["training"]["seq_len"], tps=tps)
    for lp in prof.layers:
        f, b = analytic_time(ctx, lp, lp.kind, lp.micro_batch_size, lp.tp, lp.sequence_parallel)
        lp.fwd_time_s, lp.bwd_time_s = factor * f, factor * b
    return prof.model_copy(update={"source": "measured", "device": "h100"})


def test_a_profile_at_mbs_1_only_restricts_the_search_and_says_so():
    """Before: every micro-batch size the profile lacks was priced with the analytic H100 rates (3× faster
    than this "measured" hardware), so the plan silently used mbs > 1 at analytic prices."""
    req = body("tiny-gpt", 1, 32, 128)
    prof = slow_profile("tiny-gpt", req, [1], [1, 2, 4])
    r = planner.plan({**req, "profile": prof.model_dump()})
    assert r.plans and all(p.parallel.micro_batch_size == 1 for p in r.plans)
    assert all(not any("does not cover" in n for n in p.estimate.notes) for p in r.plans)
    note = next(n for n in r.solver.notes if "restricted to the points the profile measured" in n)
    assert "mbs 1 tp 1" in note
    for a in r.plans[0].explanation.alternatives:  # alternatives stay inside the profile too
        assert a.parallel.micro_batch_size == 1


def test_a_point_the_profile_lacks_is_priced_by_the_measured_ratio_and_noted():
    """``estimate`` of a configuration outside the profile scales the analytic time by measured ÷ analytic
    at the covered points (3 here), and says so; the search, when no point is covered, notes it."""
    req = body("tiny-gpt", 1, 32, 128)
    prof = slow_profile("tiny-gpt", req, [1], [1, 2, 4])
    pins = {"tp": 1, "pp": 1, "micro_batch_size": 2}
    plain = planner.estimate({**req, "parallel": pins})
    gap = planner.estimate({**req, "parallel": pins, "profile": prof.model_dump()})
    # whole ns per layer; the gradient-accumulation pass (cost model 37: not a profiled layer time, so not scaled)
    # is 0.2 % of this compute
    assert gap.breakdown.compute_s == pytest.approx(3 * plain.breakdown.compute_s, rel=5e-3)
    note = next(n for n in gap.notes if "does not cover mbs 2, tp 1" in n)
    assert "× 3 fwd / 3 bwd" in note and "extrapolated" in note
    at_seq = body("tiny-gpt", 1, 32, 64)  # the profile has seq_len 128 only: nothing covered
    r = planner.plan({**at_seq, "profile": prof.model_copy(update={"layers": prof.layers}).model_dump()})
    assert any("covers none" in n for n in r.solver.notes)
    assert all(any("does not cover" in n for n in p.estimate.notes) for p in r.plans)
