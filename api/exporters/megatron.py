"""Megatron-LM training arguments, as a bash array to splice into ``pretrain_gpt.py``'s command line.

Checked against NVIDIA/Megatron-LM ``megatron/training/arguments.py`` (main@000c4ac2, 2026; layout code as in megatron-core 0.16.1) and
``megatron/core/transformer/pipeline_parallel_layer_layout.py``:

- degrees ``--tensor-model-parallel-size``, ``--pipeline-model-parallel-size``; Megatron's default rank
  order tp-cp-ep-dp-pp is meshplan's mesh (TP innermost, PP outermost), so ranks line up;
- virtual stages: ``--num-virtual-stages-per-pipeline-rank`` (the current form of the older
  ``--num-layers-per-virtual-pipeline-stage``; at most one of these and the layout may be set);
- uneven splits: ``--decoder-first-pipeline-num-layers``/``--decoder-last-pipeline-num-layers`` when only
  the first/last stage differ (no virtual stages), otherwise ``--pipeline-model-parallel-layout``
  (chunks in ``vpp_rank × pp + pp_rank`` order, exactly meshplan's chunk order for looped schedules;
  upstream marks it experimental);
- recompute: ``--recompute-granularity selective`` (core attention, Megatron's default recompute
  module; no ``--recompute-method`` allowed) or ``full`` with ``--recompute-method uniform
  --recompute-num-layers 1`` (every layer);
- ZeRO: ``--use-distributed-optimizer`` (optimizer states sharded, gradients reduce-scattered) for
  stages 1–2; stage 3 is Megatron FSDP: ``--use-megatron-fsdp --data-parallel-sharding-strategy
  optim_grads_params --ckpt-format fsdp_dtensor``.

Megatron-LM has no GPipe or zero-bubble schedules: those plans are exported with the closest
schedule Megatron runs and a warning.
"""

from __future__ import annotations

import shlex

from planner.compose.recompute_modules import MEGATRON_MODULES, MODULES
from planner.specs import Plan
from planner.specs.errors import MeshplanError
from planner.specs.fp8 import recipe_of
from planner.specs.layout import cp_a2a_size
from planner.specs.stacks import resolve as resolve_stack

from .base import Exporter, Notes, comment_block, header_lines, rank_layer_counts

MEGATRON_VERSION = "Megatron-LM main@000c4ac2 (arguments.py), megatron-core 0.16.1"


def layout_string(stage_layers: list[int]) -> str:
    """``--pipeline-model-parallel-layout``: E = embedding, t = decoder layer, L = loss/head, '|'
    between chunks (in chunk order = vpp_rank × pp + pp_rank)."""
    chunks = []
    last = len(stage_layers) - 1
    for c, n in enumerate(stage_layers):
        s = ("E" if c == 0 else "") + (f"t*{n}" if n > 1 else "t" * n) + ("L" if c == last else "")
        chunks.append(s)
    return "|".join(chunks)


def pipeline_args(plan: Plan, notes: Notes) -> list[str]:
    p = plan.parallel
    split = list(p.stage_layers)
    v = p.virtual_stages
    if p.schedule == "zbv-zero-bubble":
        # V-shaped chunk placement cannot be written for Megatron: keep each rank's layers, 1F1B.
        split, v = rank_layer_counts(plan), 1
        notes.warn(
            "Megatron-LM has no zero-bubble V (ZBV) schedule and cannot place chunks in a V: exported as "
            f"1F1B over {p.pp} contiguous stages with each rank's layer count kept ({split}); the pipeline "
            "bubble is larger than planned, so the plan's step-time estimate does not hold"
        )
    elif p.schedule == "interleaved-zero-bubble":
        notes.warn(
            "Megatron-LM has no interleaved zero-bubble schedule: exported as interleaved 1F1B with the same "
            "chunks; the bubble is larger than planned, so the plan's step-time estimate does not hold"
        )
    elif p.schedule == "gpipe" and p.pp > 1:
        notes.warn(
            "Megatron-LM has no GPipe schedule: exported as 1F1B (same layer split and bubble, "
            "less activation memory than planned)"
        )
    args: list[str] = []
    if p.pp == 1:
        return args
    even = len(set(split)) == 1
    if v > 1:
        args += microbatch_group_args(plan, notes)
    if v > 1 and even:
        args += ["--num-virtual-stages-per-pipeline-rank", str(v)]
    elif v > 1 or not even:
        middle = split[1:-1]
        # Megatron requires the first/last counts to be > 0 and the middle stages even.
        if v == 1 and min(split[0], split[-1]) > 0 and (not middle or len(set(middle)) == 1):
            if split[0] != (middle[0] if middle else None):
                args += ["--decoder-first-pipeline-num-layers", str(split[0])]
            if split[-1] != (middle[0] if middle else None):
                args += ["--decoder-last-pipeline-num-layers", str(split[-1])]
        else:
            args += ["--pipeline-model-parallel-layout", layout_string(split)]
    return args


def microbatch_group_args(plan: Plan, notes: Notes) -> list[str]:
    """Megatron's interleaved schedule runs micro-batches in groups of N per virtual stage (default
    N = pp) and raises unless pp ≤ N ≤ M and M mod N is 0 or ≥ pp (schedules.py)."""
    pp, m = plan.parallel.pp, plan.estimate.num_microbatches
    if m < pp:
        raise MeshplanError(
            "plan.estimate.num_microbatches",
            f"Megatron's interleaved schedule needs at least pp={pp} micro-batches per step, the plan has {m}",
            "re-plan with a larger global batch or a smaller micro_batch_size",
        )
    if m % pp == 0:
        return []
    group = next(n for n in range(pp, m + 1) if m % n == 0 or m % n >= pp)
    notes.warn(
        f"{m} micro-batches is not a multiple of pp={pp}, which Megatron's interleaved schedule refuses with its "
        f"default grouping: exported --microbatch-group-size-per-virtual-pipeline-stage {group}, a different "
        "micro-batch order than planned"
    )
    return ["--microbatch-group-size-per-virtual-pipeline-stage", str(group)]


def model_args(plan: Plan) -> list[str]:
    m = plan.model
    args = [
        "--num-layers",
        str(m.num_layers),
        "--hidden-size",
        str(m.hidden_size),
        "--ffn-hidden-size",
        str(m.ffn_hidden_size),
        "--num-attention-heads",
        str(m.num_attention_heads),
    ]
    if m.num_kv_heads != m.num_attention_heads:
        args += ["--group-query-attention", "--num-query-groups", str(m.num_kv_heads)]
    args += ["--seq-length", str(plan.training.seq_len), "--max-position-embeddings", str(m.max_seq_len)]
    if m.family == "llama":
        args += ["--position-embedding-type", "rope", "--normalization", "RMSNorm", "--swiglu"]
        if not (m.attention_out_bias or (m.moe is not None and m.moe.expert_bias)):  # gpt-oss: biases on every linear
            args.append("--disable-bias-linear")
    else:
        args += ["--position-embedding-type", "learned_absolute", "--normalization", "LayerNorm"]
    if m.qkv_bias:  # Qwen2/2.5: biases on Q, K and V only (the other linears stay bias-free)
        args.append("--add-qkv-bias")
    if not m.tie_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    return args


def megatron_args(plan: Plan, notes: Notes) -> list[str]:
    p, t = plan.parallel, plan.training
    args = [
        "--tensor-model-parallel-size",
        str(p.tp),
        "--pipeline-model-parallel-size",
        str(p.pp),
    ]
    args += pipeline_args(plan, notes)
    args += context_parallel_args(plan, notes)
    args += expert_parallel_args(plan, notes)
    if p.sequence_parallel:
        args.append("--sequence-parallel")
    if p.tp_comm_overlap:  # Transformer Engine userbuffers; arguments.py asserts --sequence-parallel with it
        args.append("--tp-comm-overlap")
        notes.note(
            "--tp-comm-overlap: Transformer Engine's userbuffers pipeline the SP all-gathers and reduce-scatters with "
            "the block's GEMMs (default methods of transformer_engine.pytorch.module.base.initialize_ub; "
            "--tp-comm-overlap-cfg for a tuned YAML); needs Transformer Engine built with userbuffers and "
            "CUDA_DEVICE_MAX_CONNECTIONS=1"
        )
    args += ["--micro-batch-size", str(p.micro_batch_size), "--global-batch-size", str(t.global_batch_size)]
    if p.recompute == "selective":
        args += ["--recompute-granularity", "selective"]
    elif p.recompute == "full":
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    elif p.recompute == MODULES:
        args += recompute_modules_args(plan)
    if p.zero_stage in (1, 2):
        args.append("--use-distributed-optimizer")
        if p.zero_stage == 2:
            notes.warn(
                "ZeRO-2 maps to Megatron's distributed optimizer, which shards optimizer states and "
                "reduce-scatters gradients but keeps a full gradient buffer: gradient memory is higher than planned"
            )
    elif p.zero_stage == 3:
        args += [
            "--use-megatron-fsdp",
            "--data-parallel-sharding-strategy",
            "optim_grads_params",
            "--ckpt-format",
            "fsdp_dtensor",
        ]
    if t.precision == "bf16":
        args.append("--bf16")
    elif t.precision == "fp16":
        args.append("--fp16")
    elif t.precision == "fp8":
        args += ["--bf16", *fp8_args(plan, notes)]
    if t.optimizer == "sgd":
        args += ["--optimizer", "sgd"]
    return args + model_args(plan) + attention_args(plan, notes)


#: The plan's FP8 recipes as Megatron-LM's ``--fp8-recipe`` names them (megatron/training/arguments.py: choices
#: tensorwise, delayed, mxfp8, blockwise; its ``tensorwise`` is Transformer Engine's Float8CurrentScaling, the
#: same per-tensor current scaling as torchao's tensorwise). ``--fp8-format hybrid``: E4M3 forward, E5M2
#: gradients; MXFP8 is E4M3 throughout (TE ``MXFP8BlockScaling``).
MEGATRON_FP8 = {"delayed": "delayed", "current": "tensorwise", "tensorwise": "tensorwise", "mxfp8": "mxfp8"}


def recompute_modules_args(plan: Plan) -> list[str]:
    """``--recompute-granularity selective --recompute-modules layernorm moe_act`` (Megatron-LM core_v0.16.1
    megatron/training/arguments.py; ``planner.compose.recompute_modules``). Megatron-core refuses both modules under
    delayed FP8 scaling (transformer_config.py:1241-1247, "Delayed scaling does not support moe_act and layernorm
    recompute for fp8"): refused here the same way."""
    if plan.training.precision == "fp8" and recipe_of(plan.training, resolve_stack(plan.training.stack)) == "delayed":
        raise MeshplanError(
            "plan.parallel.recompute",
            f"Megatron-core refuses --recompute-modules {' '.join(MEGATRON_MODULES)} with delayed FP8 scaling "
            "(transformer_config.py: 'Delayed scaling does not support moe_act and layernorm recompute for fp8')",
            "re-plan with training.fp8_recipe current or mxfp8, or another parallel.recompute",
        )
    return ["--recompute-granularity", "selective", "--recompute-modules", *MEGATRON_MODULES]


def fp8_args(plan: Plan, notes: Notes) -> list[str]:
    """``--fp8-format`` and ``--fp8-recipe`` of an FP8 plan; a recipe Megatron does not run is refused."""
    recipe = recipe_of(plan.training, resolve_stack(plan.training.stack))
    if recipe not in MEGATRON_FP8:
        raise MeshplanError(
            "training.fp8_recipe",
            f"Megatron-LM has no FP8 recipe {recipe!r} (--fp8-recipe: delayed, tensorwise (current scaling), mxfp8, "
            "blockwise)",
            "re-plan with training.fp8_recipe delayed, current or mxfp8 (training.stack: megatron)",
        )
    if recipe == "tensorwise":
        notes.note("torchao's tensorwise recipe exported as Megatron's --fp8-recipe tensorwise (TE current scaling)")
    return ["--fp8-format", "e4m3" if recipe == "mxfp8" else "hybrid", "--fp8-recipe", MEGATRON_FP8[recipe]]


def context_parallel_args(plan: Plan, notes: Notes) -> list[str]:
    """``--context-parallel-size`` and ``--cp-comm-type`` (the plan's names are Megatron's). ``a2a+p2p`` needs
    ``--hierarchical-context-parallel-sizes A P``: all-to-all over the cp ranks inside a node (the mesh puts cp
    just outside tp: a node of g GPUs holds g / tp consecutive cp ranks), ring across nodes."""
    p = plan.parallel
    if p.cp == 1:
        return []
    args = ["--context-parallel-size", str(p.cp), "--cp-comm-type", p.cp_comm]
    if p.cp_comm == "a2a+p2p":
        a2a = cp_a2a_size(p, plan.cluster.gpus_per_node)
        args += ["--hierarchical-context-parallel-sizes", str(a2a), str(p.cp // a2a)]
        notes.note(
            f"a2a+p2p: all-to-all over the {a2a} cp ranks inside a node, ring over {p.cp // a2a} "
            "(--hierarchical-context-parallel-sizes)"
        )
    return args


def expert_parallel_args(plan: Plan, notes: Notes) -> list[str]:
    """A mixture of experts (megatron/core/transformer/moe/README.md; flags of Megatron-LM ``arguments.py``
    ``_add_moe_args`` at main@000c4ac2): its experts, top-k, expert and shared widths, which layers are MoE, the
    router's score function and group-limited routing, a capacity factor; EP and ETP folded out of DP (the plan's
    layout is Megatron-core's tp-cp-ep-dp-pp order), grouped GEMM and the all-to-all token dispatcher the plan was
    priced with (dropless unless the model has a capacity factor, Megatron-core's default). With a capacity factor the
    plan priced Megatron-core's drop as the bundled runtime runs it (core_v0.16.1 ``apply_router_token_dropping``):
    the assignments over an expert's capacity dropped by the model's ``drop_policy`` (``--moe-token-drop-policy``,
    written out even at its default ``probs``) and the expert GEMMs and all-to-all sized at the kept tokens; with the
    model's ``pad_to_capacity``, ``--moe-pad-expert-input-to-capacity``, which sizes both at the capacity (padded),
    as the plan priced them."""
    moe = plan.model.moe
    if moe is None:
        return []
    p = plan.parallel
    args = [
        "--num-experts",
        str(moe.num_experts),
        "--moe-router-topk",
        str(moe.top_k),
        "--moe-ffn-hidden-size",
        str(moe.expert_ffn_hidden_size),
        "--expert-model-parallel-size",
        str(p.ep),
        "--expert-tensor-parallel-size",
        str(p.etp),
        "--moe-grouped-gemm",
        "--moe-token-dispatcher-type",
        "alltoall",
    ]
    if moe.shared_experts:  # --moe-shared-expert-intermediate-size: all shared experts' width together
        args += ["--moe-shared-expert-intermediate-size", str(moe.shared_experts * moe.shared_ffn)]
    if moe.first_dense_layers or moe.moe_layer_freq != 1:
        # Megatron's integer N makes layers 0, N, 2N, … MoE; the model's pattern is written out instead
        args += ["--moe-layer-freq", moe_layer_pattern(plan)]
    if moe.router == "sigmoid":
        args += ["--moe-router-score-function", "sigmoid"]
    if moe.router_groups is not None and moe.router_topk_groups is not None:
        args += [
            "--moe-router-num-groups",
            str(moe.router_groups),
            "--moe-router-group-topk",
            str(moe.router_topk_groups),
        ]
    if moe.capacity_factor is not None:  # the drop the plan priced: the model's policy, padded or not
        args += ["--moe-expert-capacity-factor", f"{moe.capacity_factor:g}", "--moe-token-drop-policy", moe.drop_policy]
        if moe.pad_to_capacity:
            args.append("--moe-pad-expert-input-to-capacity")
    if moe.router_bias:
        notes.warn(
            "the model's router has a bias (gpt-oss); Megatron-LM's TopKRouter has none: the export cannot express it "
            "(a few parameters per layer, priced by meshplan)"
        )
    if moe.swiglu_limit is not None:
        notes.warn(
            f"the experts run gpt-oss's clamped SwiGLU (moe.swiglu_limit {moe.swiglu_limit:g}: (up + 1)·gate·"
            "σ(1.702·gate), both clamped); the export sets no activation flags for it, so Megatron-LM would train "
            "plain SwiGLU experts: add its gpt-oss activation flags by hand"
        )
    return args


def moe_layer_pattern(plan: Plan) -> str:
    """``--moe-layer-freq`` as Megatron's pattern string (1 = MoE layer, 0 = dense; only ``[]()+*,`` and digits are
    allowed), run-length encoded: e.g. DeepSeek-V3 ``([0]*3+[1]*58)``, alternating layers ``([0]*1+[1]*1+…)``
    written as a repeated pair ``([0,1]*24)``."""
    m = plan.model
    kinds = [1 if m.is_moe_layer(i) else 0 for i in range(m.num_layers)]
    assert m.moe is not None
    lead, freq = m.moe.first_dense_layers, m.moe.moe_layer_freq
    body = kinds[lead:]
    period = [0] * (freq - 1) + [1]
    parts = [f"[0]*{lead}"] if lead else []
    reps, rest = divmod(len(body), freq)
    if freq > 1 and reps and body == period * reps + [0] * rest:
        parts.append(f"[{','.join(map(str, period))}]*{reps}")
        if rest:
            parts.append(f"[0]*{rest}")
    else:  # runs of equal kinds
        i = 0
        while i < len(body):
            j = i
            while j < len(body) and body[j] == body[i]:
                j += 1
            parts.append(f"[{body[i]}]*{j - i}")
            i = j
    return "(" + "+".join(parts) + ")"


def attention_args(plan: Plan, notes: Notes) -> list[str]:
    """Attention shapes beyond heads × head width = hidden (arguments.py at main@000c4ac2): ``--kv-channels`` (a
    head's width when the query width is not the hidden size: Qwen3, gpt-oss), ``--qk-layernorm`` (RMSNorm on each
    query and key head: Qwen3), multi-latent attention (DeepSeek-V3: ``--multi-latent-attention`` and its low-rank
    dims, megatron-core's ``MLATransformerConfig``), learned attention sinks (gpt-oss: ``--softmax-type
    learnable``), sliding windows (``window_args``)."""
    m = plan.model
    args: list[str] = []
    if m.mla is not None:
        mla = m.mla
        args.append("--multi-latent-attention")
        if mla.q_lora_rank is not None:
            args += ["--q-lora-rank", str(mla.q_lora_rank)]
        args += [
            "--kv-lora-rank",
            str(mla.kv_lora_rank),
            "--qk-head-dim",
            str(mla.qk_nope_head_dim),
            "--qk-pos-emb-head-dim",
            str(mla.qk_rope_head_dim),
            "--v-head-dim",
            str(mla.v_head_dim),
        ]
    elif m.attention_head_dim is not None and m.attention_head_dim * m.num_attention_heads != m.hidden_size:
        args += ["--kv-channels", str(m.attention_head_dim)]
    if m.qk_norm == "head":
        args.append("--qk-layernorm")
    elif m.qk_norm == "projection":
        args.append("--qk-layernorm")
        notes.warn(
            "the model normalises queries and keys over the whole projection (OLMoE); Megatron's --qk-layernorm "
            "normalises each head: the same parameters' worth of RMSNorm, not the same function"
        )
    if m.attention_sinks:
        args += ["--softmax-type", "learnable"]
    if m.rope_attention_factor != 1.0 and m.mla is None:
        notes.warn(
            f"the model's RoPE is YaRN-scaled (attention factor {m.rope_attention_factor:.4f}, gpt-oss); Megatron-LM's "
            "--position-embedding-type offers learned_absolute, rope, mrope, relative and none, with no YaRN for "
            "standard attention, so this job runs plain fused RoPE: a different function, and a little faster than "
            "the plan priced (Megatron-core's unfused YaRN path, planner/workload/rope.py). Megatron-Bridge's gpt-oss "
            "recipe builds YaRN"
        )
    return args + window_args(plan)


def window_args(plan: Plan) -> list[str]:
    """A sliding window (``model.sliding_window``: Hugging Face's w keys, query i sees i − w < j ≤ i) as Megatron's
    ``--window-size`` (arguments.py: a "left,right" tuple passed to Transformer Engine / FlashAttention's
    ``window_size``, under which query i sees keys i − left … i + right: left = w − 1, right 0) and, unless every layer
    has it, ``--window-attn-skip-freq`` (an integer N: N − 1 windowed layers then a full one — gpt-oss's 2 —, or a
    pattern whose 1s are the windowed layers)."""
    m = plan.model
    if m.sliding_window is None:
        return []
    args = ["--window-size", f"{m.sliding_window - 1},0"]
    bits = [1 if m.is_window_layer(i) else 0 for i in range(m.num_layers)]
    if all(bits):
        return args
    n = m.window_layer_freq
    if m.window_first_layer == 0 and n == 2 and m.num_layers % 2 == 0:  # windowed, full, windowed, …: N = 2
        return args + ["--window-attn-skip-freq", "2"]
    runs, i = [], 0
    while i < len(bits):
        j = i
        while j < len(bits) and bits[j] == bits[i]:
            j += 1
        runs.append(f"[{bits[i]}]*{j - i}")
        i = j
    return args + ["--window-attn-skip-freq", "(" + "+".join(runs) + ")"]


def render_array(name: str, args: list[str]) -> str:
    lines, i = [], 0
    while i < len(args):
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            lines.append(f"  {shlex.quote(args[i])} {shlex.quote(args[i + 1])}")
            i += 2
        else:
            lines.append(f"  {shlex.quote(args[i])}")
            i += 1
    return f"{name}=(\n" + "\n".join(lines) + "\n)\n"


class MegatronExporter(Exporter):
    id = "megatron"
    target = "Megatron-LM (pretrain_gpt.py arguments)"
    target_version = MEGATRON_VERSION
    media_type = "text/x-shellscript"
    extension = "sh"
    stack = "megatron"

    def render(self, plan: Plan, options, notes: Notes) -> str:
        args = megatron_args(plan, notes)
        env = ""
        if plan.parallel.tp > 1 and plan.parallel.zero_stage != 3:
            env = "# Megatron asserts this with tensor parallelism on GPUs before Blackwell.\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n\n"
        usage = [
            "Usage: source this file, then add data/tokenizer/optimizer arguments, e.g.",
            '  torchrun <launcher flags> pretrain_gpt.py "${MESHPLAN_MEGATRON_ARGS[@]}" --data-path ... --tokenizer-type ...',
        ]
        head = comment_block("#", header_lines(plan, self) + usage, notes.warnings, notes.info)
        return "#!/usr/bin/env bash\n" + head + env + render_array("MESHPLAN_MEGATRON_ARGS", args)
