"""megatron-core 0.16.1 reads the ``megatron`` export (a bash array of ``pretrain_gpt.py`` arguments).
Megatron-LM's own argument parser (``megatron/training/arguments.py``) needs Python ≥ 3.12, so the
array is sourced with bash as a user does, and each flag becomes the megatron-core field that
Megatron-LM's ``core_transformer_config_from_args`` fills from it (``FLAGS``, ``SWITCHES``; a flag in
neither fails the check, so a new flag must be mapped here). A flag Megatron-LM builds from a list-typed
``TransformerConfig`` field takes every word up to the next flag, as its parser reads it (``nargs``:
``--recompute-modules layernorm moe_act``). Then megatron-core's own code validates:
``TransformerConfig.__post_init__`` (degrees, heads, sequence parallelism, recompute and its modules, virtual stages,
uneven first/last stages, ``PipelineParallelLayerLayout``), ``DistributedDataParallelConfig``,
``OptimizerConfig``, ``ConstantNumMicroBatchesCalculator`` (the global batch splits into micro-batches ×
data-parallel size), and the layers each (pipeline rank, virtual stage) builds
(``get_num_layers_to_build``, or the layout's own table). Item: ``{"id", "path", "world_size"}``."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import types
import typing
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from _common import run
from megatron.core import parallel_state
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator
from megatron.core.optimizer import OptimizerConfig
from megatron.core.transformer.enums import LayerType
from megatron.core.transformer.transformer_block import get_num_layers_to_build
from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig
from megatron.core.transformer.utils import is_layer_window_attention


def tuple_type(text: str) -> tuple[int, ...]:
    """``--window-size`` as Megatron-LM's ``tuple_type`` reads it (core_v0.16.1 arguments.py): "a,b" or "(a,b)"."""
    return tuple(int(i) for i in text.strip("()").split(","))


def moe_freq(text: str) -> int | list[int]:
    """``--moe-layer-freq`` as Megatron-LM's ``moe_freq_type`` reads it: an int, or a pattern of digits, ``[]()+*,``
    evaluated as a Python list (``_eval_pattern``)."""
    if "[" not in text:
        return int(text)
    if re.search(r"[^,\d\[\]\(\)\+\*]", text):
        raise ValueError(f"Invalid pattern: {text}")
    return eval(text)  # noqa: S307 (Megatron-LM's own reading; the characters are checked above)


#: flag → (config, field, type). Configs: tc = TransformerConfig, ddp = DistributedDataParallelConfig,
#: opt = OptimizerConfig, batch = the micro-batch calculator, model = GPT model/training level (read
#: by Megatron-LM outside these configs; kept as facts).
FLAGS: dict[str, tuple[str, str, Callable[[str], Any]]] = {
    "--num-layers": ("tc", "num_layers", int),
    "--hidden-size": ("tc", "hidden_size", int),
    "--ffn-hidden-size": ("tc", "ffn_hidden_size", int),
    "--num-attention-heads": ("tc", "num_attention_heads", int),
    "--num-query-groups": ("tc", "num_query_groups", int),
    "--tensor-model-parallel-size": ("tc", "tensor_model_parallel_size", int),
    "--pipeline-model-parallel-size": ("tc", "pipeline_model_parallel_size", int),
    "--num-virtual-stages-per-pipeline-rank": ("tc", "virtual_pipeline_model_parallel_size", int),
    "--decoder-first-pipeline-num-layers": ("tc", "num_layers_in_first_pipeline_stage", int),
    "--decoder-last-pipeline-num-layers": ("tc", "num_layers_in_last_pipeline_stage", int),
    "--pipeline-model-parallel-layout": ("tc", "pipeline_model_parallel_layout", str),
    "--microbatch-group-size-per-virtual-pipeline-stage": ("tc", "microbatch_group_size_per_vp_stage", int),
    "--recompute-granularity": ("tc", "recompute_granularity", str),
    "--recompute-method": ("tc", "recompute_method", str),
    "--recompute-num-layers": ("tc", "recompute_num_layers", int),
    "--recompute-modules": ("tc", "recompute_modules", str),  # several values: ``nargs``
    "--normalization": ("tc", "normalization", str),
    "--data-parallel-sharding-strategy": ("ddp", "data_parallel_sharding_strategy", str),
    "--optimizer": ("opt", "optimizer", str),
    "--micro-batch-size": ("batch", "micro_batch_size", int),
    "--global-batch-size": ("batch", "global_batch_size", int),
    "--seq-length": ("model", "seq_length", int),
    "--max-position-embeddings": ("model", "max_position_embeddings", int),
    "--position-embedding-type": ("model", "position_embedding_type", str),
    "--ckpt-format": ("model", "ckpt_format", str),
    # mixtures of experts (Megatron-LM core_transformer_config_from_args: num_moe_experts = args.num_experts, the
    # rest by name) and attention shapes
    "--num-experts": ("tc", "num_moe_experts", int),
    "--moe-router-topk": ("tc", "moe_router_topk", int),
    "--moe-ffn-hidden-size": ("tc", "moe_ffn_hidden_size", int),
    "--expert-model-parallel-size": ("tc", "expert_model_parallel_size", int),
    "--expert-tensor-parallel-size": ("tc", "expert_tensor_parallel_size", int),
    "--moe-token-dispatcher-type": ("tc", "moe_token_dispatcher_type", str),
    "--moe-shared-expert-intermediate-size": ("tc", "moe_shared_expert_intermediate_size", int),
    "--moe-layer-freq": ("tc", "moe_layer_freq", moe_freq),
    "--moe-router-score-function": ("tc", "moe_router_score_function", str),
    "--moe-router-num-groups": ("tc", "moe_router_num_groups", int),
    "--moe-router-group-topk": ("tc", "moe_router_group_topk", int),
    "--moe-expert-capacity-factor": ("tc", "moe_expert_capacity_factor", float),
    "--moe-token-drop-policy": ("tc", "moe_token_drop_policy", str),
    "--kv-channels": ("tc", "kv_channels", int),
    "--softmax-type": ("tc", "softmax_type", str),
    "--q-lora-rank": ("tc", "q_lora_rank", int),
    "--kv-lora-rank": ("tc", "kv_lora_rank", int),
    "--qk-head-dim": ("tc", "qk_head_dim", int),
    "--qk-pos-emb-head-dim": ("tc", "qk_pos_emb_head_dim", int),
    "--v-head-dim": ("tc", "v_head_dim", int),
    # sliding windows (core_v0.16.1 arguments.py: --window-size tuple_type, --window-attn-skip-freq moe_freq_type)
    "--window-size": ("tc", "window_size", tuple_type),
    "--window-attn-skip-freq": ("tc", "window_attn_skip_freq", moe_freq),
}
#: switch → the fields it sets.
SWITCHES: dict[str, list[tuple[str, str, Any]]] = {
    "--group-query-attention": [("model", "group_query_attention", True)],
    "--sequence-parallel": [("tc", "sequence_parallel", True)],
    "--swiglu": [("tc", "gated_linear_unit", True), ("tc", "activation_func", F.silu)],
    "--disable-bias-linear": [("tc", "add_bias_linear", False)],
    "--add-qkv-bias": [("tc", "add_qkv_bias", True)],
    "--untie-embeddings-and-output-weights": [("model", "untie_embeddings_and_output_weights", True)],
    "--use-distributed-optimizer": [
        ("ddp", "use_distributed_optimizer", True),
        ("opt", "use_distributed_optimizer", True),
    ],
    "--use-megatron-fsdp": [("ddp", "use_megatron_fsdp", True)],
    "--bf16": [("tc", "bf16", True), ("tc", "params_dtype", torch.bfloat16), ("opt", "bf16", True)],
    "--fp16": [("tc", "fp16", True), ("tc", "params_dtype", torch.float16), ("opt", "fp16", True)],
    "--moe-grouped-gemm": [("tc", "moe_grouped_gemm", True)],
    "--moe-pad-expert-input-to-capacity": [("tc", "moe_pad_expert_input_to_capacity", True)],
    "--qk-layernorm": [("tc", "qk_layernorm", True)],
    "--multi-latent-attention": [("tc", "multi_latent_attention", True)],
}


#: argparse's test for a word that is a value although it starts with "-" (a parser with no option that looks like a
#: negative number, as Megatron-LM's: ``argparse.ArgumentParser._negative_number_matcher``)
_NEGATIVE = re.compile(r"^-\d+$|^-\d*\.\d+$")


def nargs(kind: str, name: str) -> str | None:
    """How many words the flag of field ``name`` takes, as Megatron-LM core_v0.16.1 builds it: its
    ``_add_network_size_args`` makes a flag of each ``TransformerConfig`` field (arguments.py:1621,
    ``ArgumentGroupFactory``), and a field typed ``list[X]`` or ``Optional[list[X]]`` gets ``nargs="+"``
    (argument_utils.py:112-122) — ``recompute_modules: Optional[List[str]]`` (transformer_config.py:411) gives
    ``--recompute-modules`` one or more values. (core_v0.13-0.15, and the Megatron-LM main@000c4ac2 the export names,
    declare it by hand, arguments.py:2091 ``nargs='*'``: the same words for the export's non-empty list.) Read here
    from the installed megatron-core's own field types, so a field turned into a list is read as one."""
    if kind != "tc":
        return None
    hint = _TC_HINTS.get(name)
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 2 and args[1] is type(None):
        hint = args[0]
    return "+" if typing.get_origin(hint) is list else None


def _field_hints() -> dict[str, Any]:
    try:
        return typing.get_type_hints(TransformerConfig)
    except Exception:  # a name megatron-core only imports for type checking: the field's own annotation
        return {f.name: f.type for f in dataclasses.fields(TransformerConfig)}


_TC_HINTS = _field_hints()


def megatron_args(path: str) -> list[str]:
    """The array as a user's script sees it after ``source``."""
    out = subprocess.run(
        ["bash", "-c", 'source "$1" && printf "%s\\0" "${MESHPLAN_MEGATRON_ARGS[@]}"', "_", path],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return out.split("\0")[:-1]


def configs(args: list[str]) -> dict[str, dict[str, Any]]:
    cfg: dict[str, dict[str, Any]] = {"tc": {}, "ddp": {}, "opt": {}, "batch": {}, "model": {}}
    i = 0
    while i < len(args):
        flag = args[i]
        if flag in FLAGS:
            kind, name, typ = FLAGS[flag]
            if nargs(kind, name) == "+":  # argparse: the words up to the next one that looks like a flag
                end = i + 1
                while end < len(args) and not (args[end].startswith("-") and not _NEGATIVE.match(args[end])):
                    end += 1
                if end == i + 1:
                    raise ValueError(f"argument {flag}: expected at least one argument")  # argparse's own words
                cfg[kind][name] = [typ(word) for word in args[i + 1 : end]]
                i = end
            else:
                cfg[kind][name] = typ(args[i + 1])
                i += 2
        elif flag in SWITCHES:
            for kind, name, value in SWITCHES[flag]:
                cfg[kind][name] = value
            i += 1
        else:
            raise ValueError(
                f"{flag}: no megatron-core field is mapped for this flag (tests/consumers/megatron_core.py)"
            )
    if not cfg["model"].get("group_query_attention"):
        cfg["tc"].pop("num_query_groups", None)  # Megatron-LM reads --num-query-groups only with GQA
    # Megatron-LM: the pipeline's p2p dtype is the parameters' dtype.
    cfg["tc"]["pipeline_dtype"] = cfg["tc"].get("params_dtype", torch.float32)
    return cfg


def check(item: dict[str, Any]) -> dict[str, Any]:
    cfg = configs(megatron_args(item["path"]))
    # Megatron-LM builds an MLATransformerConfig for --multi-latent-attention (core_transformer_config_from_args)
    tc = (MLATransformerConfig if cfg["tc"].get("multi_latent_attention") else TransformerConfig)(**cfg["tc"])
    ddp = DistributedDataParallelConfig(**cfg["ddp"])
    OptimizerConfig(**cfg["opt"])
    tp, pp = tc.tensor_model_parallel_size, tc.pipeline_model_parallel_size
    if item["world_size"] % (tp * pp):
        raise ValueError(f"world size {item['world_size']} is not a multiple of tp × pp = {tp * pp}")
    dp = item["world_size"] // (tp * pp)
    calc = ConstantNumMicroBatchesCalculator(
        cfg["batch"]["global_batch_size"], cfg["batch"]["micro_batch_size"], dp, False, 0
    )
    layout = tc.pipeline_model_parallel_layout
    vp = tc.virtual_pipeline_model_parallel_size or 1
    parallel_state.set_virtual_pipeline_model_parallel_world_size(vp if vp > 1 else None)
    try:
        chunks = []  # layers of each model chunk, in chunk order vp_stage × pp + pp_rank
        for v in range(vp):
            for r in range(pp):
                if layout is not None:
                    chunks.append(layout.get_num_layers_to_build(layer_type=LayerType.decoder, vp_stage=v, pp_rank=r))
                else:
                    chunks.append(get_num_layers_to_build(tc, vp_stage=v if vp > 1 else None, pp_rank=r))
    finally:
        parallel_state.set_virtual_pipeline_model_parallel_world_size(None)
    return {
        "tp": tp,
        "pp": pp,
        "dp": dp,
        "virtual_stages": vp,
        "chunk_layers": chunks,
        "num_microbatches": calc.get(),
        "sequence_parallel": tc.sequence_parallel,
        "recompute_granularity": tc.recompute_granularity,
        "recompute_method": tc.recompute_method,
        "recompute_modules": tc.recompute_modules,  # ["core_attn"] where none is given (__post_init__)
        "params_dtype": str(tc.params_dtype),
        "use_distributed_optimizer": ddp.use_distributed_optimizer,
        "data_parallel_sharding_strategy": ddp.data_parallel_sharding_strategy,
        "num_layers": tc.num_layers,
        "microbatch_group_size_per_vp_stage": tc.microbatch_group_size_per_vp_stage,
        "num_moe_experts": tc.num_moe_experts,
        "moe_router_topk": tc.moe_router_topk,
        "moe_ffn_hidden_size": tc.moe_ffn_hidden_size,
        "expert_model_parallel_size": tc.expert_model_parallel_size,
        "expert_tensor_parallel_size": tc.expert_tensor_parallel_size,
        "moe_grouped_gemm": tc.moe_grouped_gemm,
        "moe_token_dispatcher_type": tc.moe_token_dispatcher_type,
        "moe_shared_expert_intermediate_size": tc.moe_shared_expert_intermediate_size,
        "moe_layer_freq": tc.moe_layer_freq,
        "moe_router_score_function": tc.moe_router_score_function,
        "moe_expert_capacity_factor": tc.moe_expert_capacity_factor,
        "moe_token_drop_policy": tc.moe_token_drop_policy,
        "moe_pad_expert_input_to_capacity": tc.moe_pad_expert_input_to_capacity,
        "kv_channels": tc.kv_channels,
        "qk_layernorm": tc.qk_layernorm,
        "multi_latent_attention": tc.multi_latent_attention,
        "window_size": list(tc.window_size) if tc.window_size else None,
        # which layers megatron-core gives the window (its own rule, 1-indexed layer numbers)
        "window_layers": [
            is_layer_window_attention(tc.window_size, tc.window_attn_skip_freq, i + 1) for i in range(tc.num_layers)
        ],
    }


if __name__ == "__main__":
    run(check, ["megatron-core", "torch"])
