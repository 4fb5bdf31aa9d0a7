"""DeepSpeed config JSON, plus the ``PipelineModule`` partition the training script must use.

Checked against DeepSpeed 0.19.8 (sdist source): ``train_batch_size`` = ``train_micro_batch_size_per_gpu``
× ``gradient_accumulation_steps`` × data-parallel size (asserted by ``PipelineEngine``);
``zero_optimization.stage``; ``bf16``/``fp16`` blocks; ``activation_checkpointing``; the ``pipeline``
block's ``activation_checkpoint_interval``; ``tensor_parallel.autotp_size`` (AutoTP training,
DeepSpeed ≥ 0.16.4; with ZeRO-3 since 0.19.4: ``runtime/engine.py`` "AutoTP + ZeRO stage 3 is supported for both
inference and training"). ``PipelineEngine`` asserts "ZeRO-2 and ZeRO-3 are incompatible with pipeline
parallelism", so such a plan is refused. ``PipelineModule(partition_method=...)`` takes "uniform",
"parameters" or "type:<regex>" — no explicit boundaries — so the exact boundaries (``parts``) are
given for a ``_partition_layers`` override. DeepSpeed's pipeline runs one 1F1B-style schedule and
one contiguous stage per rank.

The companion data lives under the top-level key ``"meshplan"``, which DeepSpeed does not read.
"""

from __future__ import annotations

import json

from planner.specs import Plan
from planner.specs.errors import MeshplanError

from .base import Exporter, Notes, geometry, header_lines, plan_stack, rank_layer_counts, refuse_recompute_modules

DEEPSPEED_VERSION = "DeepSpeed 0.19.8 (runtime/pipe/engine.py, runtime/config.py)"


def pipeline_partition(plan: Plan, notes: Notes) -> dict:
    """Stage boundaries over the PipelineModule layer list [embedding, block 0..L-1, final norm + head]."""
    p = plan.parallel
    if p.virtual_stages > 1:
        notes.warn(
            f"DeepSpeed's pipeline has no interleaved or V-shaped schedule ({p.schedule}, {p.virtual_stages} chunks "
            f"per rank): exported as its 1F1B-style schedule over {p.pp} contiguous stages keeping each rank's "
            "layer count; the pipeline bubble is larger than planned, so the step-time estimate does not hold"
        )
    elif p.schedule == "gpipe" and p.pp > 1:
        notes.warn(
            "DeepSpeed's pipeline has no GPipe schedule: it runs its 1F1B-style TrainSchedule "
            "(same bubble, less activation memory than planned)"
        )
    per_rank = rank_layer_counts(plan)
    parts, pos = [0], 1  # index 0 is the embedding LayerSpec
    for r, n in enumerate(per_rank):
        pos += n
        parts.append(pos + 1 if r == len(per_rank) - 1 else pos)  # the head joins the last stage
    even = len(set(per_rank)) == 1
    if p.pp > 1 and not even:
        notes.warn(
            f"uneven pipeline split {per_rank}: PipelineModule's partition methods cannot express it; "
            "apply meshplan.pipeline_module.parts by overriding PipelineModule._partition_layers "
            "(set self.parts = parts)"
        )
    return {
        "num_stages": p.pp,
        "layers_per_stage": per_rank,
        "layer_list": "[embedding] + [transformer block] * num_layers + [final norm + LM head]",
        "parts": parts,
        "partition_method": "type:<your transformer block class>" if even else None,
    }


def deepspeed_config(plan: Plan, notes: Notes) -> dict:
    p, t = plan.parallel, plan.training
    if p.pp > 1 and p.zero_stage >= 2:
        raise MeshplanError(
            "plan.parallel.zero_stage",
            f"DeepSpeed cannot run pipeline parallelism (pp={p.pp}) with ZeRO-{p.zero_stage}: PipelineEngine asserts "
            "'ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism'",
            "re-plan with zero_stage pinned to 0 or 1 (or pp=1), or export to megatron or torchtitan",
        )
    refuse_recompute_modules(plan, "deepspeed", "DeepSpeed")
    if plan.model.moe is not None:
        raise MeshplanError(
            "plan.model.moe",
            f"{plan.model.name!r} is a mixture of experts (ep={p.ep}); this export does not express DeepSpeed-MoE "
            "(deepspeed.moe.layer.MoE is model code with its own capacity-based gating, not priced by meshplan)",
            "export to megatron or torchtitan, which run the plan's expert parallelism",
        )
    if p.cp > 1 and p.cp_comm != "a2a":
        raise MeshplanError(
            "plan.parallel.cp_comm",
            f"DeepSpeed runs context parallelism only as Ulysses all-to-all (sequence_parallel_size with "
            f"deepspeed.sequence.layer.DistributedAttention), not {p.cp_comm!r}",
            "re-plan with cp_comm 'a2a', or export to megatron (every exchange) or torchtitan (p2p, all_gather)",
        )
    cfg: dict = {
        "train_batch_size": t.global_batch_size,
        "train_micro_batch_size_per_gpu": p.micro_batch_size,
        "gradient_accumulation_steps": plan.estimate.num_microbatches,
        "zero_optimization": {"stage": p.zero_stage},
    }
    if plan.model.sliding_window is not None:  # the config has no attention settings: the model code decides
        notes.warn(
            f"the model's {plan.model.sliding_window}-token sliding window ({plan.model.window_layers()} of "
            f"{plan.model.num_layers} layers) is model code, not DeepSpeed configuration: the plan prices a banded "
            f"kernel (flash_attn window_size=({plan.model.sliding_window - 1}, 0)); a masked full attention "
            "(SDPA with a mask, eager) computes the whole square and runs slower than the plan"
        )
    if p.cp > 1:
        cfg["sequence_parallel_size"] = p.cp
        notes.note(
            f"context parallelism cp={p.cp} (a2a) is DeepSpeed-Ulysses: sequence_parallel_size={p.cp}; the model must "
            "wrap its attention in deepspeed.sequence.layer.DistributedAttention"
        )
    if p.tp_comm_overlap:
        raise MeshplanError(
            "plan.parallel.tp_comm_overlap",
            "DeepSpeed has no overlapped tensor parallelism (AutoTP issues its all-reduces blocking; no config key "
            "pipelines TP collectives with the GEMMs)",
            "re-plan with parallel.tp_comm_overlap false (training.stack: deepspeed leaves it off), or export to "
            "megatron (--tp-comm-overlap) or torchtitan (async TP)",
        )
    if t.precision == "fp8":
        raise MeshplanError(
            "training.precision",
            "DeepSpeed has no FP8 training recipe of its own (its config has bf16/fp16 only; FP8 linears come from "
            "Transformer Engine modules in the model code, which this export cannot add)",
            'export to megatron or torchtitan, or re-plan with training.precision "bf16"',
        )
    if t.precision == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif t.precision == "fp16":
        cfg["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}
    if p.tp > 1 and plan_stack(plan) == "deepspeed-2021":  # v0.5.0 has no tensor_parallel key (AutoTP: 0.16.4)
        notes.warn(
            f"tensor parallelism (tp={p.tp}) is model code under DeepSpeed v0.5.0 (the plan's deepspeed-2021 stack): "
            "Megatron-DeepSpeed splits its layers itself and passes its mpu to deepspeed.initialize"
        )
    elif p.tp > 1:
        cfg["tensor_parallel"] = {"autotp_size": p.tp}
        notes.warn(
            f"tensor parallelism (tp={p.tp}) has no DeepSpeed pipeline setting: tensor_parallel.autotp_size is "
            "DeepSpeed's AutoTP for Hugging Face models with ZeRO ≤ 2; with PipelineModule the model code must "
            "split its layers itself (Megatron-DeepSpeed style)"
            if p.pp > 1
            else f"tensor parallelism (tp={p.tp}) uses DeepSpeed AutoTP (tensor_parallel.autotp_size), which supports "
            "Hugging Face models (with any ZeRO stage: ZeRO-3 since DeepSpeed 0.19.4)"
        )
    if p.sequence_parallel:
        notes.warn(
            "Megatron-style sequence parallelism has no DeepSpeed config key (DeepSpeed's "
            "sequence_parallel_size is Ulysses context parallelism, a different scheme): not exported"
        )
    if p.recompute != "none":
        cfg["activation_checkpointing"] = {
            "partition_activations": False,
            "cpu_checkpointing": False,
            "contiguous_memory_optimization": False,
            "synchronize_checkpoint_boundary": False,
        }
        if p.pp > 1:
            cfg["pipeline"] = {"activation_checkpoint_interval": 1}
        if p.recompute == "selective":
            notes.warn(
                "selective recomputation (attention core only) has no DeepSpeed config key: the model must wrap "
                "its attention core in deepspeed.checkpointing.checkpoint itself"
                + ("; the exported activation_checkpoint_interval=1 recomputes whole layers (full)" if p.pp > 1 else "")
            )
    return cfg


class DeepSpeedExporter(Exporter):
    id = "deepspeed"
    target = "DeepSpeed config JSON (+ PipelineModule partition)"
    target_version = DEEPSPEED_VERSION
    media_type = "application/json"
    extension = "json"
    stack = "deepspeed"
    comment = None

    def render(self, plan: Plan, options, notes: Notes) -> str:
        geom = geometry(plan, options)
        cfg = deepspeed_config(plan, notes)
        companion = {
            "about": header_lines(plan, self),
            "launch": f"deepspeed --num_nodes {geom.nnodes} --num_gpus {geom.nproc_per_node} <train.py> "
            "--deepspeed_config " + self.filename(plan, options),
        }
        if plan.parallel.pp > 1:
            companion["pipeline_module"] = pipeline_partition(plan, notes)
        companion["warnings"] = list(notes.warnings)
        if notes.info:
            companion["notes"] = list(notes.info)
        cfg["meshplan"] = companion
        return json.dumps(cfg, indent=2) + "\n"
