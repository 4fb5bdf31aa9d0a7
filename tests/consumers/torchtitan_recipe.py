"""torchtitan 0.3.0 reads the ``torchtitan`` export (a Python recipe) as a user runs it: its own
entry point ``ConfigManager.parse_args(["--module", M, "--config", F])`` (tyro parsing and
``Trainer.Config.__post_init__``'s validation), then what ``Trainer.__init__`` does before it needs
GPUs: ``ParallelDims`` from the parallelism settings (the degrees must multiply to the world size),
the model config updated from the job and built on the meta device, and for a pipeline
``_get_pipeline_metadata`` (schedule class, layer count) and each pipeline rank's stages from
``_get_pp_rank_to_stage_indices_mapping``; every module name of ``module_fqns_per_model_part`` must
exist in the built model. Item: ``{"id", "dir", "module", "config", "world_size"}``."""

from __future__ import annotations

import sys
from typing import Any

import torch
from _common import run
from torch.distributed.pipelining.schedules import PipelineScheduleMulti, get_schedule_class
from torchtitan.config.manager import ConfigManager
from torchtitan.distributed.parallel_dims import ParallelDims
from torchtitan.distributed.pipeline_parallel import _get_pipeline_metadata, _get_pp_rank_to_stage_indices_mapping


def check(item: dict[str, Any]) -> dict[str, Any]:
    if item["dir"] not in sys.path:
        sys.path.insert(0, item["dir"])
    config = ConfigManager().parse_args(["--module", item["module"], "--config", item["config"]])
    par, training = config.parallelism, config.training
    dims = ParallelDims.from_config(par, item["world_size"])
    model_config = config.model_spec.model
    model_config.update_from_config(config=config)
    with torch.device("meta"):
        model = model_config.build()
    modules = {name for name, _ in model.named_modules()}
    ac = config.activation_checkpoint
    facts: dict[str, Any] = {
        "tp": dims.tp,
        "pp": dims.pp,
        "dp_replicate": dims.dp_replicate,
        "dp_shard": dims.dp_shard,
        "ep": dims.ep,
        "moe": any(
            name.rsplit(".", 1)[-1] in ("experts", "routed_experts") for name in modules
        ),  # routed experts built
        "sequence_parallel": par.enable_sequence_parallel,
        "fsdp_reshard_after_forward": par.fsdp_reshard_after_forward,
        "async_tp": config.compile.enable_async_tensor_parallel,  # CompileConfig.__post_init__ checks compile is on
        "local_batch_size": training.local_batch_size,
        "global_batch_size": training.global_batch_size,
        "seq_len": training.seq_len,
        "mixed_precision_param": training.mixed_precision_param,
        "activation_checkpoint": None if ac is None else type(ac).__qualname__,
        "model_layers": len(model_config.layers),
    }
    if dims.pp > 1:
        schedule = get_schedule_class(par.pipeline_parallel_schedule)
        _get_pipeline_metadata(dims, par, model_config)
        parts = par.module_fqns_per_model_part
        missing = [name for part in parts for name in part if name not in modules]
        if missing:
            raise ValueError(f"module_fqns_per_model_part names modules the model does not have: {missing}")
        facts |= {
            "schedule": schedule.__name__,
            "looped": issubclass(schedule, PipelineScheduleMulti),
            "microbatch_size": par.pipeline_parallel_microbatch_size,
            "parts": parts,
            "rank_stages": [
                list(_get_pp_rank_to_stage_indices_mapping(r, dims.pp, par.pipeline_parallel_schedule, len(parts)))
                for r in range(dims.pp)
            ],
        }
    return facts


if __name__ == "__main__":
    run(check, ["torchtitan", "torch", "tyro"])
