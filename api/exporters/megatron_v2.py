"""Megatron-LM v2.0 training arguments (the ``megatron-2020`` stack), as a bash array for ``pretrain_gpt.py``.

Checked against NVIDIA/Megatron-LM tag v2.0 (be473a5bd2, 2021-01-12) ``megatron/arguments.py``: degrees
``--tensor-model-parallel-size`` and ``--pipeline-model-parallel-size`` (its rank order, TP innermost then DP then
PP, is meshplan's mesh); ``--micro-batch-size`` and ``--global-batch-size``; full recomputation as
``--checkpoint-activations --checkpoint-num-layers 1``; ``--fp16`` (dynamic loss scaling: no ``--loss-scale``);
``--DDP-impl local``; the GPT shape (``--num-layers``, ``--hidden-size``, ``--num-attention-heads``, ``--seq-length``,
``--max-position-embeddings``; the FFN is 4h). What v2.0 cannot run is refused, naming the field: ZeRO 1–3 (no
distributed optimizer), sequence parallelism, selective recompute, interleaved or other schedules, uneven stages, bf16
or FP8 precision (``--bf16`` arrived after v2.0), models it does not build (``planner.specs.stack_eras``).
"""

from __future__ import annotations

from planner.specs import Plan
from planner.specs.errors import MeshplanError
from planner.specs.stack_rules import unbuilt_parts
from planner.specs.stacks import STACKS

from .base import Exporter, Notes, comment_block, header_lines
from .megatron import render_array

MEGATRON_V2_VERSION = "Megatron-LM v2.0 (be473a5bd2, 2021-01-12)"
_FIX = "re-plan for the megatron-2020 stack (training.stack: megatron-2020), or export to megatron (Megatron-core)"


def _refuse(field: str, what: str, fix: str = _FIX) -> MeshplanError:
    return MeshplanError(f"plan.{field}", f"Megatron-LM v2.0 {what}", fix)


def megatron_v2_args(plan: Plan) -> list[str]:
    p, t, m = plan.parallel, plan.training, plan.model
    if p.zero_stage != 0:
        raise _refuse("parallel.zero_stage", f"has no optimizer sharding (ZeRO-{p.zero_stage}): it runs ZeRO-0 only")
    if p.sequence_parallel:
        raise _refuse("parallel.sequence_parallel", "has no sequence parallelism")
    if p.recompute == "selective":
        raise _refuse("parallel.recompute", "recomputes whole layers only (--checkpoint-activations), not 'selective'")
    if p.pp > 1 and (p.schedule != "1f1b" or p.virtual_stages > 1):
        raise _refuse("parallel.schedule", f"runs 1F1B only, not {p.schedule} with {p.virtual_stages} virtual stages")
    if len(set(p.stage_layers)) > 1:
        raise _refuse("parallel.stage_layers", f"splits the layers evenly over the stages only, not {p.stage_layers}")
    if t.precision not in ("fp16", "fp32"):
        raise _refuse(
            "training.precision",
            f"trains in fp16 (--fp16) or fp32, not {t.precision} (--bf16 arrived after v2.0)",
            "re-plan with training.precision fp16 (training.stack: megatron-2020)",
        )
    for part in unbuilt_parts(STACKS["megatron-2020"], m):
        raise _refuse(f"model.{part.partition('=')[0]}", f"does not build model.{part} ({m.name!r}): GPT only")
    if m.num_kv_heads != m.num_attention_heads:  # v2.0's ParallelSelfAttention: one K/V head per query head
        raise _refuse("model.num_kv_heads", f"has no grouped-query attention ({m.num_kv_heads} K/V heads)")
    if m.ffn_hidden_size != 4 * m.hidden_size:
        raise _refuse("model.ffn_hidden_size", f"fixes the FFN at 4h = {4 * m.hidden_size}, not {m.ffn_hidden_size}")
    args = ["--tensor-model-parallel-size", str(p.tp), "--pipeline-model-parallel-size", str(p.pp)]
    args += ["--micro-batch-size", str(p.micro_batch_size), "--global-batch-size", str(t.global_batch_size)]
    if p.recompute == "full":
        args += ["--checkpoint-activations", "--checkpoint-num-layers", "1"]
    if t.precision == "fp16":
        args.append("--fp16")
    args += ["--DDP-impl", "local"]
    args += ["--num-layers", str(m.num_layers), "--hidden-size", str(m.hidden_size)]
    args += ["--num-attention-heads", str(m.num_attention_heads), "--seq-length", str(t.seq_len)]
    return args + ["--max-position-embeddings", str(m.max_seq_len)]


class MegatronV2Exporter(Exporter):
    id = "megatron-2020"
    target = "Megatron-LM v2.0 (pretrain_gpt.py arguments)"
    target_version = MEGATRON_V2_VERSION
    media_type = "text/x-shellscript"
    extension = "sh"
    stack = "megatron-2020"

    def render(self, plan: Plan, options, notes: Notes) -> str:
        args = megatron_v2_args(plan)
        usage = [
            "Usage: source this file, then add data/tokenizer/optimizer arguments, e.g.",
            '  python -m torch.distributed.launch <launcher flags> pretrain_gpt.py "${MESHPLAN_MEGATRON_ARGS[@]}" '
            "--data-path ... --vocab-file ... --merge-file ...",
        ]
        head = comment_block("#", header_lines(plan, self) + usage, notes.warnings, notes.info)
        return "#!/usr/bin/env bash\n" + head + render_array("MESHPLAN_MEGATRON_ARGS", args)
