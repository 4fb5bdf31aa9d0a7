"""The plan's parallelisms, applied to one pipeline chunk in a fixed order (torchtitan's):
tensor parallelism (the plan's ``tp_plan``) → activation checkpointing → data parallelism.

Order matters: TP turns parameters into DTensors on the TP mesh, checkpointing wraps the modules
without renaming them, and FSDP2 shards the (possibly TP-sharded) parameters over the DP mesh.
"""

from __future__ import annotations

import fnmatch

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    PrepareModuleOutput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from planner.specs import ParallelConfig, TPRule
from planner.specs.config import SCHEDULES

_LAYOUTS = {"replicate": Replicate(), "shard_seq": Shard(1), "shard_last": Shard(-1)}
#: Schedules whose split backward (input and weight gradients apart) breaks FSDP2's default
#: reshard-after-forward in PyTorch 2.13 (silently wrong gradients; the zero-bubble cases of
#: tests/test_runtime_equivalence.py catch it): they always run without resharding.
ZERO_BUBBLE = frozenset(s.id for s in SCHEDULES if s.splits_backward)


def _one(layouts: list[str] | None):
    return None if not layouts else _LAYOUTS[layouts[0]]


def _many(layouts: list[str] | None):
    return None if not layouts else tuple(_LAYOUTS[x] for x in layouts)


def tp_style(rule: TPRule):
    """The ``ParallelStyle`` of one rule; ``None`` for ``replicate`` (parameters stay plain tensors,
    identical on every TP rank because every rank builds the same seeded weights and sees the same
    replicated activations)."""

    def kwargs(**kw):
        return {k: v for k, v in kw.items() if v is not None}

    if rule.style == "colwise":
        return ColwiseParallel(
            **kwargs(input_layouts=_one(rule.input_layouts), output_layouts=_one(rule.output_layouts))
        )
    if rule.style == "rowwise":
        return RowwiseParallel(
            **kwargs(input_layouts=_one(rule.input_layouts), output_layouts=_one(rule.output_layouts))
        )
    if rule.style == "sequence_parallel":
        return SequenceParallel()
    if rule.style == "prepare_input":
        return PrepareModuleInput(
            input_layouts=_many(rule.input_layouts),
            desired_input_layouts=_many(rule.desired_input_layouts),
            use_local_output=True,
        )
    if rule.style == "prepare_output":
        return PrepareModuleOutput(
            output_layouts=_many(rule.output_layouts),
            desired_output_layouts=_many(rule.desired_output_layouts),
            use_local_output=True,
        )
    return None


def resolve_tp_plan(module: nn.Module, rules: list[TPRule]) -> dict[str, object]:
    """Module name → style for the modules this chunk actually holds (rules in plan order; a pruned
    chunk simply has no match for the parts it lacks)."""
    resolved: dict[str, object] = {}
    for name, _ in module.named_modules():
        for rule in rules:
            if name and fnmatch.fnmatchcase(name, rule.pattern):
                style = tp_style(rule)
                if style is not None:
                    resolved[name] = style
    return resolved


def apply_tp(chunk: nn.Module, tp_mesh: DeviceMesh, rules: list[TPRule], *, tie_embeddings: bool = False) -> None:
    plan = resolve_tp_plan(chunk, rules)
    if plan:
        parallelize_module(chunk, tp_mesh, plan)
    apply_attention_tp(chunk, tp_mesh)
    if tie_embeddings and chunk.embed is not None and chunk.head is not None:
        chunk.head.weight = chunk.embed.tok.weight  # re-tie: both sides were distributed separately


def apply_attention_tp(chunk: nn.Module, tp_mesh: DeviceMesh) -> None:
    """The attention parts that follow the heads' split of the plan's colwise ``wq``/``wk`` rules (not plan rules:
    they are internal to ``SelfAttention`` and always split with its heads):

    - per-head QK-norm (``q_norm``/``k_norm`` on [B, T, heads, head_dim], Qwen3): ``SequenceParallel`` on the
      heads dim (torchtitan's Qwen3 plan): its input read as ``Shard(2)``, its weight a ``Replicate`` DTensor whose
      gradient — each rank's sum over its own heads, ``Partial`` — is summed over TP like sequence-parallel norms';
    - whole-projection QK-norm (OLMoE): each rank keeps its heads' slice of the weight (``Shard(0)``) and
      all-reduces the sum of squares (``ProjectionRMSNorm.tp_group``);
    - attention sinks (gpt-oss): one per query head, ``Shard(0)`` like the heads;
    - latent attention (DeepSeek-V3, ``runtime.models.mla``): the rotary key shared by every head gets its gradient
      summed over TP (``LatentAttention.tp_mesh``); its down projections and their norms stay replicated."""
    from torch.distributed.tensor import distribute_tensor

    from runtime.models.mla import LatentAttention
    from runtime.models.transformer import ProjectionRMSNorm, SelfAttention

    for attn in chunk.modules():
        if isinstance(attn, LatentAttention):
            attn.tp_mesh = tp_mesh
        if not isinstance(attn, SelfAttention):
            continue
        for norm in (attn.q_norm, attn.k_norm):
            if isinstance(norm, ProjectionRMSNorm):
                norm.weight = nn.Parameter(distribute_tensor(norm.weight.detach(), tp_mesh, [Shard(0)]))
                norm.tp_group = tp_mesh.get_group()
            elif norm is not None:
                parallelize_module(norm, tp_mesh, SequenceParallel(sequence_dim=2, use_local_output=True))
        if attn.sinks is not None:
            attn.sinks = nn.Parameter(distribute_tensor(attn.sinks.detach(), tp_mesh, [Shard(0)]))


def apply_recompute(chunk: nn.Module, mode: str) -> None:
    """``full``: recompute each block in backward; ``selective``: only the attention core. The
    composable ``checkpoint`` keeps module and parameter names unchanged (portable checkpoints)."""
    if mode == "none":
        return
    from torch.distributed._composable import checkpoint

    for block in chunk.layers.values():
        checkpoint(block if mode == "full" else block.attn.core)


def apply_compile(chunk: nn.Module) -> None:
    """``torch.compile`` each transformer block's ``forward`` (torchtitan's per-block compile: one graph per
    block, shared by the blocks of one shape). Applied after TP and recomputation and before data
    parallelism, so the DP and recomputation hooks stay outside the compiled code; compiling the bound
    ``forward`` (not wrapping the module) keeps module and parameter names, so plans, checkpoints and TP
    rules see the same model compiled or not."""
    for block in chunk.layers.values():
        block.forward = torch.compile(block.forward)  # type: ignore[method-assign]


def mixed_precision(precision: str, device_type: str):
    """bf16 compute with fp32 reductions on CUDA (FSDP2's policy); None (fp32) elsewhere."""
    if device_type != "cuda" or precision == "fp32":
        return None
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def apply_dp(
    chunk: nn.Module, dp_mesh: DeviceMesh, parallel: ParallelConfig, mp_policy=None, ignored: set | None = None
) -> str | None:
    """Data parallelism per ``zero_stage`` over the DP mesh, each block its own unit, then the chunk:
    3 → ``fully_shard`` (params, grads and optimizer state sharded; reshard after forward),
    1/2 → ``fully_shard(reshard_after_forward=False)`` (grads and optimizer state sharded),
    0 → ``replicate`` (FSDP2's replicated mode: gradients all-reduced).
    Never DDP: it is wrong with pipelining and fails on TP DTensors. Returns the wrapper used. ``ignored``:
    parameters left alone (expert weights that no other rank of their expert-data-parallel group holds;
    ``runtime.expert_parallel.apply_expert_dp`` wraps the others itself, before this)."""
    if dp_mesh.size() == 1 and mp_policy is None:
        return None
    kw: dict = {} if mp_policy is None else {"mp_policy": mp_policy}
    if ignored:
        kw["ignored_params"] = ignored
    if parallel.zero_stage == 0:
        from torch.distributed._composable.replicate_with_fsdp import replicate

        for block in chunk.layers.values():
            replicate(block, mesh=dp_mesh, **kw)
        replicate(chunk, mesh=dp_mesh, **kw)
        return "replicate"
    from torch.distributed.fsdp import fully_shard

    reshard = parallel.zero_stage == 3 and parallel.schedule not in ZERO_BUBBLE
    for block in chunk.layers.values():
        fully_shard(block, mesh=dp_mesh, reshard_after_forward=reshard, **kw)
    fully_shard(chunk, mesh=dp_mesh, reshard_after_forward=reshard, **kw)
    return "fully_shard" if reshard else "fully_shard(reshard_after_forward=False)"
