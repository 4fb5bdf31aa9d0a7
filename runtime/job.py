"""A Plan made executable on this rank: the device mesh, this rank's model chunks with the plan's
parallelisms applied, the pipeline schedule, and the optimizer.

    validate (same on every rank, before any process-group work) → init_device_mesh("pp","dp",["cp",]"tp")
    → per local chunk: prune a seeded full model at stage_layers → FP8 (torchao float8, precision fp8) → CP → TP
      → recompute → DP (over dp × cp)
    → PipelineStage + the plan's schedule → AdamW

One code path serves every combination (pp=1 runs the micro-batches itself, without a schedule).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from planner.specs import Plan
from planner.specs.config import SCHEDULES
from planner.specs.layout import cp_a2a_size, stage_ranks
from runtime.context_parallel import CPContext, apply_cp, hierarchical_groups
from runtime.expert_parallel import (
    EPContext,
    apply_ep,
    apply_expert_dp,
    expert_mesh,
    moe_modules,
    shard_experts,
    update_expert_bias,
)
from runtime.fp8 import apply_fp8
from runtime.fp8 import note as fp8_note
from runtime.models import Transformer, build_model, init_weights
from runtime.parallelize import ZERO_BUBBLE, apply_compile, apply_dp, apply_recompute, apply_tp, mixed_precision
from runtime.validate import num_microbatches, validate_plan


@dataclass(frozen=True)
class TrainConfig:
    """Optimizer and initialisation settings (not part of a plan: a plan says *how* to parallelise)."""

    seed: int = 0
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.1
    max_grad_norm: float | None = 1.0


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of one micro-batch (fp32)."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1))


def defer_gradient_sync(zero_stage: int) -> bool:
    """Whether the micro-batches' gradients are accumulated before one DP reduction (FSDP2's
    ``set_requires_gradient_sync(False)`` until the last): below ZeRO-3, whose gradients stay whole until
    the step's one reduction (``replicate``; ``fully_shard`` without resharding after forward), as the cost
    model prices them (``planner.compose.terms``: one sync per step; ``memory.state_bytes``: whole fp32 gradients).
    ZeRO-3 reduce-scatters each micro-batch's gradients as its backward runs (priced per micro-batch):
    deferring would accumulate them unsharded, in fp32 under the mixed-precision policy — 4 bytes per
    parameter that the sharding exists to save."""
    return zero_stage < 3


def make_optimizer(params, train: TrainConfig, kind: str = "adam") -> torch.optim.Optimizer:
    params = list(params)
    if kind == "sgd":
        return torch.optim.SGD(params, lr=train.lr, weight_decay=train.weight_decay)
    return torch.optim.AdamW(params, lr=train.lr, betas=train.betas, weight_decay=train.weight_decay)


def chunk_layer_ids(stage_layers: list[int]) -> list[list[int]]:
    out, start = [], 0
    for n in stage_layers:
        out.append(list(range(start, start + n)))
        start += n
    return out


def build_chunk(plan: Plan, chunk: int, *, seed: int, device: torch.device, ep_rank: int = 0) -> Transformer:
    """Chunk ``chunk`` of the model: the full model (built on meta) with the other chunks' layers
    deleted; the embedding only on chunk 0, final norm and head only on the last; under expert parallelism
    only ep rank ``ep_rank``'s experts of each MoE layer. Names unchanged."""
    spec, layers = plan.model, chunk_layer_ids(plan.parallel.stage_layers)
    model = build_model(spec, device="meta")
    keep = {str(i) for i in layers[chunk]}
    for name in list(model.layers.keys()):
        if name not in keep:
            del model.layers[name]
    if plan.parallel.ep > 1:
        shard_experts(model, ep_rank, plan.parallel.ep)
    if chunk != 0:
        model.embed = None
    if chunk != len(layers) - 1:
        model.norm = model.head = None
    model.to_empty(device=device)
    if spec.tie_embeddings and model.embed is not None and model.head is not None:
        model.head.weight = model.embed.tok.weight
    init_weights(model, spec, seed)
    return model


def build_mesh(plan: Plan, device_type: str):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device_type, tuple(plan.mesh.shape), mesh_dim_names=tuple(plan.mesh.dim_names))


#: Schedule id → torch.distributed.pipelining class (planner.specs.config.SCHEDULES: the runnable ones).
_SCHEDULES = {s.id: s.torch_class for s in SCHEDULES if s.torch_class is not None}


@dataclass
class Job:
    plan: Plan
    train: TrainConfig
    device: torch.device
    mesh: object
    chunks: dict[int, nn.Module]  # chunk index → module, this rank's chunks in order
    optimizers: list[torch.optim.Optimizer]
    schedule: object | None
    dp_wrapper: str | None
    notes: list[str] = field(default_factory=list)
    cp: CPContext | None = None  # context parallelism (cp > 1): this rank's share of each sequence
    stage_group: object = None  # a mixture of experts: the ranks of this pipeline stage (expert-bias counts)

    # ---------------------------------------------------------------- construction
    @classmethod
    def build(
        cls,
        plan: Plan,
        train: TrainConfig = TrainConfig(),
        *,
        device: torch.device | None = None,
        world_size: int | None = None,
        compile_blocks: bool = False,
    ) -> Job:
        world = world_size if world_size is not None else dist.get_world_size()
        validate_plan(plan, world)  # identical on every rank: fails before any collective
        device = device or _default_device()
        p, notes = plan.parallel, []
        mesh = build_mesh(plan, device.type)
        pp_rank = mesh.get_local_rank("pp")
        mp = mixed_precision(plan.training.precision, device.type)
        if plan.training.precision == "fp8":
            notes.append(str(fp8_note(plan, device.type)))
        elif mp is None and plan.training.precision != "fp32":
            notes.append(f"{plan.training.precision} requested; ran fp32 on {device.type}")
        chunks, dp_wrapper = {}, None
        cp = None
        if p.cp > 1:  # a2a+p2p: its inner (all-to-all) and outer (ring) groups, made on every rank
            levels = (
                hierarchical_groups(mesh, cp_a2a_size(p, plan.cluster.gpus_per_node)) if p.cp_comm == "a2a+p2p" else ()
            )
            cp = CPContext(mesh.get_group("cp"), p.cp_comm, *levels)
        # Dense layers' data parallelism spans dp × cp: the cp ranks of a replica hold the same weights.
        dp_mesh = mesh["dp", "cp"]._flatten("dp_cp") if cp is not None else mesh["dp"]
        moe = plan.model.moe is not None
        emesh = expert_mesh(plan, device.type) if moe and p.num_gpus > 1 else None
        ep = EPContext(emesh.get_group("ep"), plan.model.moe.num_experts) if emesh is not None and p.ep > 1 else None
        # the ranks that split one sequence (their routing counts add up for the sequence-level aux loss)
        seq_groups = tuple(mesh.get_group(d) for d, n in (("cp", p.cp), ("tp", p.tp)) if n > 1)
        # the aux loss's gradient joins the micro-batch's loss gradient: ÷ micro-batches when this runtime
        # accumulates them itself (a pipeline schedule rescales all gradients), × cp (the dense mean over dp × cp)
        aux_scale = (1.0 if p.pp > 1 else 1.0 / num_microbatches(plan)) * p.cp
        for c, r in enumerate(stage_ranks(p)):
            if r != pp_rank:
                continue
            ep_rank = emesh.get_local_rank("ep") if ep is not None else 0
            module = build_chunk(plan, c, seed=train.seed, device=device, ep_rank=ep_rank)
            apply_fp8(module, plan)  # before TP and DP, as torchtitan converts (a no-op unless precision fp8)
            if cp is not None:
                apply_cp(module, cp)
            if moe:
                apply_ep(module, plan, emesh, ep, seq_groups, aux_scale)
            if p.tp > 1:
                apply_tp(module, mesh["tp"], plan.tp_plan, tie_embeddings=plan.model.tie_embeddings)
            apply_recompute(module, p.recompute)
            if compile_blocks:
                apply_compile(module)
            ignored: set = set()
            if emesh is not None:
                reshard = p.zero_stage == 3 and p.schedule not in ZERO_BUBBLE
                ignored = apply_expert_dp(module, emesh["edp"], p.zero_stage, reshard, mp)
            dp_wrapper = apply_dp(module, dp_mesh, p, mp, ignored)
            chunks[c] = module
        if compile_blocks:
            notes.append("transformer blocks compiled with torch.compile (--compile)")
        schedule = _build_schedule(plan, mesh, chunks, device) if p.pp > 1 else None
        optimizers = [make_optimizer(m.parameters(), train, plan.training.optimizer) for m in chunks.values()]
        stage_group = None
        if emesh is not None and any(m.balance == "expert_bias" for c in chunks.values() for m in moe_modules(c)):
            stage_group = emesh["edp", "ep"]._flatten("stage").get_group()
        return cls(plan, train, device, mesh, chunks, optimizers, schedule, dp_wrapper, notes, cp, stage_group)

    # ---------------------------------------------------------------- properties
    @property
    def num_microbatches(self) -> int:
        return num_microbatches(self.plan)

    @property
    def has_first(self) -> bool:
        return 0 in self.chunks

    @property
    def has_last(self) -> bool:
        return len(self.plan.parallel.stage_layers) - 1 in self.chunks

    def dp_slice(self, global_batch: torch.Tensor) -> torch.Tensor:
        """This rank's rows of a global batch (all TP and PP ranks of a DP replica see the same)."""
        dp = self.plan.parallel.dp
        return global_batch.chunk(dp)[self.mesh.get_local_rank("dp")]

    def named_parameters(self):
        for m in self.chunks.values():
            yield from m.named_parameters()

    # ---------------------------------------------------------------- one step
    def forward_backward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Forward and backward of this rank's share of the global batch (``inputs``/``targets``
        are this DP rank's rows); gradients equal those of the mean loss over the global batch,
        complete on every rank (no DTensor gradient left Partial: ``reduce_partial_grads``).
        Returns the global mean loss (same on every rank). Under context parallelism each rank keeps its
        share of every sequence (``CPContext.shard``); its loss is the mean over its tokens, the same count
        on every cp rank, so the mean over dp × cp (the DP reduction's) is the global mean."""
        inputs, targets = inputs.to(self.device), targets.to(self.device)
        if self.cp is not None:
            inputs, targets = self.cp.shard(inputs), self.cp.shard(targets)
        n = self.num_microbatches
        if self.schedule is None:
            (model,) = self.chunks.values()
            local = torch.zeros((), device=self.device)
            defer = defer_gradient_sync(self.plan.parallel.zero_stage)
            for i, (x, y) in enumerate(zip(inputs.chunk(n), targets.chunk(n))):
                if defer and hasattr(model, "set_requires_gradient_sync"):
                    model.set_requires_gradient_sync(i == n - 1)  # reduce once, after the last
                loss = loss_fn(model(x), y) / n
                loss.backward()
                local += loss.detach()
        else:
            losses: list[torch.Tensor] = []
            args = (inputs,) if self.has_first else ()
            kwargs = {"target": targets, "losses": losses} if self.has_last else {}
            self.schedule.step(*args, return_outputs=False, **kwargs)
            local = torch.stack(losses).mean().detach() if self.has_last else torch.zeros((), device=self.device)
        reduce_partial_grads([q for _, q in self.named_parameters()])
        p = self.plan.parallel
        dist.all_reduce(local)  # every last-stage rank holds its DP replica's loss (its cp share), tp times over
        return local / (p.dp * p.cp * p.tp)

    def clip_grad_norm(self) -> float:
        """Clip to ``train.max_grad_norm``; returns the global norm (NaN when clipping is off)."""
        if self.train.max_grad_norm is None:
            return float("nan")
        return clip_grad_norm(
            [p for _, p in self.named_parameters()],
            self.train.max_grad_norm,
            self.mesh.get_group("pp") if self.plan.parallel.pp > 1 else None,
        )

    def optimizer_step(self) -> None:
        for opt in self.optimizers:
            opt.step()
            opt.zero_grad(set_to_none=True)
        update_expert_bias(self.chunks.values(), self.stage_group)  # MoE with aux-loss-free balancing

    def train_step(self, inputs: torch.Tensor, targets: torch.Tensor) -> tuple[float, float]:
        loss = self.forward_backward(inputs, targets)
        norm = self.clip_grad_norm()
        self.optimizer_step()
        return float(loss), norm


def _default_device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _build_schedule(plan: Plan, mesh, chunks: dict[int, nn.Module], device: torch.device):
    p = plan.parallel
    return build_schedule(
        p.schedule, mesh.get_group("pp"), chunks, p.pp * p.virtual_stages, num_microbatches(plan), device
    )


def build_schedule(schedule: str, group, chunks: dict[int, nn.Module], total: int, n: int, device, loss=loss_fn):
    """The ``torch.distributed.pipelining`` schedule ``schedule`` (a ``planner.specs.config.SCHEDULES`` id) of this
    rank's ``chunks`` (chunk index → module) of ``total`` over the pipeline process group ``group``, ``n``
    micro-batches, ``loss(output, target)`` on the last chunk, gradients scaled by 1/n."""
    from torch.distributed import pipelining

    stages = [pipelining.PipelineStage(m, c, total, device, group=group) for c, m in chunks.items()]
    for stage, m in zip(stages, chunks.values(), strict=True):
        _no_counts_in_metadata_inference(stage, m)
    cls = getattr(pipelining, _SCHEDULES[schedule])
    if total == len(dist.get_process_group_ranks(group)):  # one chunk per rank
        return cls(stages[0], n, loss_fn=loss, scale_grads=True)
    return cls(stages, n, loss_fn=loss, scale_grads=True)


def _no_counts_in_metadata_inference(stage, chunk: nn.Module) -> None:
    """PyTorch 2.13's ``PipelineStage`` infers its shapes at the first step by running the chunk's forward once more
    (on the real input for the first stage, on empty tensors for the others). A MoE layer with aux-loss-free
    balancing counts the tokens its forward routes (``MoE.tokens_per_expert``), and one with a capacity factor the
    assignments it drops (``MoE.dropped``): those of that extra forward are not a step's tokens, so the layers stop
    counting while it runs (caught by the tiny-moe-shared pipeline rows and the capacity rows' drop count)."""
    mods = [m for m in moe_modules(chunk) if m.balance == "expert_bias" or m.capacity_factor is not None]
    infer = getattr(stage, "_forward_metadata_inference", None)
    if not mods or infer is None:
        return

    def without_counts(*args, **kwargs):
        for m in mods:
            m.counting = False
        try:
            return infer(*args, **kwargs)
        finally:
            for m in mods:
                m.counting = True

    stage._forward_metadata_inference = without_counts


def reduce_partial_grads(params: list[torch.Tensor]) -> None:
    """Sum every ``Partial`` DTensor gradient over its mesh now, one all-reduce per (mesh, placements, dtype)
    for all of them (Megatron all-reduces its sequence-parallel norms' gradients once per step the same way),
    and leave it ``Replicate``. Sequence parallelism leaves its norms' gradients Partial(sum) (their inputs
    are sharded by sequence); left so, every op that reads one later redistributes it again: the gradient
    clip once per tensor and AdamW once per op on it (``lerp_``, ``mul_``, ``addcmul_``): measured on tp2 + SP
    of the tiny model, 103 more blocking all-reduces per step than TP's own."""
    from torch.distributed.tensor import DTensor, Replicate

    groups: dict[tuple, list[torch.Tensor]] = defaultdict(list)
    for p in params:
        g = p.grad
        if isinstance(g, DTensor) and any(pl.is_partial() for pl in g.placements):
            groups[(g.device_mesh, tuple(g.placements), g.dtype)].append(p)
    with torch.no_grad():
        for (mesh, placements, _), members in groups.items():
            if any(pl.is_partial() and getattr(pl, "reduce_op", "sum") != "sum" for pl in placements):
                for p in members:  # not a sum: DTensor's own redistribution, one per tensor
                    p.grad = p.grad.redistribute(mesh, [Replicate() if pl.is_partial() else pl for pl in placements])
                continue
            pieces = [p.grad.to_local() for p in members]
            flat = torch.cat([t.reshape(-1) for t in pieces])
            for dim, pl in enumerate(placements):
                if pl.is_partial():
                    dist.all_reduce(flat, group=mesh.get_group(dim))
            done = tuple(Replicate() if pl.is_partial() else pl for pl in placements)
            for p, t, part in zip(members, pieces, flat.split([t.numel() for t in pieces]), strict=True):
                g = p.grad
                p.grad = DTensor.from_local(
                    part.view_as(t), mesh, done, run_check=False, shape=g.shape, stride=g.stride()
                )


def clip_grad_norm(params: list[torch.Tensor], max_norm: float | None, pp_group=None) -> float:
    """Global L2 gradient norm over params that mix plain tensors and DTensors on different meshes
    (``torch.nn.utils.clip_grad_norm_`` fails on those: https://github.com/pytorch/pytorch/issues/180346):
    norm per mesh, squares summed, summed over the pipeline ranks, then every gradient scaled by
    min(1, max_norm / (norm + 1e-6)), exactly as ``clip_grad_norm_`` does. Returns the total norm."""
    from torch.distributed.tensor import DTensor, Replicate

    groups: dict[object, list[torch.Tensor]] = defaultdict(list)
    for p in params:
        g = p.grad
        if g is None:
            continue
        if isinstance(g, DTensor):
            if any(pl.is_partial() for pl in g.placements):  # SP norm grads stay Partial(sum)
                g = g.redistribute(g.device_mesh, [Replicate() if pl.is_partial() else pl for pl in g.placements])
            groups[g.device_mesh].append(g)
        else:
            groups[None].append(g)
    device = next((g.device for gs in groups.values() for g in gs), torch.device("cpu"))
    total_sq = torch.zeros((), dtype=torch.float32, device=device)
    for grads in groups.values():
        norm = torch.nn.utils.get_total_norm(grads, 2.0)
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        total_sq += norm.float() ** 2
    if pp_group is not None:
        dist.all_reduce(total_sq, group=pp_group)
    total = math.sqrt(float(total_sq))
    if max_norm is not None:
        coef = min(1.0, max_norm / (total + 1e-6))
        for p in params:
            if p.grad is not None:
                p.grad.mul_(coef)
    return total
