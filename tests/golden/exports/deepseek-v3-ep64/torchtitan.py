# meshplan export: torchtitan Python config recipe (Trainer.Config) (torchtitan 0.3.0)
# model deepseek-v3 on 32 node(s) × 8 h100-sxm5-80gb; plan rank 1
# tp=1 pp=4 dp=64 micro_batch_size=1 num_microbatches=16 global_batch_size=1024 seq_len=4096
# schedule=1f1b virtual_stages=1 stage_layers=[16, 15, 15, 15]
# recompute=none sequence_parallel=false zero_stage=1 precision=bf16
# Save as meshplan_llama_train.py on PYTHONPATH, then on every node:
#   torchrun --nnodes 32 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint $MASTER_ADDR:29500 --rdzv-id llama-train -m torchtitan.train --module meshplan_llama_train --config meshplan_deepseek_v3
# !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
# WARNING: this target cannot express all of the plan (1 issue(s)):
# WARNING: torchtitan has no optimizer-state-only sharding (ZeRO-1): exported as FSDP without
#   resharding after forward (ZeRO-2-like), which also shards gradients
# !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
# note: torchtitan 0.3.0 cannot capture CUDA graphs with pipeline parallelism: the recipe sets
#   training.disable_cuda_graphs = True, as its config check asks

from torchtitan.models.deepseek_v3.config_registry import deepseek_v3_671b
from torchtitan.trainer import Trainer


def meshplan_deepseek_v3() -> Trainer.Config:
    """deepseek-v3: meshplan plan rank 1 (1f1b)."""
    config = deepseek_v3_671b()
    p = config.parallelism
    p.tensor_parallel_degree = 1
    p.data_parallel_replicate_degree = 1
    p.data_parallel_shard_degree = 64
    p.fsdp_reshard_after_forward = 'never'
    p.expert_parallel_degree = 64
    p.pipeline_parallel_degree = 4
    p.pipeline_parallel_schedule = '1F1B'
    p.pipeline_parallel_microbatch_size = 1
    p.module_fqns_per_model_part = [
        ['tok_embeddings', 'layers.0', 'layers.1', 'layers.2', 'layers.3', 'layers.4', 'layers.5', 'layers.6', 'layers.7', 'layers.8', 'layers.9', 'layers.10', 'layers.11', 'layers.12', 'layers.13', 'layers.14', 'layers.15'],
        ['layers.16', 'layers.17', 'layers.18', 'layers.19', 'layers.20', 'layers.21', 'layers.22', 'layers.23', 'layers.24', 'layers.25', 'layers.26', 'layers.27', 'layers.28', 'layers.29', 'layers.30'],
        ['layers.31', 'layers.32', 'layers.33', 'layers.34', 'layers.35', 'layers.36', 'layers.37', 'layers.38', 'layers.39', 'layers.40', 'layers.41', 'layers.42', 'layers.43', 'layers.44', 'layers.45'],
        ['layers.46', 'layers.47', 'layers.48', 'layers.49', 'layers.50', 'layers.51', 'layers.52', 'layers.53', 'layers.54', 'layers.55', 'layers.56', 'layers.57', 'layers.58', 'layers.59', 'layers.60', 'norm', 'lm_head'],
    ]
    config.training.disable_cuda_graphs = True
    config.training.local_batch_size = 16
    config.training.global_batch_size = 1024
    config.training.seq_len = 4096
    config.training.mixed_precision_param = 'bfloat16'
    config.activation_checkpoint = None
    return config
