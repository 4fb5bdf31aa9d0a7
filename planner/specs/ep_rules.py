"""Rules of expert parallelism (``parallel.ep``, ``parallel.etp``; issue 23), each written once and re-exported by
``planner.specs.rules``: every one returns ``None`` when it holds, else the ``MeshplanError`` naming the field and
the fix.

The layout is Megatron-core's "parallel folding" (megatron/core/transformer/moe/README.md; notes §2): the dense
layers of a pipeline stage see tp × dp ranks, its expert layers etp × ep × edp over the same ranks
(tp · dp = etp · ep · edp), EP carved out of the data-parallel ranks next to TP. ``etp`` is 1 or tp (torchtitan
v0.2.2 offers the same two); with tp > 1 and experts not split by TP (etp = 1), or with ep > 1, the MoE layer
takes the sequence-parallel shard of the tokens (Megatron: "SP is required when EP and TP are both on").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from planner.specs.errors import MeshplanError
from planner.specs.stacks import STACKS, Stack

if TYPE_CHECKING:
    from planner.specs import ModelSpec

Err = MeshplanError | None


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def etp_is_one_or_tp(etp: int | None, tp: int | None) -> Err:
    if etp is None or etp == 1 or tp is None or etp == tp:
        return None
    return MeshplanError(
        "parallel.etp",
        f"etp={etp} must be 1 (whole experts per rank) or tp={tp} (experts split like the dense MLP)",
        f"set parallel.etp to 1 or {tp}",
    )


def ep_divides_dp(ep: int | None, dp: int | None) -> Err:
    if ep is None or dp is None or dp % ep == 0:
        return None
    return MeshplanError(
        "parallel.ep",
        f"ep={ep} does not divide dp={dp}: expert-parallel ranks are carved out of the data-parallel ranks",
        f"choose an ep that divides dp: one of {_divisors(dp)}",
    )


def ep_fits_model(model: ModelSpec, ep: int | None, etp: int | None = None) -> Err:
    """ep > 1 (or etp > 1) needs routed experts; ep divides them; etp divides the expert FFN width."""
    moe = model.moe
    if moe is None:
        if ep is not None and ep > 1:
            return MeshplanError(
                "parallel.ep",
                f"ep={ep} but {model.name!r} is a dense model (no model.moe): it has no experts to split",
                "set parallel.ep to 1 or plan a mixture-of-experts model",
            )
        return None
    if ep is not None and moe.num_experts % ep:
        return MeshplanError(
            "parallel.ep",
            f"ep={ep} does not divide the model's {moe.num_experts} routed experts (model.moe.num_experts)",
            f"choose an ep that divides num_experts: one of {_divisors(moe.num_experts)}",
        )
    if etp is not None and moe.expert_ffn_hidden_size % etp:
        return MeshplanError(
            "parallel.etp",
            f"etp={etp} does not divide the expert FFN width {moe.expert_ffn_hidden_size} "
            "(model.moe.expert_ffn_hidden_size)",
            "set parallel.etp to 1",
        )
    return None


def expert_tokens_split(model: ModelSpec, tp: int | None, ep: int | None, etp: int | None, sp: bool | None) -> Err:
    """With tp > 1 an MoE layer whose experts are not split by TP (etp = 1), or dispatched over ep > 1 ranks,
    takes each TP rank's sequence-parallel shard of the tokens: sequence parallelism is on."""
    if model.moe is None or tp is None or tp == 1 or sp is None or sp:
        return None
    if (ep is not None and ep > 1) or (etp is not None and etp < tp):
        return MeshplanError(
            "parallel.sequence_parallel",
            f"expert parallelism with tp={tp} (ep={ep}, etp={etp}) needs sequence parallelism: each TP rank "
            "dispatches its own shard of the tokens (Megatron-core requires --sequence-parallel with EP and TP)",
            "set parallel.sequence_parallel to true, or ep to 1 and etp to tp",
        )
    return None


def _name(stack: Stack) -> str:
    return f"the training stack {stack.id!r} ({stack.version})"


def _moe_stacks() -> str:
    return " / ".join(s.id for s in STACKS.values() if s.moe)


def stack_runs_moe(stack: Stack, model: ModelSpec, ep: int | None, etp: int | None, tp: int | None) -> Err:
    """The stack runs MoE models (``Stack.moe``), ep > 1 (``Stack.expert_parallel``) and the etp asked
    (``Stack.etp``: "one" = 1, "tp" = tp)."""
    if model.moe is None:
        return None
    if not stack.moe:
        return MeshplanError(
            "training.stack",
            f"{_name(stack)} does not run mixture-of-experts models ({model.name!r} has {model.moe.num_experts} "
            "experts): it has no MoE block",
            f"plan for a stack that runs MoE (training.stack: {_moe_stacks()})",
        )
    if ep is not None and ep > 1 and not stack.expert_parallel:
        ids = " / ".join(s.id for s in STACKS.values() if s.expert_parallel)
        return MeshplanError(
            "parallel.ep",
            f"{_name(stack)} does not run expert parallelism (ep={ep})",
            f"set parallel.ep to 1 or leave it unpinned, or plan for a stack that runs EP (training.stack: {ids})",
        )
    if etp is not None and tp is not None and tp > 1:
        mode = "one" if etp == 1 else "tp"
        if mode not in stack.etp:
            ok = " or ".join("1" if m == "one" else str(tp) for m in stack.etp)
            return MeshplanError(
                "parallel.etp", f"{_name(stack)} does not run etp={etp} with tp={tp}", f"set parallel.etp to {ok}"
            )
    return None


def expert_parallel_rules(stack: Stack, model: ModelSpec, c: Any) -> Err:
    """Every EP rule of a configuration, a class or pins (None fields unchecked)."""
    tp, dp, ep, etp = c.tp, c.dp, getattr(c, "ep", None), getattr(c, "etp", None)
    for err in (
        ep_fits_model(model, ep, etp),
        etp_is_one_or_tp(etp, tp),
        ep_divides_dp(ep, dp),
        expert_tokens_split(model, tp, ep, etp, c.sequence_parallel),
        stack_runs_moe(stack, model, ep, etp, tp),
    ):
        if err is not None:
            return err
    return None
