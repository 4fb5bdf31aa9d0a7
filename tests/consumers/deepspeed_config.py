"""DeepSpeed 0.19.8 reads the ``deepspeed`` export (config JSON) with its own ``DeepSpeedConfig``: every
key's parser, the batch assertion ``train_batch_size == micro_batch_per_gpu × gradient_accumulation_steps
× data-parallel size`` and its sanity checks, on the CPU accelerator. DeepSpeed reads the data-parallel
size from a process group, or from the model-parallel unit (``mpu``) a Megatron-style model passes it:
this process joins a one-process gloo group and passes an ``mpu`` that answers the plan's dp, the one
number of a multi-node job that one process cannot have. Item: ``{"id", "path", "dp"}``."""

from __future__ import annotations

import json
import os
import socket
from typing import Any

from _common import run


class DataParallelSize:
    """The model-parallel unit's one question DeepSpeedConfig asks: the data-parallel world size."""

    def __init__(self, dp: int) -> None:
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp


def _init() -> None:
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    with socket.socket() as s:  # a free port on loopback for the one-process group
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    import deepspeed.comm as dist

    dist.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False)


def check(item: dict[str, Any]) -> dict[str, Any]:
    from deepspeed.runtime.config import DeepSpeedConfig

    with open(item["path"]) as f:
        cfg = DeepSpeedConfig(json.load(f), mpu=DataParallelSize(item["dp"]))
    return {
        "world_size": cfg.world_size,
        "train_batch_size": cfg.train_batch_size,
        "train_micro_batch_size_per_gpu": cfg.train_micro_batch_size_per_gpu,
        "gradient_accumulation_steps": cfg.gradient_accumulation_steps,
        "zero_stage": cfg.zero_optimization_stage,
        "bf16": cfg.bfloat16_config.enabled,
        "fp16": cfg.float16_config.enabled,
        "pipeline_activation_checkpoint_interval": cfg.pipeline["activation_checkpoint_interval"],
        "autotp_size": cfg.tensor_parallel_config.autotp_size,
    }


if __name__ == "__main__":
    _init()
    run(check, ["deepspeed", "torch"])
