"""What an answer says of a mixture-of-experts plan's expert layers (issue 23)."""

from __future__ import annotations

from planner.specs import MoeSpec, ParallelConfig


def expert_note(moe: MoeSpec, p: ParallelConfig) -> str:
    """What the expert layers of a MoE plan see (Megatron-core's folding: etp × ep × edp over tp × dp)."""
    edp = p.tp * p.dp // (p.ep * p.etp)
    return (
        f"experts: {moe.num_experts // p.ep} of {moe.num_experts} per GPU (EP{p.ep}, ETP{p.etp}, expert-DP {edp}); "
        f"each token's hidden state goes to its top-{moe.top_k} experts by all-to-all over the EP group "
        "(EP all-to-all in the breakdown)"
        if p.ep > 1
        else f"experts: all {moe.num_experts} on every GPU (EP1, ETP{p.etp}): no all-to-all"
    )
