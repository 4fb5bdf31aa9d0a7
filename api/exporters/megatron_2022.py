"""Megatron-LM of late 2022 (the ``megatron-2022`` stack), as a bash array for ``pretrain_gpt.py``.

Checked against NVIDIA/Megatron-LM 52e636888c (2022-11-29, the last main commit before FlashAttention)
``megatron/arguments.py``: degrees ``--tensor-model-parallel-size`` and ``--pipeline-model-parallel-size`` (rank order
TP innermost, then DP, then PP: meshplan's mesh); the interleaved schedule as ``--num-layers-per-virtual-pipeline-stage``
= num_layers / (pp · v) (it derives v = num_layers / pp / that, asserts pp > 2 and, in ``megatron/schedules.py``, the
micro-batches divisible by pp); ``--sequence-parallel``; ``--micro-batch-size`` and ``--global-batch-size``;
recomputation as ``--recompute-granularity selective`` (the attention core) or ``--recompute-granularity full
--recompute-method uniform --recompute-num-layers 1`` (each layer: what ``--checkpoint-activations``, deprecated, maps
to); ZeRO-1 as ``--use-distributed-optimizer``; ``--fp16`` (dynamic loss scaling) or ``--bf16`` (fp32 gradient
accumulation and reduction forced); ``--DDP-impl local``; the GPT shape (``--ffn-hidden-size`` and ``--kv-channels``
when not 4h and h/a). ``CUDA_DEVICE_MAX_CONNECTIONS=1`` is exported: ``arguments.py`` raises without it under
``--sequence-parallel`` or the asynchronous TP all-reduce, on by default (``--no-async-tensor-model-parallel-allreduce``
turns it off). Scatter-gather pipeline sends are its default (no flag; without SP only). What it cannot run is refused,
naming the field: ZeRO 2–3, schedules other than 1F1B and interleaved 1F1B, interleaving on 2 stages, uneven stages,
FP8, models it does not build (``planner.specs.stack_eras``).
"""

from __future__ import annotations

from planner.specs import Plan
from planner.specs.errors import MeshplanError
from planner.specs.stack_rules import unbuilt_parts
from planner.specs.stacks import STACKS

from .base import Exporter, Notes, comment_block, header_lines
from .megatron import render_array

MEGATRON_2022_VERSION = "Megatron-LM main 52e636888c (2022-11-29)"
_NAME = "Megatron-LM 52e636888c (2022)"
_FIX = "re-plan for the megatron-2022 stack (training.stack: megatron-2022), or export to megatron (Megatron-core)"


def _refuse(field: str, what: str, fix: str = _FIX) -> MeshplanError:
    return MeshplanError(f"plan.{field}", f"{_NAME} {what}", fix)


def _check(plan: Plan) -> None:
    p, t, m = plan.parallel, plan.training, plan.model
    if p.zero_stage not in (0, 1):
        raise _refuse(
            "parallel.zero_stage",
            f"shards optimizer states only (--use-distributed-optimizer, ZeRO-1), not ZeRO-{p.zero_stage}",
        )
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
            "re-plan with training.precision fp16 or bf16 (training.stack: megatron-2022)",
        )
    for part in unbuilt_parts(STACKS["megatron-2022"], m):
        raise _refuse(f"model.{part.partition('=')[0]}", f"does not build model.{part} ({m.name!r}): GPT only")
    if m.num_kv_heads != m.num_attention_heads:  # ParallelAttention: one K/V head per query head
        raise _refuse("model.num_kv_heads", f"has no grouped-query attention ({m.num_kv_heads} K/V heads)")


def megatron_2022_args(plan: Plan) -> list[str]:
    _check(plan)
    p, t, m = plan.parallel, plan.training, plan.model
    args = ["--tensor-model-parallel-size", str(p.tp), "--pipeline-model-parallel-size", str(p.pp)]
    if p.pp > 1 and p.virtual_stages > 1:
        args += ["--num-layers-per-virtual-pipeline-stage", str(m.num_layers // (p.pp * p.virtual_stages))]
    if p.sequence_parallel and p.tp > 1:  # arguments.py turns it off at tp = 1
        args.append("--sequence-parallel")
    args += ["--micro-batch-size", str(p.micro_batch_size), "--global-batch-size", str(t.global_batch_size)]
    if p.recompute == "selective":
        args += ["--recompute-granularity", "selective"]
    elif p.recompute == "full":
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    if p.zero_stage == 1:
        args.append("--use-distributed-optimizer")
    if t.precision in ("fp16", "bf16"):
        args.append(f"--{t.precision}")
    args += ["--DDP-impl", "local"]
    args += ["--num-layers", str(m.num_layers), "--hidden-size", str(m.hidden_size)]
    if m.ffn_hidden_size != 4 * m.hidden_size:
        args += ["--ffn-hidden-size", str(m.ffn_hidden_size)]
    args += ["--num-attention-heads", str(m.num_attention_heads)]
    if m.head_dim * m.num_attention_heads != m.hidden_size:
        args += ["--kv-channels", str(m.head_dim)]
    args += ["--seq-length", str(t.seq_len)]
    return args + ["--max-position-embeddings", str(m.max_seq_len)]


class Megatron2022Exporter(Exporter):
    id = "megatron-2022"
    target = "Megatron-LM 2022 (pretrain_gpt.py arguments)"
    target_version = MEGATRON_2022_VERSION
    media_type = "text/x-shellscript"
    extension = "sh"
    stack = "megatron-2022"

    def render(self, plan: Plan, options, notes: Notes) -> str:
        args = megatron_2022_args(plan)
        env = (
            "# megatron/arguments.py raises without it (--sequence-parallel, or the asynchronous TP all-reduce, on by "
            "default).\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n\n"
        )
        usage = [
            "Usage: source this file, then add data/tokenizer/optimizer arguments, e.g.",
            '  python -m torch.distributed.launch <launcher flags> pretrain_gpt.py "${MESHPLAN_MEGATRON_ARGS[@]}" '
            "--data-path ... --vocab-file ... --merge-file ...",
        ]
        head = comment_block("#", header_lines(plan, self) + usage, notes.warnings, notes.info)
        return "#!/usr/bin/env bash\n" + head + env + render_array("MESHPLAN_MEGATRON_ARGS", args)
