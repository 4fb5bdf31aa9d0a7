# meshplan export: torchtitan Python config recipe (Trainer.Config) (torchtitan 0.3.0)
# model llama3-70b on 4 node(s) × 8 h100-sxm5-80gb; plan rank 1
# tp=8 pp=4 dp=1 micro_batch_size=1 num_microbatches=32 global_batch_size=32 seq_len=8192
# schedule=zbv-zero-bubble virtual_stages=2 stage_layers=[9, 10, 10, 11, 11, 10, 10, 9]
# recompute=full sequence_parallel=true zero_stage=0 precision=bf16
# Save as meshplan_llama_train.py on PYTHONPATH, then on every node:
#   torchrun --nnodes 4 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint $MASTER_ADDR:29500 --rdzv-id llama-train -m torchtitan.train --module meshplan_llama_train --config meshplan_llama3_70b
# note: torchtitan 0.3.0 cannot capture CUDA graphs with pipeline parallelism: the recipe sets
#   training.disable_cuda_graphs = True, as its config check asks

from torchtitan.distributed.activation_checkpoint import FullAC
from torchtitan.models.llama3.config_registry import llama3_70b
from torchtitan.trainer import Trainer


def meshplan_llama3_70b() -> Trainer.Config:
    """llama3-70b: meshplan plan rank 1 (zbv-zero-bubble)."""
    config = llama3_70b()
    p = config.parallelism
    p.tensor_parallel_degree = 8
    p.enable_sequence_parallel = True
    p.data_parallel_replicate_degree = 1
    p.data_parallel_shard_degree = 1
    p.pipeline_parallel_degree = 4
    p.pipeline_parallel_schedule = 'ZBVZeroBubble'
    p.pipeline_parallel_microbatch_size = 1
    p.module_fqns_per_model_part = [
        ['tok_embeddings', 'layers.0', 'layers.1', 'layers.2', 'layers.3', 'layers.4', 'layers.5', 'layers.6', 'layers.7', 'layers.8'],
        ['layers.9', 'layers.10', 'layers.11', 'layers.12', 'layers.13', 'layers.14', 'layers.15', 'layers.16', 'layers.17', 'layers.18'],
        ['layers.19', 'layers.20', 'layers.21', 'layers.22', 'layers.23', 'layers.24', 'layers.25', 'layers.26', 'layers.27', 'layers.28'],
        ['layers.29', 'layers.30', 'layers.31', 'layers.32', 'layers.33', 'layers.34', 'layers.35', 'layers.36', 'layers.37', 'layers.38', 'layers.39'],
        ['layers.40', 'layers.41', 'layers.42', 'layers.43', 'layers.44', 'layers.45', 'layers.46', 'layers.47', 'layers.48', 'layers.49', 'layers.50'],
        ['layers.51', 'layers.52', 'layers.53', 'layers.54', 'layers.55', 'layers.56', 'layers.57', 'layers.58', 'layers.59', 'layers.60'],
        ['layers.61', 'layers.62', 'layers.63', 'layers.64', 'layers.65', 'layers.66', 'layers.67', 'layers.68', 'layers.69', 'layers.70'],
        ['layers.71', 'layers.72', 'layers.73', 'layers.74', 'layers.75', 'layers.76', 'layers.77', 'layers.78', 'layers.79', 'norm', 'lm_head'],
    ]
    config.training.disable_cuda_graphs = True
    config.training.local_batch_size = 32
    config.training.global_batch_size = 32
    config.training.seq_len = 8192
    config.training.mixed_precision_param = 'bfloat16'
    config.activation_checkpoint = FullAC.Config()
    return config
