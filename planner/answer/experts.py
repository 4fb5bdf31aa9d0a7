"""What an answer says of a mixture-of-experts plan's expert layers (issue 23)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.compose.memory import GIB, main_grad_bytes, reported_peak, stack_states
from planner.specs import MoeSpec, ParallelConfig, StageMemory
from planner.workload.accumulation import dp_schedule
from planner.workload.collectives import grad_bytes
from planner.workload.expert_parallel import expert_dp, expert_work

if TYPE_CHECKING:
    from planner.compose.context import Context
    from planner.compose.cost import ClassCosts


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


def expert_memory(ctx: Context, cc: ClassCosts, n: list[int], stages: list[StageMemory]) -> list[StageMemory]:
    """``stages`` with the routed experts' weights, gradients and optimizer states itemised (``expert_*_gib``) and
    the model states split in the ratio of each part's own bytes per parameter: the experts' are sharded over the
    expert-data-parallel ranks (tp · dp / (ep · etp)) by ZeRO, the rest over dp (``compose.terms``: the same bytes
    the memory constraint counts; the total is unchanged). Gradients that do not exist yet at the reported peak
    (``memory.pending_grads``: whole gradients before their chunk's first backward, cost model 51) are taken from the
    part they belong to: the experts' of the chunks not done, the rest from the dense part. Dense models: unchanged."""
    model, c, tr = ctx.model, cc.cand, ctx.training
    if model.moe is None:
        return stages
    per_layer = expert_work(model, 1, tr.seq_len, c.tp, c.sequence_parallel, c.ep, c.etp, ctx.elt, c.recompute)
    edp = expert_dp(c.tp, c.dp, c.ep, c.etp)
    sched = dp_schedule(ctx.stack.grad_accumulation, c.zero_stage, c.pp * c.virtual_stages > 1)
    ge = grad_bytes(ctx.stack, tr.precision, ctx.elt)
    whole, main = sched.whole_grad_bytes(ctx.stack.grad_accumulation, ctx.elt, ge), main_grad_bytes(ctx.stack, ge)
    per_e = stack_states(ctx.stack, tr, c.zero_stage, edp, whole, main)
    per = stack_states(ctx.stack, tr, c.zero_stage, c.dp, whole, main)
    starts = [sum(n[:ch]) for ch in range(len(n))]

    def moe_layers(chunks: list[int]) -> int:
        return sum(model.is_moe_layer(i) for ch in chunks for i in range(starts[ch], starts[ch] + n[ch]))

    out = []
    for r, st in enumerate(stages):
        t, i, done = reported_peak(cc, n, r)
        pending = t.pending[i] / GIB  # the gradients the reported peak lacks (all parts)
        waiting = [] if done is None else [ch for ch in cc.rank_chunks(r) if ch not in done]
        params = per_layer.expert_params * moe_layers(cc.rank_chunks(r))
        expert = [params * b / GIB for b in per_e[:3]]  # every expert gradient held
        dense = st.weights_gib + st.gradients_gib + st.optimizer_gib + pending - sum(expert)  # held or not
        split = [dense * b / per.total + e for b, e in zip(per[:3], expert)] if per.total else list(expert)
        split[1] -= pending
        expert[1] -= per_layer.expert_params * moe_layers(waiting) * per_e.gradients / GIB
        out.append(
            st.model_copy(
                update={
                    "weights_gib": split[0],
                    "gradients_gib": split[1],
                    "optimizer_gib": split[2],
                    "expert_weights_gib": expert[0],
                    "expert_gradients_gib": expert[1],
                    "expert_optimizer_gib": expert[2],
                }
            )
        )
    return out
