# meshplan export: torchtitan Python config recipe (Trainer.Config) (torchtitan 0.3.0)
# model llama3-8b on 1 node(s) × 8 h100-sxm5-80gb; plan rank 1
# tp=1 pp=2 dp=4 micro_batch_size=1 num_microbatches=16 global_batch_size=64 seq_len=4096
# schedule=1f1b virtual_stages=1 stage_layers=[16, 16]
# recompute=none sequence_parallel=false zero_stage=2 precision=bf16
# Save as meshplan_llama_train.py on PYTHONPATH, then on every node:
#   torchrun --standalone --nnodes 1 --nproc-per-node 8 -m torchtitan.train --module meshplan_llama_train --config meshplan_llama3_8b
# note: torchtitan 0.3.0 cannot capture CUDA graphs with pipeline parallelism: the recipe sets
#   training.disable_cuda_graphs = True, as its config check asks

from torchtitan.models.llama3.config_registry import llama3_8b
from torchtitan.trainer import Trainer


def meshplan_llama3_8b() -> Trainer.Config:
    """llama3-8b: meshplan plan rank 1 (1f1b)."""
    config = llama3_8b()
    p = config.parallelism
    p.tensor_parallel_degree = 1
    p.data_parallel_replicate_degree = 1
    p.data_parallel_shard_degree = 4
    p.fsdp_reshard_after_forward = 'never'
    p.pipeline_parallel_degree = 2
    p.pipeline_parallel_schedule = '1F1B'
    p.pipeline_parallel_microbatch_size = 1
    p.module_fqns_per_model_part = [
        ['tok_embeddings', 'layers.0', 'layers.1', 'layers.2', 'layers.3', 'layers.4', 'layers.5', 'layers.6', 'layers.7', 'layers.8', 'layers.9', 'layers.10', 'layers.11', 'layers.12', 'layers.13', 'layers.14', 'layers.15'],
        ['layers.16', 'layers.17', 'layers.18', 'layers.19', 'layers.20', 'layers.21', 'layers.22', 'layers.23', 'layers.24', 'layers.25', 'layers.26', 'layers.27', 'layers.28', 'layers.29', 'layers.30', 'layers.31', 'norm', 'lm_head'],
    ]
    config.training.disable_cuda_graphs = True
    config.training.local_batch_size = 16
    config.training.global_batch_size = 64
    config.training.seq_len = 4096
    config.training.mixed_precision_param = 'bfloat16'
    config.activation_checkpoint = None
    return config
