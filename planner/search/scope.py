"""What an unpinned search leaves out of the space a pin reaches (issue 26: "OPTIMAL" must say over what).

Two policies, not bounds, keep the search fast on requests of more than ``cp_degrees.CP_FULL_GPUS`` GPUs: context
parallelism below ``cp_degrees.CP_MIN_SEQ`` tokens only when no class without it fits, and not below
``cp_degrees.CP_MIN_LOCAL_SEQ`` tokens per CP rank (``cp_degrees.cp_options``); and an
interleaved schedule left free is priced at its uniform split only (``driver.probe``), while a pinned one searches
its uneven cuts. A plan proven OPTIMAL is the best of the space searched; this names what that space leaves out and
the pin that reaches it, so the answer never claims more than was proven."""

from __future__ import annotations

from planner.compose.cost import Candidate, Context
from planner.search.cp_degrees import CP_MIN_LOCAL_SEQ, CP_MIN_SEQ, cp_policies
from planner.specs import ParallelPins


def unsearched(ctx: Context, pins: ParallelPins, cands: list[Candidate]) -> str | None:
    """One note naming what the search left out by policy (None when it left out nothing a pin reaches)."""
    parts: list[str] = []
    pins_to: list[str] = []
    st, seq, n = ctx.stack, ctx.training.seq_len, ctx.num_gpus
    if pins.cp is None and st.cp_comms and st.attention == "flash" and seq >= 4 and cp_policies(ctx):
        if seq < CP_MIN_SEQ and not any(c.cp > 1 for c in cands):
            parts.append(
                f"context parallelism (parallel.cp > 1: below {CP_MIN_SEQ:,} tokens it is searched only when no plan "
                "without it fits)"
            )
            pins_to.append("parallel.cp")
        elif seq // CP_MIN_LOCAL_SEQ < n:
            parts.append(
                f"cp degrees above {seq // CP_MIN_LOCAL_SEQ} (fewer than {CP_MIN_LOCAL_SEQ:,} tokens per CP rank)"
            )
    # a stack that splits evenly only (``Stack.even_stages``: Megatron-LM v2.0, v2.5) runs no uneven cut at all
    if (
        pins.schedule is None
        and pins.stage_layers is None
        and not st.even_stages
        and any(c.virtual_stages > 1 for c in cands)
    ):
        parts.append("uneven stage cuts of interleaved schedules (priced at their uniform split)")
        pins_to.append("parallel.schedule: interleaved-1f1b")
    if not parts:
        return None
    return (
        "scope: the search, and an OPTIMAL proof, cover every configuration but, by policy, "
        + "; ".join(parts)
        + f". Pin {' or '.join(pins_to)} to search them"
    )
