"""Expert parallelism (EP, ``parallel.ep``; issue 23) in the plan applier: the expert mesh, the experts' shards,
token dispatch and combine with all-to-all, the experts' data parallelism and the expert-bias update.

Layout (Megatron-core's "parallel folding", ../shared/notes/moe-cp-fp8.md §2): the dense layers of a pipeline stage
see the plan's mesh ``(pp, dp, [cp,] tp)``; its expert layers see ``(pp, edp, ep)`` over the same ranks, EP carved
out of the data-parallel ranks: dp = dp_outer × ep with ep innermost (the ep ranks of a group are dp-adjacent:
global ranks tp × cp apart), and the expert-data-parallel group ``edp`` = dp_outer × cp × tp (etp = 1: each expert
whole on a rank, so the TP ranks — which hold their own sequence-parallel tokens — and the CP ranks are extra
expert replicas). tp · cp · dp = ep · edp. Expert weights are ``Shard(0)`` DTensors on ``ep`` (global shape
[E, …], so checkpoints reshard into any other plan) and FSDP2 (or FSDP2's ``replicate``, per ``zero_stage``) runs
them over ``edp``, as torchtitan does over its ``efsdp`` dim.

Gradients: the expert weights of rank r receive the gradients of every token routed to them from the ep ranks
of its group, and each edp rank holds other tokens; the true gradient is their sum over ep senders and edp
holders ÷ (dp · cp) (the dense layers' mean), while the edp reduction means over edp = dp·cp·tp/ep ranks. So the
experts' weight gradients are scaled by tp/ep in backward (``local_weight``), which makes the edp mean the
global one (and the gradient of a lone holder, edp = 1, the sum over its dp = ep senders ÷ dp).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from planner.specs import Plan


class _ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad * ctx.scale, None


def local_weight(p: torch.Tensor, experts) -> torch.Tensor:
    """The experts' local weights for compute (``to_local`` of an EP DTensor), their gradient scaled by
    ``experts.grad_scale`` (see the module docstring)."""
    w = p.to_local() if hasattr(p, "to_local") else p
    scale = getattr(experts, "grad_scale", 1.0)
    return w if scale == 1.0 else _ScaleGrad.apply(w, scale)


def expert_ranks(pp: int, dp: int, cp: int, tp: int, ep: int) -> torch.Tensor:
    """Global ranks of the expert mesh ``(pp, edp, ep)``: the plan's row-major ``(pp, dp, cp, tp)`` ranks with dp
    split into (dp / ep, ep), ep moved innermost and the rest folded into edp (module docstring)."""
    ranks = torch.arange(pp * dp * cp * tp).reshape(pp, dp // ep, ep, cp, tp)
    return ranks.permute(0, 1, 3, 4, 2).reshape(pp, dp // ep * cp * tp, ep)


def expert_mesh(plan: Plan, device_type: str):
    """The expert layers' DeviceMesh ``(pp, edp, ep)`` over the plan's ranks (module docstring)."""
    from torch.distributed.device_mesh import DeviceMesh

    p = plan.parallel
    ranks = expert_ranks(p.pp, p.dp, p.cp, p.tp, p.ep)
    return DeviceMesh(device_type, ranks, mesh_dim_names=EXPERT_MESH_DIMS)


#: The expert layers' mesh dims (``expert_mesh``; ``runtime.env.expert_mesh_from_env``).
EXPERT_MESH_DIMS = ("pp", "edp", "ep")


class EPContext:
    """This rank's expert-parallel group: dispatches rows sorted by global expert to the ranks holding their
    experts, runs the local experts and sends the results back (both all-to-alls autograd-correct)."""

    def __init__(self, group: dist.ProcessGroup, num_experts: int) -> None:
        self.group = group
        self.size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.local = num_experts // self.size

    def run(self, experts: nn.Module, rows: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        from torch.distributed._functional_collectives import all_to_all_single_autograd, wait_tensor

        n, local = self.size, self.local
        recv = torch.empty_like(counts)
        dist.all_to_all_single(recv, counts, group=self.group)  # [n sources × local experts] rows I receive
        send_splits = counts.view(n, local).sum(1).tolist()
        recv_counts = recv.view(n, local)
        recv_splits = recv_counts.sum(1).tolist()
        got = wait_tensor(all_to_all_single_autograd(rows.contiguous(), recv_splits, send_splits, self.group))
        # regroup by local expert (rows arrive by source rank, then expert)
        expert_of = torch.arange(local, device=rows.device).repeat(n).repeat_interleave(recv_counts.reshape(-1))
        perm = torch.argsort(expert_of, stable=True)
        out = experts(got.index_select(0, perm), recv_counts.sum(0))
        back = out.index_select(0, torch.argsort(perm))
        return wait_tensor(all_to_all_single_autograd(back.contiguous(), send_splits, recv_splits, self.group))


def moe_modules(chunk: nn.Module) -> list[nn.Module]:
    from runtime.models.moe import MoE

    return [m for m in chunk.modules() if isinstance(m, MoE)]


def shard_experts(chunk: nn.Module, ep_rank: int, ep: int) -> None:
    """Keep this ep rank's E/ep experts of every MoE layer (on the meta device, before materialising)."""
    for moe in moe_modules(chunk):
        local = moe.experts.num_experts // ep
        moe.experts.keep(ep_rank * local, local)


def apply_ep(chunk: nn.Module, plan: Plan, emesh, ep: EPContext | None, seq_groups: tuple, aux_scale: float) -> None:
    """Hand each MoE layer its EP context, sequence-splitting groups and aux-loss scale; make its (already
    sharded, initialised) expert weights ``Shard(0)`` DTensors on the ``ep`` mesh; set the gradient scale."""
    from torch.distributed.tensor import DTensor, Shard

    p = plan.parallel
    for moe in moe_modules(chunk):
        moe.ep, moe.seq_groups, moe.aux_scale = ep, seq_groups, aux_scale
        experts = moe.experts
        experts.grad_scale = p.tp / p.ep
        if ep is None:
            continue
        for name in experts.leaves:  # weights, and the biases of gpt-oss's experts: each with its expert
            local = getattr(experts, name)
            dt = DTensor.from_local(local.data, emesh["ep"], [Shard(0)], run_check=False)
            setattr(experts, name, nn.Parameter(dt, requires_grad=local.requires_grad))


def apply_expert_dp(chunk: nn.Module, edp_mesh, zero_stage: int, reshard: bool, mp_policy=None) -> set:
    """The experts' data parallelism over ``edp`` (each MoE layer's experts their own unit, before the dense
    wrapping of their block); returns the expert parameters the dense wrapping must leave alone when edp = 1."""
    kw = {} if mp_policy is None else {"mp_policy": mp_policy}
    left: set = set()
    for moe in moe_modules(chunk):
        if edp_mesh.size() == 1 and mp_policy is None:
            left |= set(moe.experts.parameters())
            continue
        if zero_stage == 0:
            from torch.distributed._composable.replicate_with_fsdp import replicate

            replicate(moe.experts, mesh=edp_mesh, **kw)
        else:
            from torch.distributed.fsdp import fully_shard

            fully_shard(moe.experts, mesh=edp_mesh, reshard_after_forward=reshard, **kw)
    return left


def update_expert_bias(chunks, group) -> None:
    """After an optimizer step: sum each expert-bias MoE layer's token counts over the stage's ranks (``group``,
    all of dp × cp × tp: they routed different tokens), then move its bias (``MoE.update_bias``)."""
    mods = [m for c in chunks for m in moe_modules(c) if m.balance == "expert_bias"]
    if not mods:
        return
    counts = torch.stack([m.tokens_per_expert for m in mods])
    if group is not None:
        dist.all_reduce(counts, group=group)
    for m, c in zip(mods, counts, strict=True):
        m.update_bias(c)
