#!/usr/bin/env bash
# meshplan export: Megatron-LM (pretrain_gpt.py arguments) (Megatron-LM main@000c4ac2 (arguments.py), megatron-core 0.16.1)
# model llama3-8b on 1 node(s) × 8 h100-sxm5-80gb; plan rank 1
# tp=2 pp=4 dp=1 micro_batch_size=1 num_microbatches=32 global_batch_size=32 seq_len=8192
# schedule=1f1b virtual_stages=1 stage_layers=[7, 9, 9, 7]
# recompute=none sequence_parallel=true zero_stage=1 precision=bf16
# Usage: source this file, then add data/tokenizer/optimizer arguments, e.g.
#   torchrun <launcher flags> pretrain_gpt.py "${MESHPLAN_MEGATRON_ARGS[@]}" --data-path ... --tokenizer-type ...
# Megatron asserts this with tensor parallelism on GPUs before Blackwell.
export CUDA_DEVICE_MAX_CONNECTIONS=1

MESHPLAN_MEGATRON_ARGS=(
  --tensor-model-parallel-size 2
  --pipeline-model-parallel-size 4
  --decoder-first-pipeline-num-layers 7
  --decoder-last-pipeline-num-layers 7
  --sequence-parallel
  --micro-batch-size 1
  --global-batch-size 32
  --use-distributed-optimizer
  --bf16
  --num-layers 32
  --hidden-size 4096
  --ffn-hidden-size 14336
  --num-attention-heads 32
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
