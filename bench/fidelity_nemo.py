"""The NeMo 24.07 DGX-H100 FP8 pretraining rows (source groups ``nemo-2407``, ``nemo-2412``) as their configs ran them.

The table (Model, #-GPUs, GBS, MBS, Sequence Length, TP, PP, CP, VP, Tokens / sec / GPU, Model TFLOP / sec / GPU)
states no architecture, recomputation, sequence parallelism, TP overlap or optimizer. ``nemo_row`` fills them from
NVIDIA's own configs of the container's era, each value in the row's ``assumed`` with its file:line at a named tag
(the shape ``bench_fidelity.bridge_row`` gives the Megatron-Bridge rows).

Which container, which system (both groups):
* ``nemo-2407``: NVIDIA/NeMo docs/source/performance/performance_summary.md as added by 4c73f77670 ("24.07 perf
  (#10094)", 2024-08-14): lines 8-9 "Container: NeMo24.07", "System: DGX-H100".
* ``nemo-2412``: the 24.12 user guide's table is, number for number, the revision of the same file by 8e3d65dcfe
  ("24.07 perf numbers (#10253)", 2024-09-09; e.g. GPT3-5B 23406 tok/s, 765 TFLOP/s; Nemotron-340B 326, 686): its
  lines 8-9 still read "Container: NeMo24.07", "System: DGX-H100". So these rows ran the 24.07 container on DGX-H100
  too (the 24.12 page republished them): the GPU is confirmed, and the recipe is the 24.07 one below.

The recipe: NVIDIA/NeMo-Framework-Launcher tag 24.07 (8325688d, 2024-08-01) launcher_scripts/conf/training/<family>/
<size>.yaml, the NeMo 1.0 (Hydra) configs of that release, run by NeMo r2.0.0rc1 (nemo/package_info.py 2.0.0rc1).
The table's own mapping (TP/PP/CP/VP/MBS/GBS) overrides the config's where they differ (noted per row); the config
fills only what the table leaves out. Where the table's mapping differs, the later launcher tag that adopted it is
cited too (24.09, 35e43939, for GPT3-175B and Llama 3 70B VP; 24.12 for Nemotron-340B PP 8 / VP 12): the filled
settings are the same there.

Architectures: the launcher configs (layers, hidden, ffn, heads, query groups) with NeMo's defaults
(examples/nlp/language_modeling/conf/megatron_gpt_config.yaml at r2.0.0rc1: gelu, layernorm, biases, learned
positions, tied embeddings for the GPT3 configs that set none of these); the Nemotron sizes also in NeMo v2.1.0
nemo/collections/llm/gpt/model/nemotron.py:79-122. Vocabularies are the tokenizers' (GPT2BPETokenizer 50257; Llama 2
sentencepiece 32000; Llama 3 128256; Nemotron's 256k sentencepiece, 256000), padded as the run pads them
(``padded_vocab``: make_vocab_size_divisible_by 128 × TP, NeMo r2.0.0rc1 megatron_base_model.py:582-598, so that the
embedding and the LM head split over TP; GPT3's 50257 is 50432 at TP 2, 50688 at TP 4). Every architecture reproduces the table's own arithmetic:
Model TFLOP/s ÷ tokens/s equals Megatron's model FLOPs per token of the filled shape within 0.15 % on all 24 rows
(tests/test_fidelity_nemo.py).

Nemotron (squared-ReLU MLP, LayerNorm1p, RoPE on half the head, no biases, untied embeddings: nemotron_*.yaml) is
priced as the planner's GPT family with untied embeddings: the same two-GEMM (non-gated) MLP and LayerNorm cost;
learned positions (4096·h parameters, < 0.3 %) and biases (h per linear) that Nemotron does not have; squared-ReLU's
elementwise cost as GELU's.
"""

from __future__ import annotations

from typing import Any

#: Source groups this module translates.
NEMO_GROUPS = ("nemo-2407", "nemo-2412")
LAUNCHER = "NVIDIA/NeMo-Framework-Launcher 24.07 (8325688d) launcher_scripts/conf/training/"
TABLE_2412 = (
    "NVIDIA/NeMo 8e3d65dcfe docs/source/performance/performance_summary.md:8-9,13-24 ('24.07 perf numbers (#10253)': "
    "the same numbers under 'Container: NeMo24.07', 'System: DGX-H100')"
)
NEMO_DEFAULTS = "NVIDIA/NeMo r2.0.0rc1 examples/nlp/language_modeling/conf/megatron_gpt_config.yaml"
FP8 = (
    "training.fp8_recipe: delayed (NeMo r2.0.0rc1 megatron_gpt_model.py:197 builds TE DelayedScaling from the fp8_* "
    "keys, amax history 1024 / max in the GPT3 and Nemotron configs; NeMo 24.07 has no other FP8 recipe)"
)

_GPT3 = "GPT2BPETokenizer (vocab 50257); gelu, layernorm, tied embeddings: NeMo defaults (" + NEMO_DEFAULTS
_GPT3 += ":99,107,115)"
_LLAMA2 = "sentencepiece llama_tokenizer.model (vocab 32000, meta-llama/Llama-2-7b-hf config.json vocab_size)"
_LLAMA3 = "huggingface meta-llama/Meta-Llama-3-* tokenizer (vocab 128256, meta-llama/Meta-Llama-3-8B config.json)"
_NEMOTRON = (
    "sentencepiece 256k (nemotron_340b.yaml:97 nemotron_2_256k.model; vocab 256000); layernorm1p, squared-relu, "
    "untied embeddings"
)

#: Per table model name: (launcher config, its architecture, the lines stating it, the settings the table leaves out
#: with their lines). ``ub``: ``ub_tp_comm_overlap`` (Transformer Engine userbuffers); ``sp``: ``sequence_parallel``;
#: ``recompute``: ``activations_checkpoint_granularity`` (null: none; Llama 2's ``method: block`` with
#: ``num_layers: 0`` recomputes nothing either); ``dropout``: ``hidden_dropout`` / ``attention_dropout`` (0.1 in the
#: GPT3 configs, 0.0 elsewhere); every config runs ``optim.name: distributed_fused_adam`` with
#: ``overlap_grad_sync: true`` (line ``opt``); ``grads``: its ``optim.grad_sync_dtype`` (the dtype of apex's gradient
#: buffer and reduce-scatter, ``GRAD_SYNC``); ``optim_dtype``: ``optim.dtype`` where a config sets it (``OPTIM_DTYPE``).
NEMO_CONFIGS: dict[str, dict[str, Any]] = {
    "GPT3-5B": {
        "file": "gpt3/5b.yaml",
        "model": {"family": "gpt", "layers": 24, "hidden": 4096, "heads": 32, "kv_heads": 32, "ffn": 16384},
        "vocab": 50257,
        "arch": f"69-72 (24 layers, 4096, ffn 4·h, 32 heads); 114 {_GPT3}",
        "sp": (False, 106),
        "recompute": ("none", 93),
        "ub": (False, 149),
        "dropout": (True, "74-75"),
        "grads": "bf16",
        "opt": "170-172",
    },
    "GPT3-20B": {
        "file": "gpt3/20b.yaml",
        "model": {"family": "gpt", "layers": 44, "hidden": 6144, "heads": 48, "kv_heads": 48, "ffn": 24576},
        "vocab": 50257,
        "arch": f"69-72 (44 layers, 6144, ffn 4·h, 48 heads); 114 {_GPT3}",
        "sp": (True, 106),
        "recompute": ("none", 93),
        "ub": (True, 149),
        "dropout": (True, "74-75"),
        "grads": "bf16",
        "opt": "171-173",
    },
    "GPT3-175B": {
        "file": "gpt3/175b.yaml",
        "model": {"family": "gpt", "layers": 96, "hidden": 12288, "heads": 96, "kv_heads": 96, "ffn": 49152},
        "vocab": 50257,
        "arch": f"69-72 (96 layers, 12288, ffn 4·h, 96 heads); 114 {_GPT3}",
        "sp": (True, 106),
        "recompute": ("none", 99),
        "ub": (False, 149),
        "dropout": (True, "74-75"),
        "grads": "bf16",
        "opt": "171-173",
        "mapping": "the config's VP 12 (line 64) is 6 in the table; launcher 24.09 (35e43939) 175b.yaml:64 has VP 6 "
        "with the same SP, recompute and ub settings",
    },
    "LLAMA2-7B": {
        "file": "llama/llama2_7b.yaml",
        "model": {"family": "llama", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 32, "ffn": 11008},
        "vocab": 32000,
        "arch": f"65-68, 76, 84, 93 (32 layers, 4096, ffn 11008, 32 heads, rmsnorm, swiglu, untied); {_LLAMA2}",
        "sp": (False, 126),
        "recompute": ("none", 121),
        "ub": (False, 138),
        "dropout": (False, "71-73"),
        "grads": "bf16",
        "opt": "150-157",
    },
    "LLAMA2-13B": {
        "file": "llama/llama2_13b.yaml",
        "model": {"family": "llama", "layers": 40, "hidden": 5120, "heads": 40, "kv_heads": 40, "ffn": 13824},
        "vocab": 32000,
        "arch": f"65-68, 76, 84, 93 (40 layers, 5120, ffn 13824, 40 heads, rmsnorm, swiglu, untied); {_LLAMA2}",
        "sp": (False, 126),
        "recompute": ("none", 121),
        "ub": (False, 136),
        "dropout": (False, "71-73"),
        "grads": "bf16",
        "opt": "150-157",
    },
    "LLAMA2-70B": {
        "file": "llama/llama2_70b.yaml",
        "model": {"family": "llama", "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "ffn": 28672},
        "vocab": 32000,
        "arch": f"64-68, 76, 84, 93 (80 layers, 8192, ffn 28672, 64 heads, 8 query groups, rmsnorm, swiglu, "
        f"untied); {_LLAMA2}",
        "sp": (True, 126),
        "recompute": ("none", 121),
        "ub": (True, 136),
        "dropout": (False, "71-73"),
        "grads": "bf16",
        "opt": "151-158",
    },
    "Nemotron-8B": {
        "file": "nemotron/nemotron_8b.yaml",
        "model": {"family": "gpt", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 32, "ffn": 16384},
        "vocab": 256000,
        "arch": f"67-70, 78, 87, 96, 140 (32 layers, 4096, ffn 16384, 32 heads, MHA); {_NEMOTRON}",
        "sp": (True, 130),
        "recompute": ("none", 125),
        "ub": (True, 158),
        "dropout": (False, "73-75"),
        "grads": "fp32",
        "opt": "171-173",
    },
    "Nemotron-22B": {
        "file": "nemotron/nemotron_22b.yaml",
        "model": {"family": "gpt", "layers": 40, "hidden": 6144, "heads": 48, "kv_heads": 48, "ffn": 24576},
        "vocab": 256000,
        "arch": f"67-70, 78, 87, 96, 140 (40 layers, 6144, ffn 24576, 48 heads, MHA); {_NEMOTRON}",
        "sp": (True, 130),
        "recompute": ("none", 125),
        "ub": (True, 158),
        "dropout": (False, "73-75"),
        "grads": "fp32",
        "opt": "173-176",
    },
    "Nemotron-340B": {
        "file": "nemotron/nemotron_340b.yaml",
        "model": {"family": "gpt", "layers": 96, "hidden": 18432, "heads": 96, "kv_heads": 8, "ffn": 73728},
        "vocab": 256000,
        "arch": f"65-68, 76, 85, 93, 137 (96 layers, 18432, ffn 4·h, 96 heads, 8 query groups); {_NEMOTRON}",
        "sp": (True, 127),
        "recompute": ("selective", 122),
        "ub": (False, 156),
        "dropout": (False, "71-73"),
        "grads": "bf16",
        "optim_dtype": ("bf16", "161-162"),
        "opt": "159-163",
        "mapping": "the config's PP 12 / VP 8 (lines 61-62) are PP 8 / VP 12 in the table; launcher 24.12 "
        "nemotron_340b.yaml:60-62 has TP 8, PP 8, VP 12 with the same selective recompute (:122) and SP (:127); its "
        "ub_tp_comm_overlap is given twice there (:139 True, :164 False), the 24.07 config's False kept",
    },
    "LLAMA3-8B": {
        "file": "llama/llama3_8b.yaml",
        "model": {"family": "llama", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336},
        "vocab": 128256,
        "arch": f"66-70, 78, 86, 96 (32 layers, 4096, ffn 14336, 32 heads, 8 query groups); {_LLAMA3}",
        "sp": (False, 125),
        "recompute": ("none", 120),
        "ub": (False, 136),
        "dropout": (False, "73-75"),
        "grads": "bf16",
        "opt": "147-154",
    },
    "LLAMA3-70B": {
        "file": "llama/llama3_70b.yaml",
        "model": {"family": "llama", "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "ffn": 28672},
        "vocab": 128256,
        "arch": f"66-70, 78, 86, 95 (80 layers, 8192, ffn 28672, 64 heads, 8 query groups); {_LLAMA3}",
        "sp": (True, 125),
        "recompute": ("none", 120),
        "ub": (True, 136),
        "dropout": (False, "73-75"),
        "grads": "bf16",
        "opt": "149-156",
        "mapping": "the config's VP 10 (line 62) is 5 in the table; launcher 24.09 (35e43939) llama3_70b.yaml:62 has "
        "VP 5 with the same SP, recompute and ub settings",
    },
}


#: Where each config's gradient-sync dtype comes from. apex ``DistributedFusedAdam`` (810ffae
#: ``contrib/optimizers/distributed_fused_adam.py:574-575``) defaults ``grad_sync_dtype`` to ``dtype`` (fp32: NeMo
#: r2.0.0rc1 ``megatron_base_model.py:785``), and NeMo's ``main_grad`` is a view of that buffer
#: (``nemo/core/optim/distributed_adam.py:487-494``). The launcher's H100 FP8 scripts of the performance table
#: (``examples/README.md:45-60`` "Benchmark performance numbers (pretraining)", "on DGXH100, with FP8") add
#: ``+training.model.optim.grad_sync_dtype=bf16`` for every GPT3 and Llama model (``examples/training/gpt/h100/
#: {5b,20b,40b}_fp8_*.sh``, ``175b_fp8_16node.sh``, ``examples/training/llama/h100/llama{2_7b,2_13b,2_70b,3_8b,
#: 3_70b}_fp8.sh``) and not for Nemotron 8B / 22B (``examples/training/nemotron/h100/nemotron_{8b,22b}_fp8.sh``; their
#: yaml sets none: fp32); ``nemotron_340b.yaml:161`` sets bf16 itself.
GRAD_SYNC = {
    "bf16": "optim.grad_sync_dtype bf16 (launcher 24.07 FP8 example scripts' +training.model.optim.grad_sync_dtype="
    "bf16, or the config's own line): apex's contiguous gradient buffer and its reduce-scatter in bf16",
    "fp32": "optim.grad_sync_dtype unset: apex DistributedFusedAdam's default, its dtype fp32 (the FP8 example "
    "script sets none): gradients accumulated and reduce-scattered in fp32",
}
#: ``optim.dtype: bf16`` (Nemotron-340B): Adam's moments in bf16 and, that being the model's dtype under
#: ``megatron_amp_O2``, no master copy (NeMo r2.0.0rc1 ``megatron_base_model.py:796-806`` ``store_params=False``;
#: ``planner.compose.memory.param_dtype_state_bytes``).
OPTIM_DTYPE = "Adam's moments in bf16, no fp32 master weights (NeMo r2.0.0rc1 megatron_base_model.py:784-806)"


#: ``make_vocab_size_divisible_by`` of every config (e.g. gpt3/20b.yaml:79, nemotron/nemotron_340b.yaml:80).
VOCAB_DIVISIBLE_BY = 128


def padded_vocab(vocab: int, tp: int) -> int:
    """The vocabulary the run builds: NeMo r2.0.0rc1 ``megatron_base_model.py:588-598`` ``_vocab_size_with_padding``
    rounds the tokenizer's up to a multiple of ``make_vocab_size_divisible_by`` × TP (so the vocab-parallel embedding
    and LM head split evenly over TP). Since cost model 54 the planner pads on the Megatron-family presets itself
    (``planner.specs.vocab``); the rows keep stating the padded size, which padding leaves as it is."""
    multiple = VOCAB_DIVISIBLE_BY * tp
    return -(-vocab // multiple) * multiple


def nemo_fill(row: dict[str, Any]) -> dict[str, Any] | None:
    """What the NeMo 24.07 configs fix for ``row`` (a row of ``NEMO_GROUPS``): ``model`` (unless the row states
    one), ``parallel`` settings, ``cluster`` (the 24.12 page's rows), ``stack_over`` (the ``nemo-2407`` preset as
    ``base`` and its overridden fields: ``overlap_grad_reduce``, ``dropout``, ``reduce_dtype``, ``optimizer_dtype``),
    ``fp8_recipe`` and the
    ``assumed`` lines citing each; None for other rows."""
    if row["source_group"] not in NEMO_GROUPS or row["model_name"] not in NEMO_CONFIGS:
        return None
    cfg = NEMO_CONFIGS[row["model_name"]]
    where = LAUNCHER + cfg["file"]
    tp = row["parallel"]["tp"] or 1
    sp, sp_line = cfg["sp"]
    recompute, rc_line = cfg["recompute"]
    ub, ub_line = cfg["ub"]
    dropout, drop_lines = cfg["dropout"]
    fill: dict[str, Any] = {
        "parallel": {"recompute": recompute, "zero_stage": 1, "sequence_parallel": sp, "tp_comm_overlap": ub},
        "stack_over": {
            "base": "nemo-2407",
            "overlap_grad_reduce": True,
            "dropout": dropout,
            "reduce_dtype": "param" if cfg["grads"] == "bf16" else "fp32",
        },
        "fp8_recipe": "delayed",
        "assumed": [f"recipe: {where} (the table's mapping, GBS and MBS kept)"],
    }
    if cfg.get("mapping"):
        fill["assumed"].append(f"recipe mapping: {cfg['mapping']}")
    if row["model"] is None:
        fill["model"] = {**cfg["model"], "vocab": padded_vocab(cfg["vocab"], tp)}
        if row["model_name"].startswith("Nemotron"):
            fill["model"]["tie_embeddings"] = False
        fill["assumed"].append(f"model: {where}:{cfg['arch']}")
        fill["assumed"].append(
            f"model.vocab: {fill['model']['vocab']} ({cfg['vocab']} padded to a multiple of 128 × TP {tp}: "
            f"{cfg['file']} make_vocab_size_divisible_by 128; NeMo r2.0.0rc1 megatron_base_model.py:588-598)"
        )
    fill["assumed"] += [
        f"parallel.recompute: {recompute} ({cfg['file']}:{rc_line} activations_checkpoint_granularity)",
        f"parallel.sequence_parallel: {str(sp).lower()} ({cfg['file']}:{sp_line})"
        + (" (TP 1: none to do)" if tp == 1 else ""),
        f"parallel.tp_comm_overlap: {str(ub).lower()} ({cfg['file']}:{ub_line} ub_tp_comm_overlap, TE userbuffers)",
        f"parallel.zero_stage: 1 ({cfg['file']}:{cfg['opt']} optim distributed_fused_adam: apex's sharded optimizer "
        "state, gradients reduce-scattered, parameters all-gathered; overlap_grad_sync true)",
        f"stack.overlap_grad_reduce: true ({cfg['file']}:{cfg['opt']} overlap_grad_sync: true)",
        f"stack.dropout: {str(dropout).lower()} ({cfg['file']}:{drop_lines} hidden/attention dropout "
        + ("0.1: Megatron-core's bias-dropout-add and TE flash attention's dropout)" if dropout else "0.0)"),
        FP8,
        "stack: nemo-2407 (NeMo r2.0.0rc1, apex DistributedFusedAdam: planner/specs/stack_nemo.py); "
        "stack.reduce_dtype: " + ("param" if cfg["grads"] == "bf16" else "fp32") + f" ({GRAD_SYNC[cfg['grads']]})",
    ]
    if cfg.get("optim_dtype"):
        fill["stack_over"]["optimizer_dtype"] = "param"
        fill["assumed"].append(
            f"stack.optimizer_dtype: param ({cfg['file']}:{cfg['optim_dtype'][1]} optim.dtype bf16: {OPTIM_DTYPE})"
        )
    if row["source_group"] == "nemo-2412":
        fill["cluster"] = {"gpu_model": "NVIDIA H100 (DGX-H100)", "gpu": "h100-sxm5-80gb", "gpus_per_node": 8}
        fill["assumed"].append(f"cluster: DGX-H100, 8 GPUs a node; software: NeMo 24.07 container ({TABLE_2412})")
    return fill


def nemo_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with ``nemo_fill`` applied (each value also in ``assumed``); other rows unchanged."""
    fill = nemo_fill(row)
    if fill is None:
        return row
    out = {
        **row,
        "parallel": {**row["parallel"], **fill["parallel"]},
        "cluster": {**row["cluster"], **fill.get("cluster", {})},
        "assumed": list(row["assumed"]) + list(fill["assumed"]),
        "stack_over": fill["stack_over"],
        "fp8_recipe": fill["fp8_recipe"],
    }
    if "model" in fill:
        out["model"] = fill["model"]
    return out
