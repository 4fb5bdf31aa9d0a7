"""torchtitan 0.2.2 reads the ``torchtitan-toml`` export (a TOML job file) as a user runs it: its own
entry point ``ConfigManager.parse_args(["--job.config_file", PATH])`` (TOML → ``JobConfig`` dataclasses,
tyro), then what its ``Trainer.__init__`` does before it needs GPUs: ``ParallelDims`` (the degrees must
multiply to the world size), the model's train spec and flavor, ``model_args.update_from_config``, the
model built on the meta device, the pipeline schedule class by name; every module name of
``module_fqns_per_model_part`` must exist in the built model. Item: ``{"id", "path", "world_size"}``."""

from __future__ import annotations

from typing import Any

import torch
from _common import run
from torch.distributed.pipelining.schedules import PipelineScheduleMulti, get_schedule_class
from torchtitan.config.manager import ConfigManager
from torchtitan.distributed.parallel_dims import ParallelDims
from torchtitan.protocols.train_spec import get_train_spec


def check(item: dict[str, Any]) -> dict[str, Any]:
    job = ConfigManager().parse_args(["--job.config_file", item["path"]])
    par, training = job.parallelism, job.training
    dims = ParallelDims(
        dp_replicate=par.data_parallel_replicate_degree,
        dp_shard=par.data_parallel_shard_degree,
        cp=par.context_parallel_degree,
        tp=par.tensor_parallel_degree,
        pp=par.pipeline_parallel_degree,
        ep=par.expert_parallel_degree,
        etp=par.expert_tensor_parallel_degree,
        world_size=item["world_size"],
    )
    spec = get_train_spec(job.model.name)
    model_args = spec.model_args[job.model.flavor]
    model_args.update_from_config(job)
    with torch.device("meta"):
        model = spec.model_cls(model_args)
    modules = {name for name, _ in model.named_modules()}
    facts: dict[str, Any] = {
        "tp": dims.tp,
        "pp": dims.pp,
        "dp_replicate": dims.dp_replicate,
        "dp_shard": dims.dp_shard,
        "ep": dims.ep,
        "etp": dims.etp,
        "moe": any(
            name.rsplit(".", 1)[-1] in ("experts", "routed_experts") for name in modules
        ),  # routed experts built
        "fsdp_reshard_after_forward": par.fsdp_reshard_after_forward,
        "async_tp": par.enable_async_tensor_parallel,
        "local_batch_size": training.local_batch_size,
        "global_batch_size": training.global_batch_size,
        "seq_len": training.seq_len,
        "mixed_precision_param": training.mixed_precision_param,
        "activation_checkpoint": job.activation_checkpoint.mode,
        "model_layers": model_args.n_layers,
    }
    if dims.pp > 1:
        schedule = get_schedule_class(par.pipeline_parallel_schedule)
        parts = par.module_fqns_per_model_part
        missing = [name for part in parts for name in part if name not in modules]
        if missing:
            raise ValueError(f"module_fqns_per_model_part names modules the model does not have: {missing}")
        facts |= {
            "schedule": schedule.__name__,
            "looped": issubclass(schedule, PipelineScheduleMulti),
            "microbatch_size": par.pipeline_parallel_microbatch_size,
            "parts": parts,
        }
    return facts


if __name__ == "__main__":
    run(check, ["torchtitan", "torch", "tyro"])
