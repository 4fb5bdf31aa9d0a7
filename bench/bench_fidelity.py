"""Fidelity of the cost model on published, measured training runs (issue 11 §3).

For every run of ``bench/data/published_runs.json`` and ``bench/data/added_runs.json`` (facts copied from
public sources, one source URL per row, every value the source does not state listed under ``assumed``;
the second file holds the runs added for issue 27 §3, read with the first by default, ``--data`` picks
files): the planner's prediction for the run's OWN configuration (``planner.estimate_plan`` with
the published parallel settings pinned; no search) against the measured figure, in the source's own
metric and FLOP accounting (``planner.answer.accounting``): tokens/s per GPU for torchtitan, TFLOP/s per GPU
for Megatron-LM (its 96·B·s·L·h²·(1 + s/6h + V/16hL) count with recomputation). Then predicted peak
memory against the published one, whether the model says the run fits, and which runs the model
cannot express yet and why. Summary: MAPE, max |error| and Spearman rank correlation, overall and per
source group, against the issue's targets.

Spearman is taken over the achieved fraction of the GPU's peak in the source's own FLOP count (MFU
in that accounting): within a group of different model sizes a ranking of tokens/s is trivial, a
ranking of efficiency is what a planner must get right. Relative errors are the same in every metric
of a row (all are proportional to 1 / step time).

"Fits" is judged against the whole GPU (``memory_headroom`` 0): the runs did run.

Three figures per run and per group: **physics only** (identity residuals: the cited constants alone),
**with built-in residuals** (the planner as shipped: ``planner/pricing/residuals_builtin.py``, fitted on the
published runs by ``bench/fit_residuals.py``, one constant per stack and GPU generation) and **LOSGO**
(leave-one-source-group-out: each run predicted by the residual table refitted without its source group,
the out-of-sample figure the in-sample one is reported next to; a run the table is not fitted on, as every added
run, is out of sample already: its LOSGO error is its error). Run: ``python bench/bench_fidelity.py``
(``--json out.json`` also writes the per-run results).

``--free`` also plans every expressed run left free (issue 27 §4: nothing pinned; the run's model, cluster,
batch, sequence length, precision and stack; the default memory headroom, as a new user would) and prints
the speedup the planner claims over the experts' own configuration under the same cost model (the expert
step ÷ the free step), each claim above ``FREE_CLAIM`` marked for an explanation.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.fidelity_mlperf import mlperf_row  # noqa: E402
from bench.fidelity_mlperf import stack as mlperf_stack  # noqa: E402
from bench.fidelity_nemo import nemo_row  # noqa: E402
from planner.answer import accounting  # noqa: E402
from planner.answer.calibrate import predict_step_time  # noqa: E402
from planner.api import estimate_plan  # noqa: E402
from planner.api import plan as search_plan  # noqa: E402
from planner.specs import (  # noqa: E402
    ClusterSpec,
    GpuSpec,
    ModelSpec,
    ParallelPins,
    PlanRequest,
    Residuals,
    SearchOptions,
    TrainingSpec,
)
from planner.specs.catalog import GPUS, get_model  # noqa: E402
from planner.specs.config import SCHEDULE_INFO, describe  # noqa: E402
from planner.specs.errors import MeshplanError  # noqa: E402
from planner.specs.stacks import resolve as resolve_stack  # noqa: E402
from planner.workload.analytic import model_flops_per_step  # noqa: E402

DATA = ROOT / "bench" / "data" / "published_runs.json"
#: Runs added for issue 27 §3 (same schema; sources other than those held out, see tests/test_fidelity.py).
ADDED = ROOT / "bench" / "data" / "added_runs.json"
DATA_FILES = (DATA, ADDED)

#: The issue's targets (issue 11 §3).
TARGET_MAPE = 0.08
TARGET_MAX = 0.20
TARGET_SPEARMAN = 0.8
TARGET_MEMORY = 0.10
TARGET_LOSGO = 0.10

FEATURE_REASONS = {
    "parallel-residual": "parallel attention + MLP block (GPT-J residual): not a block the model has",
}


def load(path: Path = DATA) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def load_all(paths: tuple[Path, ...] | list[Path] = DATA_FILES) -> dict[str, Any]:
    """The runs of several data files as one (``runs`` in file order, ``gpus`` merged), with ``files``:
    each file's name and the ids of its runs (the summary counts per file)."""
    merged: dict[str, Any] = {"gpus": {}, "runs": [], "files": {}}
    for path in paths:
        data = load(path)
        for gpu_id, fact in data.get("gpus", {}).items():
            if gpu_id in merged["gpus"] and merged["gpus"][gpu_id] != fact:
                raise ValueError(f"{path.name}: GPU {gpu_id!r} differs from an earlier file's")
            merged["gpus"][gpu_id] = fact
        ids = [row["id"] for row in data["runs"]]
        clash = set(ids) & {row["id"] for row in merged["runs"]}
        if clash:
            raise ValueError(f"{path.name}: run ids already in an earlier file: {sorted(clash)}")
        merged["runs"].extend(data["runs"])
        merged["files"][path.name] = ids
    return merged


# ------------------------------------------------------------------------------------------------
# What the model can express


#: Mixture-of-experts runs (parallel.ep > 1) whose source names a catalog model without its architecture
#: (Megatron-Bridge's performance tables): the catalog entry (its HF config; issue 23). For these Megatron rows
#: an unstated schedule with pp > 1 and no virtual stages is Megatron-core's only one (1F1B), and an unstated
#: recomputation is none (the perf recipes' default): both recorded in the row's ``assumed``.
MOE_CATALOG = {
    "GPT OSS 120B": "gpt-oss-120b",
    "Qwen3_30B_a3B": "qwen3-30b-a3b",
    "Qwen3_30B_a3B (tokendrop)": "qwen3-30b-a3b",
}
#: Catalog MoE models as a row's recipe ran them when that differs from the catalog's dropless entry: the
#: ``MoeSpec`` fields set, and why. The 25.09 "(tokendrop)" rows ran Megatron-Bridge v0.1.0rc3, whose perf script
#: applies token drop to every Qwen3 30B-A3B run (scripts/performance/run_script.py:96-102
#: ``recipe.model = apply_moe_token_drop(recipe.model)``, no flag) with its defaults capacity factor 1.0 and
#: padding to capacity (src/megatron/bridge/training/utils/moe_token_drop.py:18-22, :54-55): Megatron-core's
#: ``moe_expert_capacity_factor=1.0``, ``moe_pad_expert_input_to_capacity=True``.
MOE_OVERRIDES: dict[str, tuple[dict[str, Any], str]] = {
    "Qwen3_30B_a3B (tokendrop)": (
        {"capacity_factor": 1.0, "pad_to_capacity": True},
        "model.moe: capacity_factor 1.0, pad_to_capacity (Megatron-Bridge v0.1.0rc3 scripts/performance/"
        "run_script.py:96-102 applies apply_moe_token_drop to every Qwen3 30B-A3B run; its defaults, "
        "src/megatron/bridge/training/utils/moe_token_drop.py:18-22, :54-55)",
    )
}
#: Rows whose published micro-batch contradicts the row's own arithmetic, with the recipe's value and why. The 25.11
#: DGX-H100 GPT OSS 120B row prints MBS 4, GA 2 at GBS 512 on 64 GPUs with PP 4 (DP 16: 16 × 4 × 2 = 128, not 512),
#: the MBS and GA of the DGX-B200 row above it (DP 64: 64 × 4 × 2 = 512); the H100 recipe of that release runs MBS 1
#: (NVIDIA-NeMo/Megatron-Bridge v0.2.0 scripts/performance/configs/gpt_oss/workload_base_configs.py:22-28, 58-62:
#: ``GPT_OSS_120B_H100_BF16_BASE_CONFIG`` keeps the base ``micro_batch_size=1``; GA = 512 / 16 = 32).
MICRO_FIXES = {
    "mbridge_25.11_GPT_64gpu_BF16": (
        1,
        "batch.micro: 1, not the table's 4 (its MBS 4 / GA 2 give 16 × 4 × 2 = 128 sequences, not GBS 512: the B200 row's "
        "values; Megatron-Bridge v0.2.0 GPT_OSS_120B_H100_BF16_BASE_CONFIG runs micro_batch_size=1)",
    )
}


#: Megatron-Bridge source groups: the archive's DGX-H100 rows (``published_runs.json``: ``megatron-bridge``;
#: ``added_runs.json``: ``megatron-bridge-archive``), run with the perf recipes of scripts/performance.
BRIDGE_GROUPS = ("megatron-bridge", "megatron-bridge-archive")
#: The Megatron-Bridge tag each NeMo container of the archive ships, read from NVIDIA-NeMo/Megatron-Bridge at HEAD
#: 067f987df (docs/releases/software-versions.md: 25.09 → 0.1.0rc3, 25.11 → 0.2.0, 26.02 → 0.3.0, 26.04 → 0.4.0;
#: docs/releases/known-issues.md:23 "Fixed in 26.02.01 (r0.3.1)"). 26.04.01 is not in those tables: v0.4.2 (2026-05-28),
#: the first tag whose docs/performance-summary.md carries the 26.04.01 tables (v0.4.1 still shows 26.02.01); the Llama
#: 3 70B lines cited below are the same at v0.4.1 and v0.4.2, the GPT OSS ones hold the same text a few lines apart.
BRIDGE_TAGS = {
    "25.09": "v0.1.0rc3",
    "25.11": "v0.2.0",
    "26.02": "v0.3.0",
    "26.02.01": "v0.3.1",
    "26.04": "v0.4.0",
    "26.04.01": "v0.4.2",
}
#: Where each tag's H100 Llama 3 70B FP8 recipe fixes what the archive's table leaves out (all at the tag, in
#: NVIDIA-NeMo/Megatron-Bridge): the preset's parallelism (no recompute_num_layers / recompute_modules / CPU offloading /
#: Megatron-FSDP / CUDA graphs set), the FP8 recipe, the recipe's recompute, sequence parallelism, userbuffers TP
#: overlap and DDP settings.
_L70_V2 = (
    "scripts/performance/configs/llama/llama3_workload_base_configs.py:339-344 LLAMA3_70B_PRETRAIN_CONFIG_H100_FP8_CS_V2 "
    "(TP 4, PP 8, VP 5, GBS 256, MBS 1; nothing else set)",
    "scripts/performance/utils/precision.py:28-32 fp8_cs = bf16_with_fp8_current_scaling_mixed",
)
_L70_RECIPE_26 = (
    "src/megatron/bridge/recipes/llama/llama3.py:681 sequence_parallel=True, :697 cuda_graph_impl='none', "
    ":705-706 recompute_granularity=None, :727 overlap_grad_reduce=True, :730 use_distributed_optimizer=True, "
    ":737-739 CommOverlapConfig(tp_comm_overlap=True)"
)
LLAMA70_H100_CITES = {
    "v0.1.0rc3": (
        "scripts/performance/configs/llama3/llama3_70b_llm_pretrain.yaml:55-77 (h100 64 GPUs: TP 4, VP 5, MBS 1, GBS 128, "
        "cuda_graphs false, use_megatron_fsdp false; PP 8 / CP 1 only under fp8_ds and fp8_cs, bf16 is PP 4 / CP 2; "
        "no recompute_num_layers)",
        "scripts/performance/argument_parser.py:86-107 (--compute_dtype bf16|fp8, --fp8_recipe default 'ds'); "
        "utils/helpers.py:92-96 (fp8 + ds = bf16_with_fp8_delayed_scaling_mixed)",
        "src/megatron/bridge/recipes/llama/llama3_70b.py:43/65 sequence_parallel=True, :181 overlap_grad_reduce=True, "
        ":184 use_distributed_optimizer=True, :219-222 CommOverlapConfig(tp_comm_overlap=True); no recompute set",
    ),
    "v0.2.0": (
        "scripts/performance/configs/llama3/workload_base_configs.py:140-145 LLAMA3_70B_H100_FP8_CS_BASE_CONFIG "
        "(TP 4, PP 8, VP 5, GBS 128, MBS 1; nothing else set); utils/helpers.py:163-179 (recompute only when set)",
        "utils/helpers.py:37-41 fp8_cs = bf16_with_fp8_current_scaling_mixed",
        "src/megatron/bridge/recipes/llama/llama3.py:300-303 sequence_parallel=True, tp_comm_overlap=True; :556 "
        "overlap_grad_reduce=True, :559 use_distributed_optimizer=True; no recompute set",
    ),
    "v0.3.0": (
        _L70_V2[0],
        _L70_V2[1],
        "scripts/performance/argument_parser.py:509-515 (--compute_dtype bf16|fp8_cs|fp8_mx|fp8_sc|nvfp4: no plain fp8; "
        "the H100 presets are FP8_CS only)",
        "src/megatron/bridge/recipes/llama/llama3.py:300-303 sequence_parallel=True, tp_comm_overlap=True; :557 "
        "overlap_grad_reduce=True, :560 use_distributed_optimizer=True; no recompute set",
    ),
    "v0.3.1": (*_L70_V2, _L70_RECIPE_26),
    "v0.4.0": (*_L70_V2, _L70_RECIPE_26),
    "v0.4.2": (*_L70_V2, _L70_RECIPE_26),
}


def _llama70_h100(release: str, *, precision_unstated: bool = False) -> dict[str, Any]:
    """The recipe facts of a DGX-H100 Llama 3 70B row of ``release`` (``LLAMA70_H100_CITES``)."""
    tag = BRIDGE_TAGS[release]
    where = f"NVIDIA-NeMo/Megatron-Bridge {tag} ({'; '.join(LLAMA70_H100_CITES[tag])})"
    out: dict[str, Any] = {
        "parallel": {"recompute": "none", "zero_stage": 1, "sequence_parallel": True, "tp_comm_overlap": True},
        "assumed": [
            f"recipe: NeMo {release} ships Megatron-Bridge {tag}; {where}",
            "parallel.recompute: none (the recipe sets no recompute)",
            "parallel.zero_stage: 1 (use_distributed_optimizer; the table's FSDP=0 is Megatron FSDP)",
            "parallel.sequence_parallel: true, parallel.tp_comm_overlap: true (userbuffers)",
            "stack.overlap_grad_reduce: true",
        ],
    }
    if precision_unstated:
        out["precision"] = "fp8"
        out["fp8_recipe"] = "delayed"
        out["assumed"].append(
            "precision: fp8 with delayed scaling (the table's PP 8 / CP 1 is the 70B H100 mapping of fp8_ds and "
            "fp8_cs only; the script's --fp8_recipe default is ds)"
        )
    else:
        out["fp8_recipe"] = "current"
        if release.startswith("26"):
            out["assumed"].append("training.fp8_recipe: current (the table's FP8 on H100 runs the FP8_CS preset)")
    return out


#: Megatron-Bridge rows with what their tag's perf recipe fixes (``_llama70_h100``; ``bridge_row`` applies it).
#: The Llama 3 8B rows stay out (``BRIDGE_NOT_EXPRESSIBLE``).
BRIDGE_RECIPES: dict[str, dict[str, Any]] = {
    "mbridge_26.04.01_LLAMA3_70B_64gpu_FP8": _llama70_h100("26.04.01"),
    "mbridge_26.04_LLAMA3_70B_64gpu_FP8": _llama70_h100("26.04"),
    "mbridge_26.02.01_LLAMA3_70B_64gpu_FP8": _llama70_h100("26.02.01"),
    "mbridge_26.02_LLAMA3_70B_64gpu_FP8": _llama70_h100("26.02"),
    "mbridge_25.11_LLAMA3_70B_64gpu_FP8-CS": _llama70_h100("25.11"),
    "mbridge_25.09_LLAMA3_70B_64gpu_prec-unstated": _llama70_h100("25.09", precision_unstated=True),
    # GPT OSS 120B on H100 from 26.02 (v0.3.0) on: GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V1/V2 set
    # recompute_modules=["layernorm", "moe_act"] (scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py
    # :79-83, :124-127 at v0.4.2) and the override makes it selective (scripts/performance/utils/overrides.py:148-150 at
    # v0.4.2; :141-143 at v0.3.0): Megatron-core's output-discarding checkpoints of the MoE layers' pre-MLP norm and
    # the experts' activation (core_v0.16.1 transformer_layer.py:382-438, moe/experts.py:588-591, :738-750), priced as
    # the planner's recompute "layernorm+moe_act" (cost model 62: planner.compose.recompute_modules; the input norm is
    # fused into linear_qkv, gpt_layer_specs.py:279, so only the pre-MLP one). At 25.11 (v0.2.0) the same list had no
    # effect: that override set no granularity (utils/helpers.py:178-179) and the recipe sets none, so recompute was off.
    "mbridge_26.04.01_GPT_64gpu_BF16": {
        "parallel": {"recompute": "layernorm+moe_act"},
        "assumed": [
            "parallel.recompute: layernorm+moe_act, the recipe's selective ['layernorm', 'moe_act'] (Megatron-Bridge "
            "v0.4.2 gpt_oss_workload_base_configs.py:79-83, utils/overrides.py:148-150): the MoE layers' pre-MLP norm "
            "and the experts' activation discarded and rerun in backward (Megatron-core core_v0.16.1 "
            "transformer_layer.py:382-438, moe/experts.py:588-591, :738-750; planner.compose.recompute_modules)"
        ],
    },
    "mbridge_25.11_GPT_64gpu_BF16": {
        "parallel": {"recompute": "none"},
        "assumed": [
            "parallel.recompute: none (Megatron-Bridge v0.2.0 GPT_OSS_120B_H100_BF16_BASE_CONFIG lists recompute_modules "
            "['layernorm', 'moe_act'] (scripts/performance/configs/gpt_oss/workload_base_configs.py:58-62) but its "
            "override sets no granularity (utils/helpers.py:178-179) and the recipe none: Megatron-core recomputes "
            "modules only under recompute_granularity 'selective' (core_v0.16.0 transformer_layer.py:382)"
        ],
    },
    # Qwen3 30B-A3B on 16 H100, 25.11 (v0.2.0): scripts/performance/configs/qwen3/qwen3_llm_pretrain.py:231-249 with
    # set_qwen3_common_configs (:33-47: no recompute, router fusion, force-balanced dropless routing) and the
    # provider's alltoall dispatcher, grouped GEMM and permute fusion (src/megatron/bridge/models/qwen/
    # qwen_provider.py:394-396); the H100 FP8 preset sets no flex dispatcher (workload_base_configs.py:233-239).
    # Measured 1.99x slower than its 25.09 token-drop twin below, the same GPU work (tests/test_fidelity_qwen_tokendrop
    # .py): NVIDIA tracks it as a regression of the dropless recipe (NVIDIA-NeMo/Megatron-Bridge issue #1998, "2X slower
    # performance in QWEN3 30B on H100 and B200 with the dropless schedule compared to the token-drop schedule ... the
    # perf in 25.11 is 2X slower than 25.09"), fixed for 26.02.01 (r0.3.1) by a recipe change, not a kernel (PR #2477:
    # flex dispatcher with HybridEP, moe_a2a_overlap off, EP 16 / PP 1; v0.3.1 qwen3_workload_base_configs.py:408-415),
    # 9058 tok/s/GPU. That run still waits on the host for each MoE layer's counts (HybridEP without
    # num_permuted_tokens blocks: Megatron-core 55ac7082 token_dispatcher.py:985-987, fused_a2a.py:365-367), so the
    # dropless device-to-host wait alone is not the 2x; docs/validation.md (issue 23) has the evidence.
    "mbridge_25.11_Qwen3_30B_a3B_16gpu_FP8-CS": {
        "parallel": {"recompute": "none"},
        "assumed": [
            "recipe: NeMo 25.11 ships Megatron-Bridge v0.2.0: scripts/performance/configs/qwen3/qwen3_llm_pretrain.py"
            ":231-249 (qwen3_30b_a3b_h100_config), :33-47 (recompute None, moe_router_fusion, "
            "moe_router_force_load_balancing: dropless); src/megatron/bridge/models/qwen/qwen_provider.py:394-396 "
            "(moe_grouped_gemm, alltoall dispatcher, moe_permute_fusion); no flex dispatcher on H100 "
            "(workload_base_configs.py:233-239)",
            "parallel.recompute: none (qwen3_llm_pretrain.py:36-38)",
            "not priced: the preset's moe_a2a_overlap (workload_base_configs.py:238; utils/helpers.py:182-186 "
            "overlap_moe_expert_parallel_comm, delay_wgrad_compute), the all-to-alls priced on the compute stream "
            "(not a bound: Megatron-Bridge PR #1760 disabled it on Qwen3-235B B200 'due to CPU overhead', 17.2 → "
            "16.0 s BF16), nor the host's Python/launch time it and the dropless wait expose (Megatron-Bridge issue "
            "#1998: this run 2x its token-drop twin); "
            "the table's MBS 2 / VP 24 (kept) are the v0.1.0rc3 perf matrix's fp8_cs mapping, not the v0.2.0 "
            "preset's MBS 1 / VP 12",
        ],
    },
    # Qwen3 30B-A3B on 16 H100, 25.09 (v0.1.0rc3): the table's mapping (GBS 512, MBS 2, PP 2, VP 24, EP 8) is the
    # perf matrix's h100 num_gpus_16 entry, whose MBS 2 is set for fp8_cs only (bf16: MBS 1): the matrix key is
    # f"{compute_dtype}_{fp8_recipe}" (scripts/performance/utils/helpers.py:147-148), so the run was FP8 with
    # current scaling. Recomputation none (the yaml's null granularity overrides the recipe's full/uniform/1).
    # The 25.11 FP8-CS row runs the same mapping dropless: the pair isolates what token drop changes (issue 23).
    "mbridge_25.09_Qwen3_30B_a3B_16gpu_prec-unstated": {
        "precision": "fp8",
        "fp8_recipe": "current",
        "parallel": {"recompute": "none"},
        "assumed": [
            "precision: fp8, current scaling (Megatron-Bridge v0.1.0rc3 scripts/performance/configs/qwen3/"
            "qwen3_30b_a3b_llm_pretrain.yaml:55-73: the h100 num_gpus_16 mapping of the table, MBS 2 only under "
            "fp8_cs, bf16 MBS 1; utils/helpers.py:147-148 picks the entry by compute dtype and FP8 recipe)",
            "parallel.recompute: none (qwen3_30b_a3b_llm_pretrain.yaml:19-21 null granularity, method, layers)",
        ],
    },
}
#: Megatron-Bridge rows the model cannot express as their recipe ran them, and why.
_FSDP = (
    "Megatron-FSDP (use_megatron_fsdp: the table's FSDP 8), a data-parallel engine the megatron preset does not price"
)
BRIDGE_NOT_EXPRESSIBLE = {
    "mbridge_25.11_Qwen3_30B_a3B_16gpu_FP8-CS": [
        "EP all-to-all overlap with delayed weight gradients on the dropless alltoall dispatcher (Megatron-Bridge v0.2.0 "
        "workload_base_configs.py:238, utils/helpers.py:182-186), a schedule the planner does not price and whose CPU "
        "overhead (PR #1760) the dropless wait exposes: NVIDIA tracks this run as a 2x regression against its 25.09 "
        "token-drop twin (issue #1998), fixed by recipe (PR #2477); docs/validation.md (issue 23)",
    ],
    "mbridge_25.11_LLAMA3_8B_8gpu_FP8-CS": [
        _FSDP,
        "full recompute of 5 of the 32 layers (recompute_method block, recompute_num_layers 5: Megatron-Bridge v0.2.0 "
        "scripts/performance/configs/llama3/workload_base_configs.py:229-233, utils/helpers.py:174-177): not a mode "
        "the model has",
    ],
    "mbridge_25.09_LLAMA3_8B_8gpu_prec-unstated": [
        _FSDP
        + " (Megatron-Bridge v0.1.0rc3 configs/llama3/llama3_8b_llm_pretrain.yaml:68-77: the fp8 mappings; bf16 is "
        "CP 2 without FSDP)",
    ],
}


def bridge_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with what its Megatron-Bridge recipe fixes (``BRIDGE_RECIPES``) applied, each in ``assumed``."""
    fix = BRIDGE_RECIPES.get(row["id"])
    if fix is None:
        return row
    par = {**row["parallel"], **fix.get("parallel", {})}
    out = {**row, "parallel": par, "assumed": list(row["assumed"]) + list(fix["assumed"])}
    if "precision" in fix:
        out["precision"] = fix["precision"]
    if "fp8_recipe" in fix:
        out["fp8_recipe"] = fix["fp8_recipe"]
    return out


#: torchtitan source groups whose pipelined rows carry the run's local batch as ``batch.micro`` (the per-DP-rank
#: ``training.batch_size`` of the benchmark's tables), with the torchtitan commit they ran. At 9dec370 (the
#: llama3_h100_202412 runs; pytorch/torchtitan at 9dec370ad):
#: * micro-batches: ``n_microbatches = experimental.pipeline_parallel_microbatches``, None (config_manager.py:341-352,
#:   "The default value will be the number of pipeline stages") → ``pipeline_parallel_degree``
#:   (parallelisms/pipelining_utils.py:79-81); the schedule's ``step(input_ids)`` splits the whole local batch
#:   (train.py:282-292) into those chunks, so micro = local batch / pp. The benchmark states no microbatch count.
#: * stages: without ``pipeline_parallel_split_points`` (default [], config_manager.py:302-305) the cut is
#:   ``generate_split_points`` (pipelining_utils.py:18-57): 1 stage per rank for a PipelineScheduleSingle (1F1B), 2 for
#:   a PipelineScheduleMulti (Interleaved1F1B), layers // stages each, the first and last stage base, the remainder one
#:   each to the middle stages in order (``titan_split_layers``); stage s on rank s % pp (pipeline_llama.py:108,
#:   ``stage_ids_this_rank`` style "loop", pipelining_utils.py:102-111), the embedding on stage 0, norm and output on
#:   the last (pipeline_llama.py:77-92).
#: * FSDP: with PP on, every block and the root are ``fully_shard``-ed with ``reshard_after_forward=False``
#:   (parallelisms/parallelize_llama.py:325-339, "For PP, do not reshard after forward to avoid per-microbatch
#:   all-gathers"): parameters kept unsharded from forward to backward, the planner's ZeRO-2 on the torchtitan stack.
TITAN_PP_GROUPS = {"torchtitan-2412-h100": "9dec370"}
#: Stages per pipeline rank ``generate_split_points`` gives each schedule class (pipelining_utils.py:22-27).
TITAN_STAGES_PER_RANK = {"gpipe": 1, "1f1b": 1, "interleaved-1f1b": 2}


def titan_split_layers(num_layers: int, stages: int) -> list[int]:
    """The transformer layers of each stage under torchtitan's ``generate_split_points`` (pipelining_utils.py:37-52 at
    9dec370): split points after ``base`` layers, then ``base + 1`` while the remainder lasts, then ``base``; the last
    stage takes what is left."""
    base, extra = divmod(num_layers, stages)
    cuts, at = [], 0
    for i in range(stages - 1):
        step = base if i == 0 or extra == 0 else base + 1
        if i and extra:
            extra -= 1
        at += step
        cuts.append(at)
    bounds = [0, *cuts, num_layers]
    return [b - a for a, b in zip(bounds, bounds[1:])]


def titan_pp_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its torchtitan pipeline as the run's commit built it (``TITAN_PP_GROUPS``): the local batch split
    into pp micro-batches, the stages per rank and layer cut of ``generate_split_points``, FSDP without resharding
    after forward (ZeRO-2); each in ``assumed``. Other rows, and local batches pp does not divide, unchanged."""
    par, b = row["parallel"], row["batch"]
    pp, sched = par.get("pp") or 1, par.get("schedule")
    commit = TITAN_PP_GROUPS.get(row["source_group"])
    if row["stack"] != "torchtitan" or commit is None or pp <= 1 or sched not in TITAN_STAGES_PER_RANK:
        return row
    local = b["micro"]
    if local is None or local % pp or (par.get("virtual_stages") or 1) > 1:
        return row
    v = TITAN_STAGES_PER_RANK[sched]
    layers = titan_split_layers(row["model"]["layers"], pp * v)
    where = f"pytorch/torchtitan {commit}"
    par = {**par, "virtual_stages": v, "stage_layers": layers}
    assumed = [
        f"batch.micro: {local // pp}, the local batch {local} split into pp = {pp} micro-batches ({where} "
        "pipelining_utils.py:79-81: pipeline_parallel_microbatches unset → pipeline_parallel_degree; not stated)",
        f"parallel.stage_layers: {layers} ({v} stage(s) per rank; {where} pipelining_utils.py:18-57 "
        "generate_split_points, no split points set)",
    ]
    if par["zero_stage"] == 3:
        par["zero_stage"] = 2
        assumed.append(
            f"parallel.zero_stage: 2 ({where} parallelize_llama.py:325-339: with PP, fully_shard(..., "
            "reshard_after_forward=False))"
        )
    return {
        **row,
        "parallel": par,
        "batch": {**b, "micro": local // pp},
        "assumed": list(row["assumed"]) + assumed,
    }


def moe_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with the assumptions of ``MOE_CATALOG`` applied (an expert-parallel row it names; else unchanged),
    after ``bridge_row``'s, ``titan_pp_row``'s, ``fidelity_nemo.nemo_row``'s and ``fidelity_mlperf.mlperf_row``'s."""
    row = titan_pp_row(bridge_row(nemo_row(mlperf_row(row))))
    par = row["parallel"]
    catalog = MOE_CATALOG.get(row["model_name"])
    if (par.get("ep") or 1) <= 1 or row["model"] is not None or catalog is None or row["stack"] != "megatron":
        return row
    par = dict(par)
    assumed = list(row["assumed"]) + [f"model: the catalog's {catalog} (the source names it only)"]
    if par["schedule"] is None and (par["pp"] or 1) > 1 and (par["virtual_stages"] or 1) == 1:
        par["schedule"] = "1f1b"
        assumed.append("parallel.schedule: 1f1b (Megatron-core's schedule without virtual stages)")
    if par["recompute"] is None:
        par["recompute"] = "none"
        assumed.append("parallel.recompute: none (not stated; the perf recipes' default)")
    if par["zero_stage"] == 0 and row["source_group"] in BRIDGE_GROUPS:
        # The table's "FSDP=0" says Megatron FSDP is off, not the optimizer: every Megatron-Bridge MoE recipe of
        # the tables' release shards it (NVIDIA-NeMo/Megatron-Bridge v0.2.0, 2025-11-26: recipes/qwen/qwen3_moe.py
        # and recipes/gpt_oss/gpt_oss.py, ``DistributedDataParallelConfig(use_distributed_optimizer=True)``).
        par["zero_stage"] = 1
        assumed.append(
            "parallel.zero_stage: 1 (the recipes' distributed optimizer; the table's FSDP=0 is Megatron FSDP)"
        )
    batch = row["batch"]
    if row["id"] in MICRO_FIXES:
        micro, why = MICRO_FIXES[row["id"]]
        batch = {**batch, "micro": micro}
        assumed.append(why)
    model: dict[str, Any] = {"catalog": catalog}
    if row["model_name"] in MOE_OVERRIDES:
        model["moe"], why = MOE_OVERRIDES[row["model_name"]]
        assumed.append(why)
    return {**row, "model": model, "parallel": par, "batch": batch, "assumed": assumed}


def reasons_not_expressible(row: dict[str, Any]) -> list[str]:
    """Why the model cannot price this run as published (empty: it can)."""
    out: list[str] = list(BRIDGE_NOT_EXPRESSIBLE.get(row["id"], []))
    row = moe_row(row)
    m, par, cl = row["measured"], row["parallel"], row["cluster"]
    if m["metric"] is None:
        if m["tflops_per_gpu"] is not None:
            out.append("TFLOP/s figure with an unstated FLOP accounting (and secondary, unverified)")
        else:
            out.append("no measured throughput published")
    mod = row["model"]
    if (par.get("ep") or 1) > 1 and (mod is None or "catalog" not in mod):
        out.append(f"MoE / expert parallelism (ep={par['ep']}) of a model the catalog does not hold")
    if mod is None:
        out.append("architecture not published in the source")
    elif "catalog" not in mod:
        missing = [k for k in ("family", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab") if mod.get(k) is None]
        if missing:
            out.append(f"architecture incomplete in the source (no {', '.join(missing)})")
    if cl["gpu"] is None:
        out.append(f"GPU not in the catalog ({cl['gpu_model']})")
    if row["precision"] == "fp8" and fp8_recipe(row) is None:
        out.append(f"FP8 ({row['precision_as_published']}): recipe not stated")
    elif row["precision"] is None:
        out.append("precision not stated")
    if (par.get("cp") or 1) > 1 and cp_comm_of(row) not in resolve_stack(stack_of(row)).cp_comms:
        out.append(f"context parallelism (cp={par['cp']}) with an exchange its stack does not run ({cp_comm_of(row)})")
    for f in row["features"]:
        if f in FEATURE_REASONS:
            out.append(FEATURE_REASONS[f])
    if par["recompute"] == "selective-layer" and row["stack"] != "torchtitan":
        out.append(
            "per-layer selective recomputation (every k-th block fully recomputed): not a recompute mode the model has"
        )
    elif par["recompute"] is None:
        out.append("recomputation not stated")
    if any(par.get(k) is None for k in ("tp", "pp", "dp")):
        out.append("parallel degrees not stated")
    if par["zero_stage"] is None:
        out.append(f"ZeRO/FSDP stage not stated ({par['zero_as_published']})")
    sched = par["schedule"]
    if sched is not None and (sched not in SCHEDULE_INFO or not SCHEDULE_INFO[sched].priced):
        out.append(f"pipeline schedule {sched!r} not priced")
    elif sched is None and (par.get("pp") or 1) > 1:
        out.append("pipeline schedule not stated")
    if row["batch"]["global"] is None or row["batch"]["micro"] is None or row["seq_len"] is None:
        out.append("batch, micro-batch or sequence length not stated")
    return out


def fp8_recipe(row: dict[str, Any]) -> str | None:
    """The FP8 recipe of an FP8 run, from how its source states its precision: torchtitan's "Float8" rows before
    torchao's rowwise recipe (2024) and "float8 tensorwise" are tensorwise (dynamic per-tensor scales, the
    float8 converter's default); Megatron-Bridge "FP8-CS" is Transformer Engine current scaling; NeMo /
    MLPerf "FP8" (hybrid, amax history) is TE's default DelayedScaling. A row's ``fp8_recipe`` (set by ``bridge_row``
    from the run's recipe, e.g. Megatron-Bridge 26.0x's H100 "FP8": its FP8_CS preset) comes first."""
    if row["precision"] != "fp8":
        return None
    if row.get("fp8_recipe"):  # what the run's recipe sets (``bridge_row``)
        return str(row["fp8_recipe"])
    text = (row.get("precision_as_published") or "").lower()
    if row["stack"] == "torchtitan":
        return "rowwise" if "rowwise" in text else "tensorwise"
    if row["stack"] == "megatron":
        return "current" if "fp8-cs" in text else "delayed"
    return None


def model_spec(row: dict[str, Any]) -> ModelSpec:
    mod = row["model"]
    if "catalog" in mod:
        spec = get_model(mod["catalog"])
        if mod.get("moe") and spec.moe is not None:  # the recipe's MoE settings (``MOE_OVERRIDES``)
            spec = spec.model_copy(update={"moe": spec.moe.model_copy(update=mod["moe"])})
        return spec
    llama = mod["family"] == "llama"
    return ModelSpec(
        name=row["id"][:128],
        family=mod["family"],
        num_layers=mod["layers"],
        hidden_size=mod["hidden"],
        num_attention_heads=mod["heads"],
        num_kv_heads=mod["kv_heads"],
        ffn_hidden_size=mod["ffn"],
        vocab_size=mod["vocab"],
        activation=mod.get("activation") or ("swiglu" if llama else "gelu"),
        norm="rmsnorm" if llama else "layernorm",
        tie_embeddings=mod.get("tie_embeddings", not llama),  # Megatron GPT ties them; Llama, Nemotron do not
        max_seq_len=max(row["seq_len"], 1),
    )


def gpu_spec(gpu_id: str, extra: dict[str, Any]) -> str | GpuSpec:
    if gpu_id in GPUS:
        return gpu_id
    fact = extra[gpu_id]
    base = GPUS["h100-sxm5-80gb"]
    return base.model_copy(
        update={
            "id": gpu_id,
            "memory_gib": fact["memory_gib"],
            "hbm_bandwidth_GBps": fact["hbm_bandwidth_GBps"],
            "source": fact["source"][:500],
        }
    )


#: Source groups whose runs predate FlashAttention (2022): Megatron-LM's 2020/2021 GPT runs materialise the
#: s×s scores, with attention dropout 0.1 and hidden dropout 0.1 (megatron/arguments.py defaults of the
#: time), and keep apex fused LayerNorm's input like TE does. Their kernels differ:
#: * 2020 (the README tables, commit 5281919 of 2020-09-11): one PyTorch kernel per op — ``nn.Softmax``
#:   after ``masked_fill_`` of the causal mask, ``nn.Dropout`` and the residual add as separate kernels
#:   (megatron/model/transformer.py, gpt2_model.py ``gpt2_attention_mask_func``): ``kernels: eager``;
#: * 2021 (the GPT-3 175B example, 152aab30 of 2021-01-11): fused scale-mask-softmax, bias-GeLU and
#:   bias-dropout-add kernels (megatron/model/fused_softmax.py, fused_bias_gelu.py, transformer.py):
#:   ``kernels: fused``.
UNFUSED_ATTENTION_GROUPS = {"megatron-2020-tp": "eager", "megatron-2020-dp128": "eager", "megatron-2021-gpt3": "fused"}
#: Runs of 2020–2021 priced with NCCL's tuner of that era (``training.stack.nccl = "2.10"``, ``planner.pricing.nccl``):
#: Megatron-LM's 2020/2021 READMEs and MT-NLG (trained 2021 on Selene) ran NGC PyTorch containers of 2020–2021, which
#: ship NCCL 2.7–2.10 (tuning.cc constants of v2.8–v2.10 agree but for two tree caps; v2.7 has a 50 µs tree step).
NCCL_210_GROUPS = ("megatron-2020-tp", "megatron-2020-dp128", "megatron-2021-gpt3", "mt-nlg-2022")
#: Megatron-DeepSpeed's 2021 model code under DeepSpeed's pipeline (MT-NLG, trained 2021; arXiv 2201.11990): the
#: Megatron-LM transformer it forked (v2.5, e269e20064, 2021-08: megatron/model/transformer.py) materialises the s×s
#: scores through ``FusedScaleMaskSoftmax`` and attention dropout, with fused bias-GeLU and bias-dropout-add kernels and
#: ``--attention-dropout`` / ``--hidden-dropout`` 0.1 by default (megatron/arguments.py) — FlashAttention (arXiv
#: 2205.14135) came out in 2022-05, after the runs.
MEGATRON_2021_KERNELS = {"attention": "unfused", "kernels": "fused", "dropout": True}
MEGATRON_DEEPSPEED_GROUPS = ("mt-nlg-2022",)


#: torchtitan's train configs at the commits of its published runs, where they differ from the preset:
#: ``norm_type = "fused_rmsnorm"`` (Triton kernel) in train_configs/llama3_8b.toml and llama2_13b.toml at
#: 1ea476e9 (2024-04, the A100 tables; llama2_70b/llama3_70b use the composite ``rmsnorm``);
#: ``compile = true`` in train_configs/llama3_405b.toml at 9515a140 (2024-08, the commit that added the 405B
#: table, whose "Optimizations: None" row names no Float8/AsyncTP); the default ``selective_ac_option = "2"``
#: (torchtitan/config_manager.py at 1ea476e9) for the "selective layer" rows.
TITAN_FUSED_NORM_RUNS = (
    "torchtitan_2404_a100_8B_",
    "torchtitan_2404_a100_llama2_13b_",
)
TITAN_COMPILED_GROUPS = ("torchtitan-2408-h100",)
#: The preset of the torchtitan each source group ran (planner.specs.stack_titan: 1ea476e9, 9515a140, 9dec370); the
#: 2025-06 groups ran 820504e (2025-06-13), after gradient accumulation (8570415c, 2025-06-05): the torchtitan preset.
TITAN_ERAS = {"torchtitan-2404-a100": "torchtitan-2404", "torchtitan-2408-h100": "torchtitan-2408"}
TITAN_ERAS |= {"torchtitan-2412-h100": "torchtitan-2412"}
TITAN_SELECTIVE_LAYER_K = 2

#: The inter-node network of a source group whose rows do not state it, where a source says what it ran on
#: (``ClusterSpec.inter_node_bandwidth``, as stated; other groups: the GPU's default NICs, 8 × HDR 200 Gb/s on A100):
#: * ``torchtitan-2404-a100`` (docs/performance.md at 1ea476e9, "64 A100 (80GB)", interconnect not stated): AWS
#:   P4de, 4 × 100 Gb/s EFA per node. torchtitan's own multi-node launcher at the same commit
#:   (``multinode_trainer.slurm``) is "optimized for AWS with EFA" (``FI_PROVIDER="efa"`` under "# Enable for A100",
#:   ``NCCL_IB_DISABLE=1``, ``/opt/amazon/efa/lib``, ``--cpus-per-task=96``: the 96 vCPUs of a p4d/p4de.24xlarge),
#:   and a reader reproducing these tables was told apart by exactly this: "your AWS cluster brings 400 ... with
#:   EFA" (pytorch/torchtitan issue 394, comment of 2024-11-22). 8 × A100 80GB with 4 EFA adapters is the
#:   p4de.24xlarge (AWS "Amazon EC2 P4 instances": 400 Gbps EFA; skypilot-org/skypilot PR 5318's table: p4de.24xlarge
#:   A100:8, 4 EFA), 6.25 GB/s per GPU against the DGX A100's 25: FSDP2's per-block gathers and fp32 reduce-scatters
#:   over 8 nodes then run through most of each step (Llama 2 70B at local batch 1 becomes bound by them).
CLUSTER_NETWORK = {"torchtitan-2404-a100": "4x100Gb/s"}


def stack_of(row: dict[str, Any]) -> str | dict[str, Any]:
    """The ``training.stack`` a run is priced with: its source's stack preset; the pre-FlashAttention
    Megatron runs as ``megatron-2020`` (Megatron-LM v2.0: unfused attention, dropout, ZeRO-0, 1F1B, full recompute
    only, NCCL's 2.10 tuner), the 2020 README rows with their eager kernels; other 2021 runs with their era's NCCL
    tuner (``NCCL_210_GROUPS``); torchtitan runs with the kernels and selective AC of their published configs
    (``TITAN_*``)."""
    if (mlperf := mlperf_stack(row)) is not None:  # bench/fidelity_mlperf.py
        return mlperf
    era = {"nccl": "2.10"} if row["source_group"] in NCCL_210_GROUPS else {}
    if row.get("stack_over") and row["stack"] == "megatron":  # what the run's config sets (``fidelity_nemo``)
        return {"base": "megatron", **row["stack_over"]}
    if row["source_group"] in BRIDGE_GROUPS and row["stack"] == "megatron":
        # every Megatron-Bridge recipe of the archive's rows overlaps the DP gradient reduce with backward
        # (NVIDIA-NeMo/Megatron-Bridge ddp.overlap_grad_reduce=True: v0.1.0rc3 recipes/llama/llama3_70b.py:181, v0.2.0
        # recipes/llama/llama3.py:556, recipes/gpt_oss/gpt_oss.py:287, recipes/qwen/qwen3_moe.py:314, v0.3.0
        # llama3.py:557, gpt_oss.py:290, v0.3.1-v0.4.2 llama3.py:727, v0.4.0/v0.4.2 gpt_oss.py:139)
        return {"base": "megatron", "overlap_grad_reduce": True}
    if row["source_group"] in UNFUSED_ATTENTION_GROUPS:  # Megatron-LM v2.0 (planner.specs.stack_eras): what it ran
        kernels = UNFUSED_ATTENTION_GROUPS[row["source_group"]]
        return "megatron-2020" if kernels == "fused" else {"base": "megatron-2020", "kernels": kernels}
    if row["source_group"] in MEGATRON_DEEPSPEED_GROUPS:
        return {"base": row["stack"], **era, **MEGATRON_2021_KERNELS}
    if era and row["stack"] in ("megatron", "deepspeed"):
        return {"base": row["stack"], **era}
    if row["stack"] == "torchtitan":
        over: dict[str, Any] = {}
        if "torch.compile" in row["features"] or row["source_group"] in TITAN_COMPILED_GROUPS:
            over["kernels"] = "compiled"
        if row["id"].startswith(TITAN_FUSED_NORM_RUNS):
            over["norm_kernel"] = "fused"
        if row["parallel"]["recompute"] == "selective-layer":
            over["selective_ac"] = TITAN_SELECTIVE_LAYER_K
        # what the run's commit ran (planner.specs.stack_titan): 9dec370's train.py:285-292 calls pp_schedule.step() of
        # torch 1963fc8 (2024-12), before pytorch#153383: every micro-batch's outputs kept (``pp_kept_outputs``)
        base = TITAN_ERAS.get(row["source_group"], "torchtitan")
        return {"base": base, **over} if over else base
    if row["stack"] == "composer-fsdp":
        # llm-foundry's MPT: eager PyTorch under FSDP (the bundled runtime's pattern) with its default loss, flash-attn's
        # fused cross-entropy over the 16-bit logits (llmfoundry/models/mpt/modeling_mpt.py at 4952183, loss_fn
        # 'fused_crossentropy'), and the attention of its benchmark sweeps: scripts/train/benchmarking/
        # submit_benchmarks.py's default attn_impl was 'triton' (FlashAttention in Triton) at every commit of the
        # tables (300cc5c58 of 2023-05 to 5e85bd62d of 2024-01); 'flash' only from 495218376 (2024-04). PyTorch FSDP1
        # without no_sync: Composer 0.16.4–0.17.2 (the llm-foundry pins of the tables) applies no_sync only to a
        # DistributedDataParallel model (composer/trainer/dist_strategy.py ddp_sync_context), so every micro-batch
        # gathers and reduce-scatters (planner.workload.accumulation "fsdp1")
        # gradient reduction in the dtype of the table's "MP Mode" (composer/trainer/mosaic_fsdp_utils.py
        # get_mixed_precision, v0.16.4:87-94, v0.17.2:94-101): DEFAULT reduce_dtype=float32, PURE the parameters' bf16
        pure = "PURE" in row.get("precision_as_published", "")
        # and its two train metrics over the logits after every micro-batch (planner.workload.ops.metric_bytes)
        mpt = {"base": "meshplan", "loss": "fused", "flash_kernel": "triton", "grad_accumulation": "fsdp1"}
        return mpt | {"train_metrics": 2} | ({"reduce_dtype": "param"} if pure else {})
    return row["stack"] if row["stack"] in ("megatron", "torchtitan", "deepspeed") else "meshplan"


def cp_comm_of(row: dict[str, Any]) -> str:
    """The context-parallel exchange a run used, by its stack's default: torchtitan's
    ``context_parallel_rotate_method`` "allgather" (its default in the 2024-12 benchmarks), Megatron/NeMo's
    ``cp_comm_type`` "p2p"."""
    return "all_gather" if row["stack"] == "torchtitan" else "p2p"


def request(row: dict[str, Any], gpus: dict[str, Any]) -> PlanRequest:
    row = moe_row(row)
    cl, par, b = row["cluster"], row["parallel"], row["batch"]
    n = cl["num_gpus"]
    per_node = min(cl["gpus_per_node"] or 8, n)
    return PlanRequest(
        model=model_spec(row),
        cluster=ClusterSpec(
            gpu=gpu_spec(cl["gpu"], gpus),
            num_nodes=n // per_node,
            gpus_per_node=per_node,
            inter_node_bandwidth=CLUSTER_NETWORK.get(row["source_group"]),
        ),
        training=TrainingSpec(
            global_batch_size=b["global"],
            seq_len=row["seq_len"],
            precision=row["precision"],
            fp8_recipe=fp8_recipe(row),
            stack=stack_of(row),
        ),
        parallel=ParallelPins(
            tp=par["tp"],
            pp=par["pp"],
            dp=par["dp"],
            cp=par.get("cp") or 1,
            cp_comm=cp_comm_of(row),  # type: ignore[arg-type]
            micro_batch_size=b["micro"],
            schedule=par["schedule"],
            virtual_stages=par["virtual_stages"] if (par["virtual_stages"] or 1) > 1 else None,
            stage_layers=par.get("stage_layers"),
            recompute="selective" if par["recompute"] == "selective-layer" else par["recompute"],
            sequence_parallel=bool(par["sequence_parallel"]) and par["tp"] > 1,
            zero_stage=par["zero_stage"],
            # torchtitan's async TP (issue 24): the SP collectives pipelined with the GEMMs (parallel.tp_comm_overlap)
            # Megatron's userbuffers overlap where the run's recipe turns it on (``bridge_row``)
            tp_comm_overlap=("async-tp" in row["features"] or bool(par.get("tp_comm_overlap")))
            and bool(par["sequence_parallel"])
            and par["tp"] > 1,
            ep=par.get("ep") or None,
        ),
        options=SearchOptions(allow_tp_across_nodes=True, memory_headroom=0.0),
    )


# ------------------------------------------------------------------------------------------------
# The source's own metric


def flops_per_step(row: dict[str, Any], model: ModelSpec) -> float:
    """FLOPs of one step in the source's own accounting (a mixture of experts: the planner's, active experts)."""
    acc = row["measured"]["tflops_accounting"]
    gbs, s = row["batch"]["global"], row["seq_len"]
    if model.moe is not None:
        return model_flops_per_step(model, gbs * s, s)
    dims = dict(
        layers=model.num_layers,
        hidden=model.hidden_size,
        heads=model.num_attention_heads,
        kv_heads=model.num_kv_heads,
        ffn=model.ffn_hidden_size,
        vocab=model.vocab_size,
        gated=model.activation == "swiglu",
    )
    if acc in ("megatron-recompute", "megatron-model"):
        return accounting.megatron_flops(sequences=gbs, seq_len=s, recompute=acc == "megatron-recompute", **dims)
    if acc in ("torchtitan", "torchtitan-all-params"):
        body, embedding = accounting.decoder_params(tied=model.tie_embeddings, **dims)
        per_token = accounting.torchtitan_flops_per_token(
            params=body + (embedding if acc == "torchtitan-all-params" else 0),
            layers=model.num_layers,
            hidden=model.hidden_size,
            seq_len=s,
        )
        return per_token * gbs * s
    raise ValueError(f"no FLOP accounting for {acc!r}")


@dataclass
class Result:
    id: str
    group: str
    metric: str
    measured: float
    predicted: float
    error: float  # (predicted - measured) / measured, with the built-in residuals (the planner as shipped)
    physics_error: float  # the same with identity residuals
    measured_eff: float  # fraction of peak in the source's FLOP count
    predicted_eff: float
    step_time_s: float
    measured_step_time_s: float
    peak_memory_gib: float
    measured_peak_gib: float | None
    fits: bool
    breakdown: dict[str, float]
    losgo_error: float | None = None  # by the residual table refitted without the run's source group


def evaluate(row: dict[str, Any], gpus: dict[str, Any]) -> Result:
    row = mlperf_row(row)  # the MLPerf rows' training-only figure (bench/fidelity_mlperf.py)
    req = request(row, gpus)
    plan = estimate_plan(req)
    est = plan.estimate
    model = plan.model
    n = row["cluster"]["num_gpus"]
    gbs, s = row["batch"]["global"], row["seq_len"]
    flops = flops_per_step(row, model)
    gpu = plan.cluster.gpu
    assert isinstance(gpu, GpuSpec)
    peak = gpu.peak_flops(moe_row(row)["precision"]) / 1e12
    m = row["measured"]
    metric = m["metric"]
    if model.moe is not None and m["tokens_per_s_per_gpu"] is not None:  # the dense FLOP accounting does not apply
        metric = "tokens_per_s_per_gpu"
    step = est.step_time_s
    if metric == "tflops_per_gpu":
        measured = float(m["tflops_per_gpu"])
        predicted = accounting.tflops_per_gpu(flops, step, n)
        measured_step = accounting.step_time_from_tflops(flops, measured, n)
    else:
        measured = float(m["tokens_per_s_per_gpu"])
        predicted = accounting.tokens_per_s_per_gpu(gbs * s, step, n)
        measured_step = gbs * s / (measured * n)
    physics_step = predict_step_time(req, Residuals())
    tflops_meas = accounting.tflops_per_gpu(flops, measured_step, n)
    tflops_pred = accounting.tflops_per_gpu(flops, step, n)
    return Result(
        id=row["id"],
        group=row["source_group"],
        metric=metric,
        measured=measured,
        predicted=predicted,
        error=(predicted - measured) / measured,
        physics_error=measured_step / physics_step - 1,  # the metric is ∝ 1 / step time
        measured_eff=accounting.mfu(tflops_meas, peak),
        predicted_eff=accounting.mfu(tflops_pred, peak),
        step_time_s=step,
        measured_step_time_s=measured_step,
        peak_memory_gib=est.peak_memory_gib,
        measured_peak_gib=m["peak_memory_gib"],
        fits=est.fits,
        breakdown=est.breakdown.model_dump(),
    )


# ------------------------------------------------------------------------------------------------
# Left free (issue 27 §4)

#: A free plan claimed faster than the experts' configuration by more than this wants its mechanism explained.
FREE_CLAIM = 1.15


@dataclass
class Free:
    id: str
    stack: str
    expert_step_s: float
    free_step_s: float | None
    speedup: float | None
    status: str
    configuration: str
    #: the free plan's time breakdown (``TimeBreakdown``), beside the experts' in ``Result.breakdown``
    breakdown: dict[str, float] | None = None


def free_plan(row: dict[str, Any], gpus: dict[str, Any], expert_step_s: float) -> Free:
    """The run planned with nothing pinned, under its own stack, against the experts' configuration."""
    req = request(row, gpus).model_copy(update={"parallel": ParallelPins(), "options": SearchOptions(), "top_k": 1})
    stack = str(req.training.stack if isinstance(req.training.stack, str) else req.training.stack.base)
    resp = search_plan(req)
    if not resp.plans:
        return Free(row["id"], stack, expert_step_s, None, None, resp.solver.status, "no plan")
    best = resp.plans[0]
    step = best.estimate.step_time_s
    configuration = describe(best.parallel)
    speedup = expert_step_s / step
    breakdown = best.estimate.breakdown.model_dump()
    return Free(row["id"], stack, expert_step_s, step, speedup, resp.solver.status, configuration, breakdown)


def free_report(frees: list[Free]) -> str:
    lines = [
        "",
        "Left free under each run's stack (issue 27 §4): the experts' step ÷ the free plan's, same cost model",
        f"{'run':<52} {'stack':<10} {'expert s':>9} {'free s':>9} {'speedup':>8}  status    free configuration",
    ]
    for f in frees:
        free = f"{f.free_step_s:9.4g}" if f.free_step_s is not None else f"{'—':>9}"
        speed = f"{f.speedup:7.3f}×" if f.speedup is not None else f"{'—':>8}"
        mark = "  ← explain" if f.speedup is not None and f.speedup > FREE_CLAIM else ""
        lines.append(
            f"{f.id:<52} {f.stack:<10} {f.expert_step_s:9.4g} {free} {speed}  {f.status:<9} {f.configuration}{mark}"
        )
    claims = [f for f in frees if f.speedup is not None and f.speedup > FREE_CLAIM]
    lines.append(f"claims above {FREE_CLAIM}×: {len(claims)} of {len(frees)}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# Summary


@dataclass
class Summary:
    group: str
    expressed: int
    total: int
    mape: float
    max_error: float
    spearman: float
    physics_mape: float = math.nan  # identity residuals
    losgo_mape: float = math.nan  # leave-one-source-group-out


#: The breakdown terms of ``claims_table``, as its columns name them.
CLAIM_TERMS = (
    ("compute_s", "compute"),
    ("tp_comm_s", "TP comm"),
    ("pp_bubble_s", "bubble"),
    ("pp_p2p_s", "p2p"),
    ("dp_sync_s", "DP sync"),
    ("optimizer_s", "optimizer"),
    ("cp_comm_s", "CP comm"),
    ("ep_comm_s", "EP a2a"),
)


def claims_table(frees: list[Free], results: list[Result]) -> str:
    """The free plans claiming more than ``FREE_CLAIM`` as a markdown table (docs/validation.md, issue 27 §4): the
    claim, the free configuration and the seconds each breakdown term saves (experts' − free)."""
    by_id = {r.id: r for r in results}
    lines = [
        "| run | claim | free configuration | " + " | ".join(t for _, t in CLAIM_TERMS) + " |",
        "|---|---|---|" + "---|" * len(CLAIM_TERMS),
    ]
    for f in frees:
        if f.speedup is None or f.speedup <= FREE_CLAIM or f.breakdown is None:
            continue
        e = by_id[f.id].breakdown
        cells = []
        for key, _ in CLAIM_TERMS:
            x = e.get(key, 0.0) - f.breakdown.get(key, 0.0)
            cells.append("0" if abs(x) < 5e-4 else f"{x:+.3f}".replace("-", "−"))
        config = f.configuration.split(", stages")[0]
        lines.append(f"| {f.id} | {f.speedup:.3f} | {config} ({f.status}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _mean_abs(xs: list[float]) -> float:
    return sum(abs(x) for x in xs) / len(xs) if xs else math.nan


def summarise(group: str, results: list[Result], total: int) -> Summary:
    pred = [r.predicted for r in results]
    meas = [r.measured for r in results]
    return Summary(
        group=group,
        expressed=len(results),
        total=total,
        mape=accounting.mape(pred, meas),
        max_error=accounting.max_abs_error(pred, meas),
        spearman=accounting.spearman([r.predicted_eff for r in results], [r.measured_eff for r in results]),
        physics_mape=_mean_abs([r.physics_error for r in results]),
        losgo_mape=_mean_abs([r.losgo_error for r in results if r.losgo_error is not None])
        if results and all(r.losgo_error is not None for r in results)
        else math.nan,
    )


def cross_validate(data: dict[str, Any], results: list[Result]) -> list[str]:
    """Fill every result's ``losgo_error``; notes when the shipped table is not the one these runs give.

    LOSGO is the shipped procedure out of sample (``bench/fit_residuals.py``): the table fitted on the published runs
    it is fitted on, less the run's source group. A run that procedure does not fit (the added runs, MoE, the bundled
    runtime's) is out of sample in the shipped table already: its LOSGO error is its error."""
    sys.path.insert(0, str(ROOT / "bench"))
    import fit_residuals

    from planner.pricing import residuals_builtin

    published = set(data.get("files", {}).get(DATA.name, [row["id"] for row in data["runs"]]))
    runs = [r for r in fit_residuals.expressed_runs(data) if r.id in published]
    table = fit_residuals.fit_table(runs)
    fig = fit_residuals.figures(runs, table)
    for r in results:
        r.losgo_error = fig.losgo.get(r.id, r.error)
    fresh = {k: v[0].model_dump(include=set(v[1].free)) for k, v in table.items()}
    if fresh != residuals_builtin.ROWS:
        return [
            "planner/pricing/residuals_builtin.py is not the table these runs and this physics give "
            f"(shipped {residuals_builtin.ROWS}, refitted {fresh}): re-run python bench/fit_residuals.py"
        ]
    return []


def run(
    data: dict[str, Any], notes: list[str] | None = None
) -> tuple[list[Result], dict[str, list[str]], list[Summary]]:
    results: list[Result] = []
    skipped: dict[str, list[str]] = {}
    for row in data["runs"]:
        why = reasons_not_expressible(row)
        if not why:
            try:
                results.append(evaluate(row, data["gpus"]))
                continue
            except MeshplanError as exc:
                why = [f"the planner rejects it: {exc.field}: {exc.message}"]
        skipped[row["id"]] = why
    stale = cross_validate(data, results)
    if notes is not None:
        notes.extend(stale)
    groups: dict[str, int] = {}
    for row in data["runs"]:
        groups[row["source_group"]] = groups.get(row["source_group"], 0) + 1
    summaries = [summarise(g, [r for r in results if r.group == g], t) for g, t in groups.items()]
    summaries.append(summarise("overall", results, len(data["runs"])))
    return results, skipped, summaries


def file_summaries(results: list[Result], data: dict[str, Any]) -> list[Summary]:
    """One summary per data file (``load_all``'s ``files``), named by the file."""
    by_id = {r.id: r for r in results}
    return [
        summarise(name, [by_id[i] for i in ids if i in by_id], len(ids)) for name, ids in data.get("files", {}).items()
    ]


def _pct(x: float) -> str:
    return "   n/a" if math.isnan(x) else f"{100 * x:+6.1f}%"


def _abs_pct(x: float) -> str:
    return "  n/a" if math.isnan(x) else f"{100 * x:5.1f}%"


def _rho(x: float) -> str:
    return "  n/a" if math.isnan(x) else f"{x:5.2f}"


def report(results: list[Result], skipped: dict[str, list[str]], summaries: list[Summary], data: dict[str, Any]) -> str:
    lines = []
    rows = {r["id"]: r for r in data["runs"]}
    lines.append("Per run: the planner's estimate of the run's own configuration vs the published figure")
    lines.append(
        f"{'run':48} {'metric':9} {'measured':>9} {'predicted':>9} {'error':>7} {'physics':>7} {'LOSGO':>7} "
        f"{'MFU m/p':>11} {'step m/p s':>15} {'peak GiB m/p':>13} fits  compute/tp/bubble/dp s"
    )
    for r in results:
        unit = "TFLOP/s" if r.metric == "tflops_per_gpu" else "tok/s/GPU"
        mem = (
            f"{r.measured_peak_gib:5.1f}/{r.peak_memory_gib:5.1f}"
            if r.measured_peak_gib
            else f"  n/a/{r.peak_memory_gib:5.1f}"
        )
        b = r.breakdown
        lines.append(
            f"{r.id:48} {unit:9} {r.measured:9.1f} {r.predicted:9.1f} {_pct(r.error)} {_pct(r.physics_error)} "
            f"{_pct(math.nan if r.losgo_error is None else r.losgo_error)} {100 * r.measured_eff:4.1f}/{100 * r.predicted_eff:4.1f}% {r.measured_step_time_s:7.2f}/{r.step_time_s:7.2f} "
            f"{mem:>13} {'yes ' if r.fits else 'NO  '} "
            f"{b['compute_s']:.2f}/{b['tp_comm_s']:.2f}/{b['pp_bubble_s'] + b['pp_p2p_s']:.2f}/{b['dp_sync_s']:.2f}"
        )
    lines.append("")
    lines.append(f"Not expressible yet ({len(skipped)} of {len(rows)} runs):")
    for rid, why in skipped.items():
        lines.append(f"  {rid:48} [{rows[rid]['source_group']}] {'; '.join(why)}")
    lines.append("")
    lines.append(
        "Summary (error = predicted/measured − 1 in the source's metric; Spearman over MFU in the source's FLOP count)."
    )
    lines.append(
        "MAPE: with the built-in residuals (the planner as shipped, in-sample); physics: identity residuals; "
        "LOSGO: residuals refitted without the group"
    )
    lines.append(
        f"{'source group':28} {'expressed':>9} {'MAPE':>6} {'max':>6} {'Spearman':>8} {'physics':>7} {'LOSGO':>6}"
    )
    for s in summaries:
        lines.append(
            f"{s.group:28} {s.expressed:4d}/{s.total:<4d} {_abs_pct(s.mape)} {_abs_pct(s.max_error)} {_rho(s.spearman):>8} "
            f"{_abs_pct(s.physics_mape):>7} {_abs_pct(s.losgo_mape):>6}"
        )
    overall = summaries[-1]
    phys = [r.physics_error for r in results]
    for f in file_summaries(results, data):
        lines.append(
            f"{'file ' + f.group:28} {f.expressed:4d}/{f.total:<4d} {_abs_pct(f.mape)} {_abs_pct(f.max_error)} {_rho(f.spearman):>8} "
            f"{_abs_pct(f.physics_mape):>7} {_abs_pct(f.losgo_mape):>6}"
        )
    lines.append("")
    lines.append(
        f"Overall, physics only (identity residuals): MAPE {_abs_pct(overall.physics_mape).strip()}, "
        f"max {_abs_pct(max((abs(e) for e in phys), default=math.nan)).strip()}"
    )
    lines.append(
        f"Overall, with built-in residuals: MAPE {_abs_pct(overall.mape).strip()} in-sample, "
        f"{_abs_pct(overall.losgo_mape).strip()} leave-one-source-group-out"
    )
    mem = [r for r in results if r.measured_peak_gib]
    mem_err = [abs(r.peak_memory_gib / r.measured_peak_gib - 1) for r in mem if r.measured_peak_gib]
    no_fit = [r.id for r in results if not r.fits]
    lines.append("")
    lines.append("Targets (issue 11 §3), on the runs the model can express:")
    checks = [
        (f"MAPE ≤ {TARGET_MAPE:.0%}", f"{_abs_pct(overall.mape).strip()}", overall.mape <= TARGET_MAPE),
        (f"max |error| ≤ {TARGET_MAX:.0%}", f"{_abs_pct(overall.max_error).strip()}", overall.max_error <= TARGET_MAX),
        (f"Spearman ≥ {TARGET_SPEARMAN}", _rho(overall.spearman).strip(), overall.spearman >= TARGET_SPEARMAN),
        (
            f"leave-one-source-group-out MAPE ≤ {TARGET_LOSGO:.0%} (next to the in-sample {_abs_pct(overall.mape).strip()})",
            _abs_pct(overall.losgo_mape).strip(),
            overall.losgo_mape <= TARGET_LOSGO,
        ),
        (
            f"peak memory within {TARGET_MEMORY:.0%} where published ({len(mem)} runs)",
            ", ".join(f"{r.id}: {r.peak_memory_gib / r.measured_peak_gib - 1:+.0%}" for r in mem if r.measured_peak_gib)
            or "none published",
            bool(mem_err) and max(mem_err) <= TARGET_MEMORY,
        ),
        ("no published run predicted not to fit", f"{len(no_fit)} predicted not to fit", not no_fit),
    ]
    for name, value, ok in checks:
        lines.append(f"  {'met    ' if ok else 'NOT MET'}  {name}: {value}")
    if no_fit:
        lines.append("    predicted not to fit: " + ", ".join(no_fit))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--data",
        type=Path,
        action="append",
        default=None,
        help="a data file to read (repeatable; default: published_runs.json and added_runs.json)",
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the per-run results and summaries here")
    ap.add_argument("--free", action="store_true", help="also plan every expressed run left free (issue 27 §4)")
    ap.add_argument(
        "--claims-table", action="store_true", help="with --free: also print the claims above 1.15x as markdown"
    )
    args = ap.parse_args(argv)
    data = load_all(args.data or DATA_FILES)
    notes: list[str] = []
    results, skipped, summaries = run(data, notes)
    print(report(results, skipped, summaries, data))
    for note in notes:
        print(f"NOTE: {note}")
    frees: list[Free] = []
    if args.free:
        rows = {row["id"]: row for row in data["runs"]}
        frees = [free_plan(rows[r.id], data["gpus"], r.step_time_s) for r in results]
        print(free_report(frees))
        if args.claims_table:
            print(claims_table(frees, results))
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "results": [asdict(r) for r in results],
                    "not_expressible": skipped,
                    "summaries": [asdict(s) for s in summaries],
                    "file_summaries": [asdict(s) for s in file_summaries(results, data)],
                    **({"free": [asdict(f) for f in frees]} if args.free else {}),
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
