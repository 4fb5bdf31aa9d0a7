# meshplan export: torchtitan Python config recipe (Trainer.Config) (torchtitan 0.3.0)
# model gpt3-1.3b on 1 node(s) × 8 a100-sxm4-80gb; plan rank 1
# tp=2 pp=1 dp=4 micro_batch_size=4 num_microbatches=4 global_batch_size=64 seq_len=2048
# schedule=1f1b virtual_stages=1 stage_layers=[24]
# recompute=none sequence_parallel=false zero_stage=0 precision=bf16
# Save as meshplan_llama_train.py on PYTHONPATH, then on every node:
#   torchrun --standalone --nnodes 1 --nproc-per-node 8 -m torchtitan.train --module meshplan_llama_train --config meshplan_gpt3_1_3b
# !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
# WARNING: this target cannot express all of the plan (1 issue(s)):
# WARNING: torchtitan 0.3.0 ships no configuration for model 'gpt3-1.3b': the export names
#   llama3/llama3_debugmodel as a placeholder; replace it with your model's module and flavor
#   (layer names must match layers.<i>)
# !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!

from torchtitan.models.llama3.config_registry import llama3_debugmodel
from torchtitan.trainer import Trainer


def meshplan_gpt3_1_3b() -> Trainer.Config:
    """gpt3-1.3b: meshplan plan rank 1 (1f1b)."""
    config = llama3_debugmodel()
    p = config.parallelism
    p.tensor_parallel_degree = 2
    p.enable_sequence_parallel = False
    p.data_parallel_replicate_degree = 4
    p.data_parallel_shard_degree = 1
    p.pipeline_parallel_degree = 1
    config.training.local_batch_size = 4
    config.training.global_batch_size = 64
    config.training.seq_len = 2048
    config.training.mixed_precision_param = 'bfloat16'
    config.activation_checkpoint = None
    return config
