#!/usr/bin/env bash
# meshplan export: Megatron-LM (pretrain_gpt.py arguments) (Megatron-LM main@000c4ac2 (arguments.py), megatron-core 0.16.1)
# model llama3-8b on 1 node(s) × 8 h100-sxm5-80gb; plan rank 1
# tp=2 pp=4 dp=1 micro_batch_size=1 num_microbatches=16 global_batch_size=16 seq_len=4096
# schedule=gpipe virtual_stages=1 stage_layers=[8, 8, 8, 8]
# recompute=none sequence_parallel=false zero_stage=0 precision=fp16
# Usage: source this file, then add data/tokenizer/optimizer arguments, e.g.
#   torchrun <launcher flags> pretrain_gpt.py "${MESHPLAN_MEGATRON_ARGS[@]}" --data-path ... --tokenizer-type ...
# !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
# WARNING: this target cannot express all of the plan (1 issue(s)):
# WARNING: Megatron-LM has no GPipe schedule: exported as 1F1B (same layer split and bubble, less
#   activation memory than planned)
# !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
# Megatron asserts this with tensor parallelism on GPUs before Blackwell.
export CUDA_DEVICE_MAX_CONNECTIONS=1

MESHPLAN_MEGATRON_ARGS=(
  --tensor-model-parallel-size 2
  --pipeline-model-parallel-size 4
  --micro-batch-size 1
  --global-batch-size 16
  --fp16
  --num-layers 32
  --hidden-size 4096
  --ffn-hidden-size 14336
  --num-attention-heads 32
  --group-query-attention
  --num-query-groups 8
  --seq-length 4096
  --max-position-embeddings 8192
  --position-embedding-type rope
  --normalization RMSNorm
  --swiglu
  --disable-bias-linear
  --untie-embeddings-and-output-weights
)
