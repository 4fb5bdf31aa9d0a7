# meshplan export: torchtitan Python config recipe (Trainer.Config) (torchtitan 0.3.0)
# model tiny-llama on 1 node(s) × 4 a100-sxm4-40gb; plan rank 1
# tp=1 pp=2 dp=2 micro_batch_size=2 num_microbatches=4 global_batch_size=16 seq_len=128
# schedule=interleaved-zero-bubble virtual_stages=2 stage_layers=[2, 2, 2, 2]
# recompute=none sequence_parallel=false zero_stage=0 precision=bf16
# Save as meshplan_llama_train.py on PYTHONPATH, then on every node:
#   torchrun --standalone --nnodes 1 --nproc-per-node 4 -m torchtitan.train --module meshplan_llama_train --config meshplan_tiny_llama
# !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
# WARNING: this target cannot express all of the plan (1 issue(s)):
# WARNING: torchtitan 0.3.0 ships no configuration for model 'tiny-llama': the export names
#   llama3/llama3_debugmodel as a placeholder; replace it with your model's module and flavor
#   (layer names must match layers.<i>)
# !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
# note: torchtitan 0.3.0 cannot capture CUDA graphs with pipeline parallelism: the recipe sets
#   training.disable_cuda_graphs = True, as its config check asks

from torchtitan.models.llama3.config_registry import llama3_debugmodel
from torchtitan.trainer import Trainer


def meshplan_tiny_llama() -> Trainer.Config:
    """tiny-llama: meshplan plan rank 1 (interleaved-zero-bubble)."""
    config = llama3_debugmodel()
    p = config.parallelism
    p.tensor_parallel_degree = 1
    p.data_parallel_replicate_degree = 2
    p.data_parallel_shard_degree = 1
    p.pipeline_parallel_degree = 2
    p.pipeline_parallel_schedule = 'InterleavedZeroBubble'
    p.pipeline_parallel_microbatch_size = 2
    p.module_fqns_per_model_part = [
        ['tok_embeddings', 'layers.0', 'layers.1'],
        ['layers.2', 'layers.3'],
        ['layers.4', 'layers.5'],
        ['layers.6', 'layers.7', 'norm', 'lm_head'],
    ]
    config.training.disable_cuda_graphs = True
    config.training.local_batch_size = 8
    config.training.global_batch_size = 16
    config.training.seq_len = 128
    config.training.mixed_precision_param = 'bfloat16'
    config.activation_checkpoint = None
    return config
