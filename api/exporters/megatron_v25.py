"""Megatron-LM v2.5 training arguments (the ``megatron-2021`` stack), as a bash array for ``pretrain_gpt.py``.

Checked against NVIDIA/Megatron-LM tag v2.5 (e269e20064, 2021-08-10) ``megatron/arguments.py``: degrees
``--tensor-model-parallel-size`` and ``--pipeline-model-parallel-size`` (rank order TP innermost, then DP, then PP:
meshplan's mesh); ``--micro-batch-size`` and ``--global-batch-size``; the interleaved schedule as
``--num-layers-per-virtual-pipeline-stage`` = num_layers / (pp · v) (v2.5 derives v = num_layers / pp / that; it
asserts pp > 2 and the micro-batches divisible by pp: ``megatron/schedules.py``); full recomputation as
``--checkpoint-activations --checkpoint-num-layers 1``; ``--fp16`` (dynamic loss scaling) or ``--bf16`` (v2.5 then
accumulates and all-reduces the gradients in fp32 itself); ``--DDP-impl local`` (required with pp > 1); the
scatter-gather pipeline sends are v2.5's default (no flag); the GPT shape. What v2.5 cannot run is refused, naming
the field: ZeRO 1–3 (no distributed optimizer), sequence parallelism, selective recompute, schedules other than 1F1B
and interleaved 1F1B, interleaving on 2 stages, uneven stages, FP8, models it does not build
(``planner.specs.stack_eras``).
"""

from __future__ import annotations

from planner.specs import Plan
from planner.specs.errors import MeshplanError
from planner.specs.stack_rules import unbuilt_parts
from planner.specs.stacks import STACKS

from .base import Exporter, Notes, comment_block, header_lines
from .megatron import render_array

MEGATRON_V25_VERSION = "Megatron-LM v2.5 (e269e20064, 2021-08-10)"
_FIX = "re-plan for the megatron-2021 stack (training.stack: megatron-2021), or export to megatron (Megatron-core)"


def _refuse(field: str, what: str, fix: str = _FIX) -> MeshplanError:
    return MeshplanError(f"plan.{field}", f"Megatron-LM v2.5 {what}", fix)


def _check(plan: Plan) -> None:
    p, t, m = plan.parallel, plan.training, plan.model
    if p.zero_stage != 0:
        raise _refuse("parallel.zero_stage", f"has no optimizer sharding (ZeRO-{p.zero_stage}): it runs ZeRO-0 only")
    if p.sequence_parallel:
        raise _refuse("parallel.sequence_parallel", "has no sequence parallelism")
    if p.recompute == "selective":
        raise _refuse("parallel.recompute", "recomputes whole layers only (--checkpoint-activations), not 'selective'")
    if p.pp > 1 and p.schedule not in ("1f1b", "interleaved-1f1b"):
        raise _refuse("parallel.schedule", f"runs 1F1B and interleaved 1F1B only, not {p.schedule}")
    if p.pp > 1 and p.virtual_stages > 1 and p.pp <= 2:
        raise _refuse("parallel.pp", f"interleaves pipelines of more than 2 stages only (pp > 2), not pp={p.pp}")
    micro = t.global_batch_size // (p.dp * p.micro_batch_size)
    if p.virtual_stages > 1 and micro % p.pp:
        raise _refuse("parallel.micro_batch_size", f"interleaves {micro} micro-batches only if pp={p.pp} divides them")
    if len(set(p.stage_layers)) > 1:
        raise _refuse("parallel.stage_layers", f"splits the layers evenly over the stages only, not {p.stage_layers}")
    if t.precision not in ("fp16", "bf16", "fp32"):
        raise _refuse(
            "training.precision",
            f"trains in fp16, bf16 or fp32, not {t.precision}",
            "re-plan with training.precision fp16 or bf16 (training.stack: megatron-2021)",
        )
    for part in unbuilt_parts(STACKS["megatron-2021"], m):
        raise _refuse(f"model.{part.partition('=')[0]}", f"does not build model.{part} ({m.name!r}): GPT only")
    if m.num_kv_heads != m.num_attention_heads:  # ParallelAttention: one K/V head per query head
        raise _refuse("model.num_kv_heads", f"has no grouped-query attention ({m.num_kv_heads} K/V heads)")
    if m.ffn_hidden_size != 4 * m.hidden_size:
        raise _refuse("model.ffn_hidden_size", f"fixes the FFN at 4h = {4 * m.hidden_size}, not {m.ffn_hidden_size}")


def megatron_v25_args(plan: Plan) -> list[str]:
    _check(plan)
    p, t, m = plan.parallel, plan.training, plan.model
    args = ["--tensor-model-parallel-size", str(p.tp), "--pipeline-model-parallel-size", str(p.pp)]
    if p.pp > 1 and p.virtual_stages > 1:
        args += ["--num-layers-per-virtual-pipeline-stage", str(m.num_layers // (p.pp * p.virtual_stages))]
    args += ["--micro-batch-size", str(p.micro_batch_size), "--global-batch-size", str(t.global_batch_size)]
    if p.recompute == "full":
        args += ["--checkpoint-activations", "--checkpoint-num-layers", "1"]
    if t.precision in ("fp16", "bf16"):
        args.append(f"--{t.precision}")
    args += ["--DDP-impl", "local"]
    args += ["--num-layers", str(m.num_layers), "--hidden-size", str(m.hidden_size)]
    args += ["--num-attention-heads", str(m.num_attention_heads), "--seq-length", str(t.seq_len)]
    return args + ["--max-position-embeddings", str(m.max_seq_len)]


class MegatronV25Exporter(Exporter):
    id = "megatron-2021"
    target = "Megatron-LM v2.5 (pretrain_gpt.py arguments)"
    target_version = MEGATRON_V25_VERSION
    media_type = "text/x-shellscript"
    extension = "sh"
    stack = "megatron-2021"

    def render(self, plan: Plan, options, notes: Notes) -> str:
        args = megatron_v25_args(plan)
        usage = [
            "Usage: source this file, then add data/tokenizer/optimizer arguments, e.g.",
            '  python -m torch.distributed.launch <launcher flags> pretrain_gpt.py "${MESHPLAN_MEGATRON_ARGS[@]}" '
            "--data-path ... --vocab-file ... --merge-file ...",
        ]
        head = comment_block("#", header_lines(plan, self) + usage, notes.warnings, notes.info)
        return "#!/usr/bin/env bash\n" + head + render_array("MESHPLAN_MEGATRON_ARGS", args)
