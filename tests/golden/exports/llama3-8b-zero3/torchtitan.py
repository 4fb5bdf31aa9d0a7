# meshplan export: torchtitan Python config recipe (Trainer.Config) (torchtitan 0.3.0)
# model llama3-8b on 2 node(s) × 8 h100-sxm5-80gb; plan rank 1
# tp=1 pp=1 dp=16 micro_batch_size=2 num_microbatches=4 global_batch_size=128 seq_len=4096
# schedule=1f1b virtual_stages=1 stage_layers=[32]
# recompute=full sequence_parallel=false zero_stage=3 precision=bf16
# Save as meshplan_llama_train.py on PYTHONPATH, then on every node:
#   torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint $MASTER_ADDR:29500 --rdzv-id llama-train -m torchtitan.train --module meshplan_llama_train --config meshplan_llama3_8b

from torchtitan.distributed.activation_checkpoint import FullAC
from torchtitan.models.llama3.config_registry import llama3_8b
from torchtitan.trainer import Trainer


def meshplan_llama3_8b() -> Trainer.Config:
    """llama3-8b: meshplan plan rank 1 (1f1b)."""
    config = llama3_8b()
    p = config.parallelism
    p.tensor_parallel_degree = 1
    p.data_parallel_replicate_degree = 1
    p.data_parallel_shard_degree = 16
    p.fsdp_reshard_after_forward = 'always'
    p.pipeline_parallel_degree = 1
    config.training.local_batch_size = 2
    config.training.global_batch_size = 128
    config.training.seq_len = 4096
    config.training.mixed_precision_param = 'bfloat16'
    config.activation_checkpoint = FullAC.Config()
    return config
