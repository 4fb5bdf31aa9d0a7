"""torchtitan job configuration, in the two forms torchtitan releases have used.

- ``torchtitan`` — torchtitan 0.3.0 (the current release, 2026): TOML job files are gone; a run is a
  Python function returning ``Trainer.Config`` chosen with ``--module``/``--config``. We write a
  recipe module that starts from the model's shipped config (e.g.
  ``torchtitan.models.llama3.config_registry.llama3_70b``) and sets ``parallelism.*``
  (``tensor_parallel_degree``, ``enable_sequence_parallel``, ``pipeline_parallel_degree``,
  ``pipeline_parallel_schedule``, ``module_fqns_per_model_part``, ``pipeline_parallel_microbatch_size``,
  ``data_parallel_replicate_degree``/``data_parallel_shard_degree``, ``fsdp_reshard_after_forward``),
  ``training.*`` (``local_batch_size``, ``global_batch_size``, ``seq_len``,
  ``mixed_precision_param``; with a pipeline also ``disable_cuda_graphs = True``: 0.3.0's config check
  refuses pipeline parallelism while CUDA graphs are on, its default) and ``activation_checkpoint``
  (``SelectiveAC.Config()``, ``FullAC.Config()`` or ``None``). 0.3.0 renamed the head module ``output`` → ``lm_head``.
- ``torchtitan-toml`` — torchtitan 0.2.2, the last release that reads a TOML job file
  (``--job.config_file``): ``[model] name/flavor``, ``[parallelism]`` (same degree/schedule keys, always
  sequence parallel with TP, DDP only without other parallelism), ``[training]`` ``local_batch_size``,
  ``global_batch_size``, ``seq_len``, ``[activation_checkpoint] mode`` (``selective_ac_option = "op"``).

Both checked against the released wheels' source (``torchtitan/config/configs.py`` 0.3.0,
``torchtitan/config/job_config.py`` 0.2.2). torchtitan main (after 0.3.0) renamed more fields
(``training.num_tokens_per_microbatch_per_dp_rank``, ``parallelism.num_pp_microbatches``,
``parallelism.pipeline_parallel_module_fqns_per_model_part``); they are not written here.

Schedules map to ``torch.distributed.pipelining`` names: GPipe, 1F1B, Interleaved1F1B,
InterleavedZeroBubble, ZBVZeroBubble (torchtitan places ZBV chunks in a V itself). The layer split
is written exactly as module FQNs per model chunk, in meshplan's chunk (pipeline) order.
"""

from __future__ import annotations

import tomli_w

from planner.specs import Plan
from planner.specs.errors import MeshplanError
from planner.specs.fp8 import recipe_of
from planner.specs.stacks import resolve as resolve_stack

from .base import (
    Exporter,
    Notes,
    chunk_layer_ranges,
    comment_block,
    geometry,
    header_lines,
    refuse_recompute_modules,
    safe_identifier,
)
from .torchrun import rdzv_endpoint

TT_SCHEDULES = {
    "gpipe": "GPipe",
    "1f1b": "1F1B",
    "interleaved-1f1b": "Interleaved1F1B",
    "interleaved-zero-bubble": "InterleavedZeroBubble",
    "zbv-zero-bubble": "ZBVZeroBubble",
}
#: meshplan catalog model → (torchtitan model module, 0.3.0 config function in ``<module>.config_registry`` or None,
#: 0.2.2 flavor of ``[model] name = <module>`` or None), as each wheel ships them (0.3.0 has no Llama 4 and no
#: Qwen3-235B recipe; neither release has Mixtral or OLMoE).
TT_MODELS: dict[str, tuple[str, str | None, str | None]] = {
    "llama3-8b": ("llama3", "llama3_8b", "8B"),
    "llama3-70b": ("llama3", "llama3_70b", "70B"),
    "llama3-405b": ("llama3", "llama3_405b", "405B"),
    "qwen3-30b-a3b": ("qwen3", "qwen3_30b_a3b", "30B-A3B"),
    "qwen3-235b-a22b": ("qwen3", None, "235B-A22B"),
    "deepseek-v3": ("deepseek_v3", "deepseek_v3_671b", "671B"),
    "gpt-oss-20b": ("gpt_oss", "gpt_oss_20b", "20b"),
    "gpt-oss-120b": ("gpt_oss", "gpt_oss_120b", "120b"),
    "llama4-scout": ("llama4", None, "17bx16e"),
    "llama4-maverick": ("llama4", None, "17bx128e"),
}
#: the placeholder of a model torchtitan has no configuration for: a dense or a mixture-of-experts debug model
TT_PLACEHOLDERS = {
    False: ("llama3", "llama3_debugmodel", "debugmodel"),
    True: ("qwen3", "qwen3_moe_debug", "debugmodel_moe"),
}


def catalog_id(plan: Plan) -> str | None:
    """The catalog model the plan's model is (by name, or by shape: a Hugging Face config.json of it)."""
    from planner.specs.catalog import MODELS

    if plan.model.name in MODELS:
        return plan.model.name
    shape = plan.model.model_dump(mode="json", exclude={"name", "max_seq_len"})
    return next(
        (k for k, m in MODELS.items() if m.model_dump(mode="json", exclude={"name", "max_seq_len"}) == shape), None
    )


def model_parts(plan: Plan, head: str) -> list[list[str]]:
    """Module FQNs of each model chunk (pipeline order); embedding on the first, norm + head on the last."""
    ranges = chunk_layer_ranges(plan.parallel.stage_layers)
    parts = [[f"layers.{i}" for i in r] for r in ranges]
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", head]
    return parts


def model_ids(plan: Plan, notes: Notes, release: str) -> tuple[str, str]:
    """(module, 0.3.0 config function or 0.2.2 flavor) of the plan's model in ``release``, or a placeholder."""
    known = TT_MODELS.get(catalog_id(plan) or "")
    pick = 1 if release == "0.3.0" else 2
    if known is not None and known[pick] is not None:
        return known[0], known[pick]  # type: ignore[return-value]
    moe = plan.model.moe is not None
    module, fn, flavor = TT_PLACEHOLDERS[moe]
    if plan.model.sliding_window is not None:  # the window is model code (torchtitan's gpt_oss: a FlexAttention mask)
        notes.warn(
            f"the model's {plan.model.sliding_window}-token sliding window ({plan.model.window_layers()} of "
            f"{plan.model.num_layers} layers) is not in torchtitan's job configuration: the placeholder attends "
            "fully; your model module must apply the window (as torchtitan's gpt_oss does with a sliding-window "
            "FlexAttention mask), or the run costs more than the plan"
        )
    notes.warn(
        f"torchtitan {release} ships no configuration for model {plan.model.name!r}: the export names "
        f"{module}/{fn if release == '0.3.0' else flavor} as a placeholder; replace it with your model's module and "
        "flavor (layer names must match layers.<i>"
        + (", a mixture-of-experts model for its expert parallelism)" if moe else ")")
    )
    return module, fn if release == "0.3.0" else flavor  # type: ignore[return-value]


#: The plan's cp_comm → torchtitan's ``context_parallel_rotate_method`` (torch's names: "alltoall" rotates K/V
#: around the ring, "allgather" all-gathers them).
TT_CP_ROTATE = {"p2p": "alltoall", "all_gather": "allgather"}


def context_parallel(plan: Plan) -> dict:
    """``context_parallel_degree`` (FSDP then shards over dp_shard × cp) and the rotate method; torchtitan
    has no Ulysses (a2a) exchange: a clear refusal rather than another exchange."""
    p = plan.parallel
    if p.cp == 1:
        return {}
    if p.cp_comm not in TT_CP_ROTATE:
        raise MeshplanError(
            "plan.parallel.cp_comm",
            f"torchtitan runs context parallelism with K/V rotation ('p2p') or all-gather ('all_gather'), not "
            f"{p.cp_comm!r}",
            "re-plan with cp_comm 'p2p' or 'all_gather', or export to megatron (a2a, a2a+p2p) or deepspeed (a2a)",
        )
    return {"context_parallel_degree": p.cp, "context_parallel_rotate_method": TT_CP_ROTATE[p.cp_comm]}


def expert_parallel(plan: Plan, notes: Notes, release: str, par: dict) -> dict:
    """``expert_parallel_degree`` (both releases) and 0.2.2's ``expert_tensor_parallel_degree`` (1 or tp). torchtitan
    carves EP out of the FSDP and TP ranks (0.3.0 ``ParallelDims``: efsdp = dp_shard · cp · tp / ep; 0.2.2: / (etp ·
    ep)), not out of replicated ones: plain data parallelism (ZeRO-0) with EP is exported sharded. 0.3.0 removed
    expert tensor parallelism (its experts are whole on a rank: etp 1), so an etp = tp > 1 plan is refused there."""
    p = plan.parallel
    out: dict = {"expert_parallel_degree": p.ep}
    moe = plan.model.moe
    if moe is not None and moe.capacity_factor is not None:
        notes.warn(
            f"torchtitan's MoE routes dropless (MoEArgs has no capacity factor: 0.2.2 torchtitan/models/moe/moe.py, "
            f"and main as of 2026-08); the model's capacity_factor {moe.capacity_factor:g} is not exported, so the "
            "run keeps every token and its busiest experts take more rows than the plan priced"
            + (" (and pads none to capacity: model.moe.pad_to_capacity)" if moe.pad_to_capacity else "")
        )
    if release == "0.3.0" and p.etp > 1:
        raise MeshplanError(
            "plan.parallel.etp",
            f"torchtitan 0.3.0 removed expert tensor parallelism (experts are whole on a rank); the plan splits "
            f"them over etp={p.etp}",
            "re-plan with etp 1 (--etp 1), or export torchtitan-toml (0.2.2 runs etp = tp)",
        )
    if release == "0.2.2":
        out["expert_tensor_parallel_degree"] = p.etp
    if p.ep > 1 and par.get("data_parallel_shard_degree", 1) * p.cp * p.tp % (p.ep * p.etp):
        notes.warn(
            f"torchtitan takes its {p.ep} expert-parallel ranks from the FSDP (dp_shard) and TP ranks, not from "
            "replicated data parallelism (ZeRO-0): exported as FSDP over the dp ranks (ZeRO-3-like), so memory and "
            "communication differ from the plan"
        )
        out |= {"data_parallel_replicate_degree": 1, "data_parallel_shard_degree": p.dp}
    return out


def common_settings(plan: Plan, notes: Notes, release: str) -> tuple[dict, dict, str]:
    """(parallelism, training, activation-checkpoint mode) for either release."""
    p, t = plan.parallel, plan.training
    refuse_recompute_modules(plan, "torchtitan", f"torchtitan {release}")
    par: dict = {"tensor_parallel_degree": p.tp}
    if release == "0.3.0" and p.tp > 1:
        par["enable_sequence_parallel"] = p.sequence_parallel
    elif p.tp > 1 and not p.sequence_parallel:
        notes.warn(
            "torchtitan 0.2.2 always uses sequence parallelism with tensor parallelism; the plan has it off "
            "(activation memory will be lower and TP communication the same volume)"
        )
    # Data parallelism: ZeRO stage → replicate / shard degrees.
    if p.zero_stage == 0:
        if release == "0.2.2" and (p.tp > 1 or p.pp > 1) and p.dp > 1:
            notes.warn(
                "torchtitan 0.2.2 runs DDP only without other parallelism ('DDP has not supported > 1D "
                "parallelism'): plain data parallelism (ZeRO-0) is exported as FSDP (ZeRO-3-like) instead; "
                "memory and communication differ from the plan"
            )
            par |= {"data_parallel_replicate_degree": 1, "data_parallel_shard_degree": p.dp}
        else:
            par |= {"data_parallel_replicate_degree": p.dp, "data_parallel_shard_degree": 1}
    else:
        par |= {"data_parallel_replicate_degree": 1, "data_parallel_shard_degree": p.dp}
        if p.zero_stage in (1, 2):
            par["fsdp_reshard_after_forward"] = "never"
            if p.zero_stage == 1:
                notes.warn(
                    "torchtitan has no optimizer-state-only sharding (ZeRO-1): exported as FSDP without "
                    "resharding after forward (ZeRO-2-like), which also shards gradients"
                )
        else:
            # ZeRO-3 reshards every module after forward: torchtitan 0.3.0's "default" does not with a pipeline
            # ("not pp_enabled") and never does for the embedding, final norm and output (distributed/fsdp.py)
            par["fsdp_reshard_after_forward"] = "always"
    par |= context_parallel(plan)
    if plan.model.moe is not None:
        par |= expert_parallel(plan, notes, release, par)
    par["pipeline_parallel_degree"] = p.pp
    if p.pp > 1:
        par["pipeline_parallel_schedule"] = TT_SCHEDULES[p.schedule]
        par["pipeline_parallel_microbatch_size"] = p.micro_batch_size
        # With PP, one step's micro-batches are the local batch; without PP, torchtitan accumulates
        # gradients over global / (local × dp) steps.
        local = p.micro_batch_size * plan.estimate.num_microbatches
    else:
        local = p.micro_batch_size
    train = {"local_batch_size": local, "global_batch_size": t.global_batch_size, "seq_len": t.seq_len}
    if t.precision == "fp16":
        notes.warn("torchtitan has no fp16 mixed precision: exported as bf16 (mixed_precision_param = bfloat16)")
        train["mixed_precision_param"] = "bfloat16"
    else:
        train["mixed_precision_param"] = "float32" if t.precision == "fp32" else "bfloat16"  # fp8: bf16 + FP8 linears
    if p.recompute == "selective":
        notes.note(
            "torchtitan's selective recomputation is per-op (saves matmul/attention outputs by policy), "
            "not Megatron's attention-core recomputation: activation memory may differ somewhat from the plan"
        )
    return par, train, p.recompute


def fp8_settings(plan: Plan, notes: Notes) -> tuple[list[str], dict]:
    """(``[model] converters``, the ``[quantize.linear.<converter>]`` table) of an FP8 plan: torchao's float8
    converter with ``recipe_name`` tensorwise / rowwise, FP8 FSDP all-gathers with tensorwise and ZeRO-3 /
    ZeRO-2 (``enable_fsdp_float8_all_gather``, with the amax all-reduce once per step:
    ``precompute_float8_dynamic_scale_for_fsdp``), the output layer left in BF16 (``filter_fqns``); MXFP8: the
    ``mx`` converter (torchtitan docs/float8.md, docs/mxfp8.md). A recipe torchtitan does not run is refused."""
    t = plan.training
    if t.precision != "fp8":
        return [], {}
    recipe = recipe_of(t, resolve_stack(t.stack))
    if recipe == "mxfp8":
        return ["mx"], {"mx": {"recipe_name": "mxfp8", "filter_fqns": ["output"]}}
    if recipe not in ("tensorwise", "rowwise"):
        raise MeshplanError(
            "training.fp8_recipe",
            f"torchtitan (torchao float8) has no FP8 recipe {recipe!r}: it runs tensorwise, rowwise (and mxfp8 via the "
            "mx converter)",
            "re-plan with training.fp8_recipe tensorwise or rowwise (training.stack: torchtitan)",
        )
    table: dict = {"recipe_name": recipe, "filter_fqns": ["output"]}
    if recipe == "tensorwise" and plan.parallel.dp > 1 and plan.parallel.zero_stage >= 2:
        table |= {"enable_fsdp_float8_all_gather": True, "precompute_float8_dynamic_scale_for_fsdp": True}
    notes.note(
        f"FP8 ({recipe}): torchao float8 linears in the transformer blocks, the output layer in BF16; torch.compile "
        "on (torchtitan: 'required for competitive performance', it fuses the casts the plan prices)"
    )
    return ["float8"], {"float8": table}


def async_tp(plan: Plan, notes: Notes) -> bool:
    """Whether the plan overlaps TP (``parallel.tp_comm_overlap``): torchtitan's async TP, which compiles the
    blocks (torch.compile; Inductor's micro-pipeline TP pass needs it) and uses symmetric memory on the TP group."""
    if not plan.parallel.tp_comm_overlap:
        return False
    notes.note(
        "async TP: torch.compile on, Inductor's micro-pipeline TP pass fuses the SP all-gather → matmul and matmul → "
        "reduce-scatter of each block (torchtitan distributed/compile.py _maybe_enable_async_tp); the plan priced the "
        "stack's eager kernels, compiled ones are faster"
    )
    return True


def launch_line(plan: Plan, options, extra: str) -> str:
    geom = geometry(plan, options)
    if geom.multi_node:
        ep = rdzv_endpoint(options, "$MASTER_ADDR")
        flags = (
            f"--nnodes {geom.nnodes} --nproc-per-node {geom.nproc_per_node} --rdzv-backend c10d "
            f"--rdzv-endpoint {ep} --rdzv-id {options.job_name}"
        )
    else:
        flags = f"--standalone --nnodes 1 --nproc-per-node {geom.nproc_per_node}"
    return f"torchrun {flags} -m torchtitan.train {extra}"


class TorchtitanRecipeExporter(Exporter):
    id = "torchtitan"
    target = "torchtitan Python config recipe (Trainer.Config)"
    target_version = "torchtitan 0.3.0"
    media_type = "text/x-python"
    extension = "py"
    stack = "torchtitan"

    def module_name(self, options) -> str:
        return "meshplan_" + safe_identifier(options.job_name)

    def filename(self, plan: Plan, options) -> str:
        return self.module_name(options) + ".py"

    def render(self, plan: Plan, options, notes: Notes) -> str:
        module, base = model_ids(plan, notes, "0.3.0")
        par, train, ac = common_settings(plan, notes, "0.3.0")
        fn = safe_identifier(f"meshplan_{plan.model.name}")
        lines = [f"    config = {base}()", "    p = config.parallelism"]
        lines += [f"    p.{k} = {v!r}" for k, v in par.items()]
        if plan.parallel.pp > 1:
            lines.append("    p.module_fqns_per_model_part = [")
            lines += [f"        {part!r}," for part in model_parts(plan, "lm_head")]
            lines.append("    ]")
        if plan.parallel.pp > 1:
            # Trainer.Config refuses a pipeline while CUDA graphs are on (their default): "CUDA graphs do
            # not support pipeline parallelism yet. Set --training.disable_cuda_graphs."
            train = {"disable_cuda_graphs": True} | train
            notes.note(
                "torchtitan 0.3.0 cannot capture CUDA graphs with pipeline parallelism: the recipe sets "
                "training.disable_cuda_graphs = True, as its config check asks"
            )
        elif plan.model.moe is not None and plan.parallel.ep > 1:
            # ... nor with the all-to-all token dispatcher, which syncs the splits to the host: "CUDA graphs support
            # only expert parallel token dispatcher configurations without CPU synchronization ... or set
            # --training.disable_cuda_graphs" (the plan prices that dispatcher)
            train = {"disable_cuda_graphs": True} | train
            notes.note(
                "torchtitan 0.3.0 cannot capture CUDA graphs with the all-to-all token dispatcher (its expert "
                "parallelism syncs the token splits to the host): the recipe sets training.disable_cuda_graphs = True, "
                "as its config check asks"
            )
        lines += [f"    config.training.{k} = {v!r}" for k, v in train.items()]
        converters, quantize = fp8_settings(plan, notes)
        if converters:
            lines.append(f"    config.model.converters = {converters!r}")
            for conv, table in quantize.items():
                lines += [f"    config.quantize.linear.{conv}.{k} = {v!r}" for k, v in table.items()]
        if converters or plan.parallel.tp_comm_overlap:
            lines.append("    config.compile.enable = True")
        if async_tp(plan, notes):  # 0.3.0: CompileConfig.enable_async_tensor_parallel (needs compile of the model)
            lines.append("    config.compile.enable_async_tensor_parallel = True")
        ac_expr = {"selective": "SelectiveAC.Config()", "full": "FullAC.Config()", "none": "None"}[ac]
        lines += [f"    config.activation_checkpoint = {ac_expr}", "    return config"]
        imports = [
            f"from torchtitan.models.{module}.config_registry import {base}",
            "from torchtitan.trainer import Trainer",
        ]
        if ac != "none":
            imports.insert(
                0,
                f"from torchtitan.distributed.activation_checkpoint import {'SelectiveAC' if ac == 'selective' else 'FullAC'}",
            )
        launch = launch_line(plan, options, f"--module {self.module_name(options)} --config {fn}")
        head = comment_block(
            "#",
            header_lines(plan, self)
            + [
                f"Save as {self.filename(plan, options)} on PYTHONPATH, then on every node:",
                "  " + launch,
            ],
            notes.warnings,
            notes.info,
        )
        return (
            head
            + "\n"
            + "\n".join(imports)
            + "\n\n\n"
            + f"def {fn}() -> Trainer.Config:\n"
            + f'    """{plan.model.name}: meshplan plan rank {plan.rank} ({plan.parallel.schedule})."""\n'
            + "\n".join(lines)
            + "\n"
        )


class TorchtitanTomlExporter(Exporter):
    id = "torchtitan-toml"
    target = "torchtitan TOML job config"
    target_version = "torchtitan 0.2.2 (last release with TOML job files)"
    media_type = "application/toml"
    extension = "toml"
    stack = "torchtitan"

    def render(self, plan: Plan, options, notes: Notes) -> str:
        module, flavor = model_ids(plan, notes, "0.2.2")
        par, train, ac = common_settings(plan, notes, "0.2.2")
        if plan.parallel.pp > 1:
            par["module_fqns_per_model_part"] = model_parts(plan, "output")
        doc = {
            "job": {"description": f"meshplan: {plan.model.name} plan rank {plan.rank}"},
            "model": {"name": module, "flavor": flavor},
            "training": train,
            "parallelism": par,
            "activation_checkpoint": {"mode": ac} | ({"selective_ac_option": "op"} if ac == "selective" else {}),
        }
        converters, quantize = fp8_settings(plan, notes)
        if converters:
            doc["model"]["converters"] = converters
            doc["quantize"] = {"linear": quantize}
        if converters or plan.parallel.tp_comm_overlap:
            doc["compile"] = {"enable": True, "components": ["model", "loss"]}
        if async_tp(plan, notes):  # 0.2.2: [parallelism] enable_async_tensor_parallel
            par["enable_async_tensor_parallel"] = True
        launch = launch_line(plan, options, f"--job.config_file {self.filename(plan, options)}")
        head = comment_block(
            "#", header_lines(plan, self) + ["Run on every node:", "  " + launch], notes.warnings, notes.info
        )
        return head + "\n" + tomli_w.dumps(doc, multiline_strings=False)
