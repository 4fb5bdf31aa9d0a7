"""Why a plan won: its binding constraint, the nearest faster configuration that does not fit, the best
alternative per setting a reader may question, and what the runner-up lost on.

Every figure cited here is the planner's own estimate of a concrete configuration (``planner.estimate_plan``
of it gives the same numbers): a variant of plan 1 with one setting changed (dp follows tp·pp; SP off at
tp 1; ZeRO 0 at dp 1; one stage → 1F1B), at the plan's stage cut when pp and v are unchanged, else an
even cut. The work is bounded: at most a few dozen variants, each costed (cached class costs) and
memory-checked without simulation; a variant is simulated only while its lower bounds (its class's
``class_bound``, its cut's ``variants.cut_floor``) can still beat what it is compared with.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal, get_args

from planner.answer.experts import expert_note
from planner.answer.residual_notes import describe_residuals
from planner.answer.variants import Priced, Setting
from planner.answer.variants import best as _best
from planner.specs import Alternative, Explanation, Plan, PlanRequest, RuledOut
from planner.specs.config import describe
from planner.specs.errors import MeshplanError

_PARTS = {
    "compute_s": "compute",
    "tp_comm_s": "tensor-parallel communication",
    "pp_bubble_s": "pipeline bubble",
    "pp_p2p_s": "pipeline send/recv",
    "dp_sync_s": "data-parallel communication",
    "optimizer_s": "optimizer step",
    "cp_comm_s": "context-parallel communication",
    "ep_comm_s": "expert-parallel all-to-all",
}

#: Short readable names of the breakdown parts, for the explanation's details.
_SHORT = {
    "compute_s": "compute",
    "tp_comm_s": "TP comm",
    "pp_bubble_s": "pipeline bubble",
    "pp_p2p_s": "pipeline p2p",
    "dp_sync_s": "DP sync",
    "optimizer_s": "optimizer",
    "cp_comm_s": "CP comm",
    "ep_comm_s": "EP all-to-all",
}

#: The settings a reader questions, in the order they are explained (``variants.Setting``).
SETTINGS: tuple[Setting, ...] = get_args(Setting)
_CLASS = (
    "tp",
    "pp",
    "dp",
    "cp",
    "cp_comm",
    "micro_batch_size",
    "schedule",
    "virtual_stages",
    "recompute",
    "sequence_parallel",
    "zero_stage",
    "ep",
    "etp",
)
_NAMES = {
    "tp": "TP",
    "cp": "CP",
    "pp": "PP",
    "micro_batch_size": "micro-batch",
    "schedule": "schedule",
    "recompute": "recompute",
    "sequence_parallel": "SP",
    "zero_stage": "ZeRO",
    "ep": "EP",
    "etp": "ETP",
}


def _describe(plan: Plan) -> str:
    return describe(plan.parallel, plan.estimate.num_microbatches)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


# ---------------------------------------------------------------------------------------------
# Variants of a plan, one setting changed


def _value(setting: str, d: dict) -> int | str | bool:
    if setting == "schedule":
        return d["schedule"] + (f" v={d['virtual_stages']}" if d["virtual_stages"] > 1 else "")
    return d[setting]


def _variants(ctx, plan: Plan, setting: str) -> Iterator[dict]:
    """The configurations differing from ``plan`` in ``setting`` alone (and what follows from it)."""
    p = plan.parallel
    base = {k: getattr(p, k) for k in _CLASS}
    n_gpus, L = ctx.num_gpus, ctx.model.num_layers
    gbs = ctx.training.global_batch_size
    values: list  # the setting's other values (schedule: (name, virtual stages) pairs)
    if setting == "tp":
        values = [t for t in _divisors(n_gpus // (p.pp * p.cp)) if t != p.tp]
    elif setting == "cp":  # context parallelism where the stack runs it (dp gives or takes the ranks)
        values = [c for c in _divisors(n_gpus // (p.tp * p.pp)) if c != p.cp] if ctx.stack.cp_comms else []
    elif setting == "pp":
        values = [q for q in _divisors(n_gpus // (p.tp * p.cp)) if q != p.pp and q <= L]
    elif setting == "micro_batch_size":
        values = [b for b in _divisors(gbs // p.dp) if b != p.micro_batch_size]
    elif setting == "schedule":
        if p.pp == 1:
            return
        values = [("gpipe", 1), ("1f1b", 1)] + [("interleaved-1f1b", v) for v in range(2, 9) if L % (p.pp * v) == 0]
        values = [sv for sv in values if sv != (p.schedule, p.virtual_stages)]
    elif setting == "recompute":
        values = [r for r in ("none", "selective", "full") if r != p.recompute]
    elif setting == "sequence_parallel":
        values = [not p.sequence_parallel] if p.tp > 1 else []
    elif setting == "ep":  # expert parallelism: MoE models only
        experts = ctx.model.moe.num_experts if ctx.model.moe is not None else 1
        values = [e for e in _divisors(p.dp) if e != p.ep and experts % e == 0]
    elif setting == "etp":
        values = [t for t in {1, p.tp} if t != p.etp] if ctx.model.moe is not None else []
    else:
        values = [z for z in range(4) if z != p.zero_stage] if p.dp > 1 else []
    for val in values:
        d = dict(base)
        if setting == "schedule":
            d["schedule"], d["virtual_stages"] = val
        else:
            d[setting] = val
        d["dp"] = n_gpus // (d["tp"] * d["pp"] * d["cp"])
        if d["cp"] > 1 and d["cp_comm"] not in ctx.stack.cp_comms:
            d["cp_comm"] = ctx.stack.cp_comms[0]
        if d["tp"] == 1:
            d["sequence_parallel"] = False
        if d["dp"] == 1:
            d["zero_stage"] = 0
        if d["dp"] % d["ep"] or d["etp"] not in (1, d["tp"]):  # EP carved from dp; ETP 1 or tp
            d["ep"], d["etp"] = 1, (1 if d["etp"] != d["tp"] else d["etp"])
        if d["pp"] == 1 or (d["virtual_stages"] > 1 and L % (d["pp"] * d["virtual_stages"])):
            d["schedule"], d["virtual_stages"] = "1f1b", 1  # one stage, or no uniform interleaved split
        yield d


def _price_all(ctx, request: PlanRequest, plan: Plan) -> dict[str, list[Priced]]:
    out: dict[str, list[Priced]] = {}
    # with a profile, only the points it measured (as the search), unless the plan itself is extrapolated
    covered_only = ctx.profile is not None and ctx.covers(
        plan.parallel.micro_batch_size, plan.parallel.tp, plan.parallel.sequence_parallel
    )
    for setting in SETTINGS:
        out[setting] = []
        for d in _variants(ctx, plan, setting):
            if covered_only and not ctx.covers(d["micro_batch_size"], d["tp"], d["sequence_parallel"]):
                continue
            try:
                out[setting].append(Priced(ctx, request, setting, d, plan))
            except MeshplanError as e:  # a rule rules the variant out
                # its traceback's frames hold the context (and the frame that raised it, the error: a cycle): dropped
                # now, the context is freed with the plan rather than by the cyclic collector (``api.gc_paused``)
                e.__traceback__ = None
                continue
    return out


def _pct(rel: float) -> str:
    """A relative difference, with enough digits that a real difference never reads as 0.0 %."""
    return f"{abs(rel):.1%}" if abs(rel) >= 0.01 else f"{abs(rel) * 100:.2g}%"


def _delta_text(e, ref) -> str:
    dt = e.step_time_s - ref.step_time_s
    rel = dt / ref.step_time_s if ref.step_time_s else 0.0
    if abs(dt) < 1e-9:  # whole nanoseconds: the same step time
        t = "same time"
    else:
        t = f"{_pct(rel)} {'slower' if dt > 0 else 'faster'} ({e.step_time_s:.6g} s)"
    dm = e.peak_memory_gib - ref.peak_memory_gib
    return f"{t}, {dm:+.1f} GiB ({e.peak_memory_gib:.1f} GiB)"


def _show(setting: str, value) -> str:
    if setting == "zero_stage":
        return f"ZeRO-{value}"
    if setting == "sequence_parallel":
        return "SP" if value else "no SP"
    if setting in ("tp", "pp", "ep", "etp"):
        return f"{_NAMES[setting]}{value}"
    if setting == "micro_batch_size":
        return f"mbs {value}"
    if setting == "recompute":
        return f"recompute {value}"
    return str(value)


def alternative(v: Priced, plan: Plan) -> Alternative:
    e, ref = v.estimate, plan.estimate
    mine = _show(v.setting, _value(v.setting, {k: getattr(plan.parallel, k) for k in _CLASS}))
    text = f"{_show(v.setting, _value(v.setting, v.d))} instead of {mine}: {_delta_text(e, ref)}"
    if v.d["dp"] != plan.parallel.dp:
        text += f", dp {v.d['dp']}"
    if v.cut == "even":
        text += ", even cut"
    if not e.fits:
        text += f"; does not fit ({e.peak_memory_gib:.1f} of {e.usable_memory_gib:.4g} GiB usable)"
    return Alternative(
        setting=v.setting,
        value=_value(v.setting, v.d),
        parallel=v.parallel(),
        cut=v.cut,
        step_time_s=e.step_time_s,
        peak_memory_gib=e.peak_memory_gib,
        fits=e.fits,
        delta_step_time_s=e.step_time_s - ref.step_time_s,
        delta_peak_memory_gib=e.peak_memory_gib - ref.peak_memory_gib,
        summary=text,
    )


def alternatives_and_ruled_out(ctx, request: PlanRequest, plan: Plan) -> tuple[list[Alternative], RuledOut | None]:
    priced = _price_all(ctx, request, plan)
    alts = []
    for setting in SETTINGS:
        best = _best(priced[setting], True)
        if best is None:  # none fits: the one closest to fitting
            best = min(priced[setting], key=lambda v: v.peak_bytes, default=None)
        if best is not None:
            alts.append(alternative(best, plan))
    step_ns = plan.estimate.step_time_s * 1e9
    faster = [b for b in (_best(priced[s], False, step_ns) for s in SETTINGS) if b is not None]
    ruled = None
    if faster:
        v = min(faster, key=lambda b: (b.estimate.step_time_s, b.estimate.peak_memory_gib))
        e = v.estimate
        changed = [k for k in _CLASS if v.d[k] != getattr(plan.parallel, k)]
        room = f", {e.memory_headroom:.0%} of {e.gpu_memory_gib:g} GiB kept free" if e.memory_headroom else ""
        reason = (
            f"{_show(v.setting, _value(v.setting, v.d))} ({describe(v.cand)}) would be "
            f"{_pct(1 - e.step_time_s / plan.estimate.step_time_s)} faster ({e.step_time_s:.6g} s) but does not fit: "
            f"needs {e.peak_memory_gib:.1f} GiB of {e.usable_memory_gib:.4g} GiB{room}"
        )
        ruled = RuledOut(
            parallel=v.parallel(),
            settings_changed=changed,
            step_time_s=e.step_time_s,
            peak_memory_gib=e.peak_memory_gib,
            usable_memory_gib=e.usable_memory_gib,
            reason=reason,
        )
    return alts, ruled


# ---------------------------------------------------------------------------------------------


def binding_constraint(
    plan: Plan, ruled: RuledOut | None
) -> tuple[Literal["memory", "bubble", "communication", "compute"], str]:
    e = plan.estimate
    b = e.breakdown
    step = e.step_time_s or 1.0
    comm = b.tp_comm_s + b.pp_p2p_s + b.dp_sync_s + b.cp_comm_s + b.ep_comm_s
    if ruled is not None:
        return "memory", f"this plan peaks at {e.peak_memory_gib:.1f} of {e.gpu_memory_gib:g} GiB; {ruled.reason}"
    if b.pp_bubble_s / step >= 0.15:
        return (
            "bubble",
            f"the pipeline bubble is {b.pp_bubble_s / step:.0%} of the step ({e.num_microbatches} micro-batches over {plan.parallel.pp} stages)",
        )
    if comm / step >= 0.25:
        return (
            "communication",
            f"communication on the critical path is {comm / step:.0%} of the step (TP {b.tp_comm_s:.3g} s, p2p {b.pp_p2p_s:.3g} s, DP {b.dp_sync_s:.3g} s"
            + (f", CP {b.cp_comm_s:.3g} s" if b.cp_comm_s else "")
            + (f", EP all-to-all {b.ep_comm_s:.3g} s" if b.ep_comm_s else "")
            + ")",
        )
    return "compute", f"compute is {b.compute_s / step:.0%} of the step at {e.mfu:.0%} MFU"


def runner_up_reason(best: Plan, other: Plan) -> str:
    a, b = best.estimate, other.estimate
    diffs = {k: getattr(b.breakdown, k) - getattr(a.breakdown, k) for k in _PARTS}
    worst = max(diffs, key=lambda k: diffs[k])
    slower = b.step_time_s / a.step_time_s - 1 if a.step_time_s else 0.0
    if abs(b.step_time_s - a.step_time_s) < 1e-9:
        dm = b.peak_memory_gib - a.peak_memory_gib
        return f"{_describe(other)} is as fast ({b.step_time_s:.4g} s) and needs {dm:+.1f} GiB ({b.peak_memory_gib:.1f} GiB)"
    return (
        f"{_describe(other)} is {_pct(slower)} slower ({b.step_time_s:.6g} s vs {a.step_time_s:.6g} s), "
        f"mostly {_PARTS[worst]} (+{diffs[worst]:.3g} s)"
    )


def explain(ctx, plans: list[Plan], result, request: PlanRequest | None = None) -> list[Plan]:
    out = []
    for i, plan in enumerate(plans):
        alts, ruled = alternatives_and_ruled_out(ctx, request, plan) if i == 0 and request is not None else ([], None)
        kind, why = binding_constraint(plan, ruled)
        details = [f"{_SHORT[k]}: {getattr(plan.estimate.breakdown, k):.4g} s" for k in _PARTS]
        details.append(f"priced for the training stack {ctx.stack.describe()}")
        if ctx.model.moe is not None:
            details.append(expert_note(ctx.model.moe, plan.parallel))
        residuals = describe_residuals(ctx)
        if residuals is not None:
            details.append(residuals)
        if plan.parallel.zero_stage == 3 and plan.parallel.dp > 1:
            details.append(
                "DP sync includes ZeRO-3's per-layer parameter gathers and gradient reduce-scatters beyond the "
                "layer's compute (compute running under them is slowed by the overlap: planner.compose.terms.OVERLAP_SLOWDOWN)"
            )
        details += [a.summary for a in alts]
        runner = None
        if i == 0 and len(plans) > 1:
            runner = runner_up_reason(plan, plans[1])
        elif i > 0:
            runner = f"loses to plan 1: {runner_up_reason(plans[0], plan)}"
        out.append(
            plan.model_copy(
                update={
                    "explanation": Explanation(
                        binding_constraint=kind,
                        summary=f"{_describe(plan)}: {why}",
                        runner_up=runner,
                        details=details,
                        alternatives=alts,
                        ruled_out=ruled,
                    )
                }
            )
        )
    return out
