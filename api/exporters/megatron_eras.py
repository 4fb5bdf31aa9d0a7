"""Megatron-LM training arguments of older releases, as a bash array for ``pretrain_gpt.py``: one target per era
preset of ``planner.specs.stack_eras`` (``megatron-2020`` = v2.0, ``megatron-2021`` = v2.5, ``megatron-2022`` =
52e636888c). What a release runs is its preset's capabilities (``Stack.zero_stages``, ``sequence_parallel``,
``recompute``, ``schedules``, ``interleaved_min_pp``, ``even_stages``, ``precisions``, ``unbuilt``), so a plan is refused
here, naming the field, exactly where the preset would not have returned it; the few rules that are the exporter's own
(interleaving's micro-batches divisible by pp, the FFN fixed at 4h before ``--ffn-hidden-size``) are ``Era`` fields.

Checked against NVIDIA/Megatron-LM ``megatron/arguments.py`` at each release: degrees ``--tensor-model-parallel-size``
and ``--pipeline-model-parallel-size`` (rank order TP innermost, then DP, then PP: meshplan's mesh);
``--micro-batch-size`` and ``--global-batch-size``; the interleaved schedule (v2.5 on) as
``--num-layers-per-virtual-pipeline-stage`` = num_layers / (pp · v) (asserts pp > 2 and the micro-batches divisible by
pp: ``megatron/schedules.py``); ``--sequence-parallel`` (2022; off at tp = 1); full recomputation as
``--checkpoint-activations --checkpoint-num-layers 1`` (v2.0, v2.5) or ``--recompute-granularity full
--recompute-method uniform --recompute-num-layers 1`` (2022), selective as ``--recompute-granularity selective``;
``--use-distributed-optimizer`` for ZeRO-1 (2022); ``--fp16`` (dynamic loss scaling) or ``--bf16`` (v2.5 on, which then
accumulates and reduces the gradients in fp32 itself); ``--DDP-impl local`` (required with pp > 1); the scatter-gather
pipeline sends are v2.5's and 2022's default (no flag); the GPT shape (``--ffn-hidden-size`` and ``--kv-channels`` from
2022 when they differ from 4h and h / heads).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.specs import Plan
from planner.specs.errors import MeshplanError
from planner.specs.stack_rules import unbuilt_parts
from planner.specs.stacks import STACKS

from .base import Exporter, Notes, comment_block, header_lines
from .megatron import render_array

_SCHEDULE_NAMES = {"1f1b": "1F1B", "interleaved-1f1b": "interleaved 1F1B"}
_USAGE = [
    "Usage: source this file, then add data/tokenizer/optimizer arguments, e.g.",
    '  python -m torch.distributed.launch <launcher flags> pretrain_gpt.py "${MESHPLAN_MEGATRON_ARGS[@]}" '
    "--data-path ... --vocab-file ... --merge-file ...",
]


@dataclass(frozen=True)
class Era:
    """One release's target: its preset (``stack``), the name its refusals use, and what its arguments spell."""

    stack: str
    name: str  # e.g. "Megatron-LM v2.5", the subject of every refusal
    version: str  # Exporter.target_version
    fixed_ffn: bool  # v2.0, v2.5: the FFN is 4h and heads split h (no --ffn-hidden-size / --kv-channels)
    precision_note: str = ""  # appended to the precision refusal
    env: str = ""  # lines before the argument array

    def refuse(self, field: str, what: str, fix: str | None = None) -> MeshplanError:
        default = (
            f"re-plan for the {self.stack} stack (training.stack: {self.stack}), or export to megatron (Megatron-core)"
        )
        return MeshplanError(f"plan.{field}", f"{self.name} {what}", fix or default)


def check(plan: Plan, era: Era) -> None:
    """Refuse, naming the field, what the release does not run (its preset's capabilities, in this order)."""
    st, p, t, m = STACKS[era.stack], plan.parallel, plan.training, plan.model
    if p.zero_stage not in st.zero_stages:
        if st.zero_stages == (0,):
            raise era.refuse(
                "parallel.zero_stage", f"has no optimizer sharding (ZeRO-{p.zero_stage}): it runs ZeRO-0 only"
            )
        raise era.refuse(
            "parallel.zero_stage",
            f"shards optimizer states only (--use-distributed-optimizer, ZeRO-1), not ZeRO-{p.zero_stage}",
        )
    if p.sequence_parallel and not st.sequence_parallel:
        raise era.refuse("parallel.sequence_parallel", "has no sequence parallelism")
    if p.recompute not in st.recompute:
        runs = (
            "whole layers only (--checkpoint-activations)"
            if st.recompute == ("none", "full")
            else "by --recompute-granularity only (no --recompute-modules: Megatron-core 3b141a24, 2025-04-05)"
        )
        raise era.refuse("parallel.recompute", f"recomputes {runs}, not {p.recompute!r}")
    if p.pp > 1 and p.schedule not in st.schedules:
        names = " and ".join(_SCHEDULE_NAMES[s] for s in st.schedules)
        raise era.refuse("parallel.schedule", f"runs {names} only, not {p.schedule}")
    if p.pp > 1 and p.virtual_stages > 1 and p.pp < st.interleaved_min_pp:
        raise era.refuse(
            "parallel.pp",
            f"interleaves pipelines of more than {st.interleaved_min_pp - 1} stages only "
            f"(pp > {st.interleaved_min_pp - 1}), not pp={p.pp}",
        )
    micro = t.global_batch_size // (p.dp * p.micro_batch_size)
    if p.virtual_stages > 1 and micro % p.pp:  # megatron/schedules.py get_forward_backward_func
        raise era.refuse(
            "parallel.micro_batch_size", f"interleaves {micro} micro-batches only if pp={p.pp} divides them"
        )
    if st.even_stages and len(set(p.stage_layers)) > 1:
        raise era.refuse(
            "parallel.stage_layers", f"splits the layers evenly over the stages only, not {p.stage_layers}"
        )
    if t.precision not in st.precisions:
        raise era.refuse(
            "training.precision",
            f"trains in {' or '.join(st.precisions)}, not {t.precision}{era.precision_note}",
            f"re-plan with training.precision {' or '.join(x for x in st.precisions if x != 'fp32')} "
            f"(training.stack: {era.stack})",
        )
    for part in unbuilt_parts(st, m):
        raise era.refuse(f"model.{part.partition('=')[0]}", f"does not build model.{part} ({m.name!r}): GPT only")
    if m.num_kv_heads != m.num_attention_heads:  # ParallelAttention: one K/V head per query head
        raise era.refuse("model.num_kv_heads", f"has no grouped-query attention ({m.num_kv_heads} K/V heads)")
    if era.fixed_ffn and m.ffn_hidden_size != 4 * m.hidden_size:
        raise era.refuse("model.ffn_hidden_size", f"fixes the FFN at 4h = {4 * m.hidden_size}, not {m.ffn_hidden_size}")


def era_args(plan: Plan, era: Era) -> list[str]:
    """The release's ``pretrain_gpt.py`` arguments for ``plan`` (refused first by ``check``)."""
    check(plan, era)
    st, p, t, m = STACKS[era.stack], plan.parallel, plan.training, plan.model
    args = ["--tensor-model-parallel-size", str(p.tp), "--pipeline-model-parallel-size", str(p.pp)]
    if p.pp > 1 and p.virtual_stages > 1:
        args += ["--num-layers-per-virtual-pipeline-stage", str(m.num_layers // (p.pp * p.virtual_stages))]
    if p.sequence_parallel and p.tp > 1:  # arguments.py turns it off at tp = 1
        args.append("--sequence-parallel")
    args += ["--micro-batch-size", str(p.micro_batch_size), "--global-batch-size", str(t.global_batch_size)]
    if p.recompute == "selective":
        args += ["--recompute-granularity", "selective"]
    elif p.recompute == "full" and "selective" in st.recompute:  # 2022: --checkpoint-activations became a granularity
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    elif p.recompute == "full":
        args += ["--checkpoint-activations", "--checkpoint-num-layers", "1"]
    if p.zero_stage == 1:
        args.append("--use-distributed-optimizer")
    if t.precision in ("fp16", "bf16"):
        args.append(f"--{t.precision}")
    args += ["--DDP-impl", "local"]
    args += ["--num-layers", str(m.num_layers), "--hidden-size", str(m.hidden_size)]
    if not era.fixed_ffn and m.ffn_hidden_size != 4 * m.hidden_size:
        args += ["--ffn-hidden-size", str(m.ffn_hidden_size)]
    args += ["--num-attention-heads", str(m.num_attention_heads)]
    if not era.fixed_ffn and m.head_dim * m.num_attention_heads != m.hidden_size:
        args += ["--kv-channels", str(m.head_dim)]
    args += ["--seq-length", str(t.seq_len)]
    return args + ["--max-position-embeddings", str(m.max_seq_len)]


class MegatronEraExporter(Exporter):
    """``pretrain_gpt.py`` arguments of one Megatron-LM release (``era``)."""

    era: Era
    media_type = "text/x-shellscript"
    extension = "sh"

    def render(self, plan: Plan, options, notes: Notes) -> str:
        args = era_args(plan, self.era)
        head = comment_block("#", header_lines(plan, self) + _USAGE, notes.warnings, notes.info)
        return "#!/usr/bin/env bash\n" + head + self.era.env + render_array("MESHPLAN_MEGATRON_ARGS", args)


class MegatronV2Exporter(MegatronEraExporter):
    id = stack = "megatron-2020"
    target = "Megatron-LM v2.0 (pretrain_gpt.py arguments)"
    era = Era(
        stack="megatron-2020",
        name="Megatron-LM v2.0",
        version="Megatron-LM v2.0 (be473a5bd2, 2021-01-12)",
        fixed_ffn=True,
        precision_note=" (--bf16 arrived after v2.0)",
    )
    target_version = era.version


class MegatronV25Exporter(MegatronEraExporter):
    id = stack = "megatron-2021"
    target = "Megatron-LM v2.5 (pretrain_gpt.py arguments)"
    era = Era(
        stack="megatron-2021",
        name="Megatron-LM v2.5",
        version="Megatron-LM v2.5 (e269e20064, 2021-08-10)",
        fixed_ffn=True,
    )
    target_version = era.version


class Megatron2022Exporter(MegatronEraExporter):
    id = stack = "megatron-2022"
    target = "Megatron-LM 2022 (pretrain_gpt.py arguments)"
    era = Era(
        stack="megatron-2022",
        name="Megatron-LM 52e636888c (2022)",
        version="Megatron-LM main 52e636888c (2022-11-29)",
        fixed_ffn=False,
        # megatron/arguments.py raises without it (--sequence-parallel, or the asynchronous TP all-reduce, on by default)
        env="# megatron/arguments.py raises without it (--sequence-parallel, or the asynchronous TP all-reduce, on by "
        "default).\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n\n",
    )
    target_version = era.version
