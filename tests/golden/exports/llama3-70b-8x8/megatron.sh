#!/usr/bin/env bash
# meshplan export: Megatron-LM (pretrain_gpt.py arguments) (Megatron-LM main@000c4ac2 (arguments.py), megatron-core 0.16.1)
# model llama3-70b on 8 node(s) × 8 h100-sxm5-80gb; plan rank 1
# tp=8 pp=4 dp=2 micro_batch_size=1 num_microbatches=128 global_batch_size=256 seq_len=8192
# schedule=interleaved-1f1b virtual_stages=2 stage_layers=[8, 11, 11, 10, 10, 10, 11, 9]
# recompute=selective sequence_parallel=true zero_stage=1 precision=bf16
# Usage: source this file, then add data/tokenizer/optimizer arguments, e.g.
#   torchrun <launcher flags> pretrain_gpt.py "${MESHPLAN_MEGATRON_ARGS[@]}" --data-path ... --tokenizer-type ...
# Megatron asserts this with tensor parallelism on GPUs before Blackwell.
export CUDA_DEVICE_MAX_CONNECTIONS=1

MESHPLAN_MEGATRON_ARGS=(
  --tensor-model-parallel-size 8
  --pipeline-model-parallel-size 4
  --pipeline-model-parallel-layout 'Et*8|t*11|t*11|t*10|t*10|t*10|t*11|t*9L'
  --sequence-parallel
  --micro-batch-size 1
  --global-batch-size 256
  --recompute-granularity selective
  --use-distributed-optimizer
  --bf16
  --num-layers 80
  --hidden-size 8192
  --ffn-hidden-size 28672
  --num-attention-heads 64
  --group-query-attention
  --num-query-groups 8
  --seq-length 8192
  --max-position-embeddings 8192
  --position-embedding-type rope
  --normalization RMSNorm
  --swiglu
  --disable-bias-linear
  --untie-embeddings-and-output-weights
)
