"""What an unpinned search leaves out of the space a pin reaches (issue 26: "OPTIMAL" must say over what).

Two policies, not bounds, keep the search fast on requests of more than ``cp_degrees.CP_FULL_GPUS`` GPUs: context
parallelism below ``cp_degrees.CP_MIN_SEQ`` tokens only when no class without it fits, and not below
``cp_degrees.CP_MIN_LOCAL_SEQ`` tokens per CP rank (``cp_degrees.cp_options``). And an interleaved class of a free
schedule is solved within a budget (``uneven``): one the budget leaves unproven is named, while a pinned schedule
searches its uneven cuts to the time limit. Free interleaving goes to ``space.MAX_VIRTUAL_STAGES`` and a layer a
chunk (``space.virtual_stage_options``); the v between them are pinned with ``parallel.virtual_stages``. A plan proven
OPTIMAL is the best of the space searched; this names what that space leaves out and the pin that reaches it, so the
answer never claims more than was proven."""

from __future__ import annotations

from operator import attrgetter

from planner.compose.cost import Candidate, Context
from planner.search.cp_degrees import CP_MIN_LOCAL_SEQ, CP_MIN_SEQ, cp_policies
from planner.search.families import Family
from planner.search.space import MAX_VIRTUAL_STAGES, virtual_stage_options
from planner.specs import ParallelPins, SearchOptions

_CP, _PP_V = attrgetter("cp"), attrgetter("pp", "virtual_stages")


def unsearched(
    ctx: Context,
    pins: ParallelPins,
    cands: list[Candidate],
    past_budget: str | None = None,
    families: list[Family] | None = None,
) -> str | None:
    """One note naming what the search left out by policy (None when it left out nothing a pin reaches);
    ``past_budget``: ``uneven.note``, the interleaved classes of a free schedule left unproven. ``families``: ``cands``
    as the enumeration grouped them (every class in one), read by one class each: a family's classes share pp, v and
    cp, all these scans read (DeepSeek-V3 on 2,048 H100: 6,104 families for 95,440 classes)."""
    cands = [rows[0][0] for _, rows in families] if families is not None else cands
    parts: list[str] = []
    pins_to: list[str] = []
    st, seq, n = ctx.stack, ctx.training.seq_len, ctx.num_gpus
    if pins.cp is None and st.cp_comms and st.attention == "flash" and seq >= 4 and cp_policies(ctx):
        if seq < CP_MIN_SEQ and max(map(_CP, cands), default=1) == 1:  # no class with CP (in C: 95k classes)
            parts.append(
                f"context parallelism (parallel.cp > 1: below {CP_MIN_SEQ:,} tokens it is searched only when no plan "
                "without it fits)"
            )
            pins_to.append("parallel.cp")
        elif seq // CP_MIN_LOCAL_SEQ < n:
            parts.append(
                f"cp degrees above {seq // CP_MIN_LOCAL_SEQ} (fewer than {CP_MIN_LOCAL_SEQ:,} tokens per CP rank)"
            )
    deep = unsearched_virtual_stages(ctx, pins, cands)
    if deep:
        parts.append(
            f"interleaving deeper than {MAX_VIRTUAL_STAGES} virtual stages other than a layer a chunk ({deep})"
        )
        pins_to.append("parallel.virtual_stages")
    if past_budget is not None:  # interleaved classes of a free schedule the search's budget left unproven
        parts.append(past_budget)
        pins_to.append("parallel.schedule: interleaved-1f1b")
    if not parts:
        return None
    return (
        "scope: the search, and an OPTIMAL proof, cover every configuration but, by policy, "
        + "; ".join(parts)
        + f". Pin {' or '.join(pins_to)} to search them"
    )


def unsearched_virtual_stages(ctx: Context, pins: ParallelPins, cands: list[Candidate]) -> str:
    """The pipeline degrees of the interleaved classes searched whose v between ``MAX_VIRTUAL_STAGES`` and L/pp a
    pin reaches but ``space.virtual_stage_options`` leaves out ("" when none): "pp 2: v 9-15", say."""
    if pins.virtual_stages is not None:
        return ""
    L, even, out = ctx.model.num_layers, ctx.stack.even_stages, []
    for pp in sorted({pp for pp, v in set(map(_PP_V, cands)) if v > 1}):
        runs = [v for v in range(MAX_VIRTUAL_STAGES + 1, L // pp + 1) if not even or L % (pp * v) == 0]
        left = [v for v in runs if v not in virtual_stage_options(pp, L)]
        if left:
            span = left[-1] - left[0] + 1 == len(left) > 2
            out.append(f"pp {pp}: v " + (f"{left[0]}-{left[-1]}" if span else ", ".join(map(str, left))))
    return "; ".join(out)


def time_limit_note(options: SearchOptions, best: int, bound: int) -> str:
    """What a user reads when the time limit ended the search: not proven, by how much at most, what helps."""
    gap = (best - bound) / best if best else 0.0
    return (
        f"NOT PROVEN OPTIMAL: the time limit (options.time_limit_s = {options.time_limit_s:g} s) ended the search; "
        f"the best plan is at most {gap:.1%} slower than the best possible (step {best / 1e9:.4g} s, lower bound "
        f"{bound / 1e9:.4g} s); it is never worse than the expert-like configurations evaluated first. To prove it: "
        "raise options.time_limit_s (--time-limit-s), or pin settings you already know (tp, pp, schedule) to "
        "shrink the search"
    )
