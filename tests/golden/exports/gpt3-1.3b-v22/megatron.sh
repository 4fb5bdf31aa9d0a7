#!/usr/bin/env bash
# meshplan export: Megatron-LM (pretrain_gpt.py arguments) (Megatron-LM main@000c4ac2 (arguments.py), megatron-core 0.16.1)
# model gpt3-1.3b on 1 node(s) × 8 a100-sxm4-80gb; plan rank 1
# tp=2 pp=4 dp=1 micro_batch_size=1 num_microbatches=64 global_batch_size=64 seq_len=2048
# schedule=interleaved-1f1b virtual_stages=2 stage_layers=[3, 3, 3, 3, 3, 3, 3, 3]
# recompute=selective sequence_parallel=true zero_stage=1 precision=bf16
# Usage: source this file, then add data/tokenizer/optimizer arguments, e.g.
#   torchrun <launcher flags> pretrain_gpt.py "${MESHPLAN_MEGATRON_ARGS[@]}" --data-path ... --tokenizer-type ...
# Megatron asserts this with tensor parallelism on GPUs before Blackwell.
export CUDA_DEVICE_MAX_CONNECTIONS=1

MESHPLAN_MEGATRON_ARGS=(
  --tensor-model-parallel-size 2
  --pipeline-model-parallel-size 4
  --num-virtual-stages-per-pipeline-rank 2
  --sequence-parallel
  --micro-batch-size 1
  --global-batch-size 64
  --recompute-granularity selective
  --use-distributed-optimizer
  --bf16
  --num-layers 24
  --hidden-size 2048
  --ffn-hidden-size 8192
  --num-attention-heads 16
  --seq-length 2048
  --max-position-embeddings 2048
  --position-embedding-type learned_absolute
  --normalization LayerNorm
)
