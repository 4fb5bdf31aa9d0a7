# meshplan export: torchtitan Python config recipe (Trainer.Config) (torchtitan 0.3.0)
# model gpt3-1.3b on 1 node(s) × 8 a100-sxm4-80gb; plan rank 1
# tp=2 pp=4 dp=1 micro_batch_size=1 num_microbatches=64 global_batch_size=64 seq_len=2048
# schedule=interleaved-1f1b virtual_stages=2 stage_layers=[3, 3, 3, 3, 3, 3, 3, 3]
# recompute=selective sequence_parallel=true zero_stage=1 precision=bf16
# Save as meshplan_llama_train.py on PYTHONPATH, then on every node:
#   torchrun --standalone --nnodes 1 --nproc-per-node 8 -m torchtitan.train --module meshplan_llama_train --config meshplan_gpt3_1_3b
# !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
# WARNING: this target cannot express all of the plan (2 issue(s)):
# WARNING: torchtitan 0.3.0 ships no configuration for model 'gpt3-1.3b': the export names
#   llama3/llama3_debugmodel as a placeholder; replace it with your model's module and flavor
#   (layer names must match layers.<i>)
# WARNING: torchtitan has no optimizer-state-only sharding (ZeRO-1): exported as FSDP without
#   resharding after forward (ZeRO-2-like), which also shards gradients
# !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
# note: torchtitan's selective recomputation is per-op (saves matmul/attention outputs by policy),
#   not Megatron's attention-core recomputation: activation memory may differ somewhat from the
#   plan
# note: torchtitan 0.3.0 cannot capture CUDA graphs with pipeline parallelism: the recipe sets
#   training.disable_cuda_graphs = True, as its config check asks

from torchtitan.distributed.activation_checkpoint import SelectiveAC
from torchtitan.models.llama3.config_registry import llama3_debugmodel
from torchtitan.trainer import Trainer


def meshplan_gpt3_1_3b() -> Trainer.Config:
    """gpt3-1.3b: meshplan plan rank 1 (interleaved-1f1b)."""
    config = llama3_debugmodel()
    p = config.parallelism
    p.tensor_parallel_degree = 2
    p.enable_sequence_parallel = True
    p.data_parallel_replicate_degree = 1
    p.data_parallel_shard_degree = 1
    p.fsdp_reshard_after_forward = 'never'
    p.pipeline_parallel_degree = 4
    p.pipeline_parallel_schedule = 'Interleaved1F1B'
    p.pipeline_parallel_microbatch_size = 1
    p.module_fqns_per_model_part = [
        ['tok_embeddings', 'layers.0', 'layers.1', 'layers.2'],
        ['layers.3', 'layers.4', 'layers.5'],
        ['layers.6', 'layers.7', 'layers.8'],
        ['layers.9', 'layers.10', 'layers.11'],
        ['layers.12', 'layers.13', 'layers.14'],
        ['layers.15', 'layers.16', 'layers.17'],
        ['layers.18', 'layers.19', 'layers.20'],
        ['layers.21', 'layers.22', 'layers.23', 'norm', 'lm_head'],
    ]
    config.training.disable_cuda_graphs = True
    config.training.local_batch_size = 64
    config.training.global_batch_size = 64
    config.training.seq_len = 2048
    config.training.mixed_precision_param = 'bfloat16'
    config.activation_checkpoint = SelectiveAC.Config()
    return config
