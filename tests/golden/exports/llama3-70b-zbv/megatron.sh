#!/usr/bin/env bash
# meshplan export: Megatron-LM (pretrain_gpt.py arguments) (Megatron-LM main@000c4ac2 (arguments.py), megatron-core 0.16.1)
# model llama3-70b on 4 node(s) × 8 h100-sxm5-80gb; plan rank 1
# tp=8 pp=4 dp=1 micro_batch_size=1 num_microbatches=32 global_batch_size=32 seq_len=8192
# schedule=zbv-zero-bubble virtual_stages=2 stage_layers=[9, 10, 10, 11, 11, 10, 10, 9]
# recompute=full sequence_parallel=true zero_stage=0 precision=bf16
# Usage: source this file, then add data/tokenizer/optimizer arguments, e.g.
#   torchrun <launcher flags> pretrain_gpt.py "${MESHPLAN_MEGATRON_ARGS[@]}" --data-path ... --tokenizer-type ...
# !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
# WARNING: this target cannot express all of the plan (1 issue(s)):
# WARNING: Megatron-LM has no zero-bubble V (ZBV) schedule and cannot place chunks in a V:
#   exported as 1F1B over 4 contiguous stages with each rank's layer count kept ([18, 20, 20,
#   22]); the pipeline bubble is larger than planned, so the plan's step-time estimate does not
#   hold
# !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
# Megatron asserts this with tensor parallelism on GPUs before Blackwell.
export CUDA_DEVICE_MAX_CONNECTIONS=1

MESHPLAN_MEGATRON_ARGS=(
  --tensor-model-parallel-size 8
  --pipeline-model-parallel-size 4
  --decoder-first-pipeline-num-layers 18
  --decoder-last-pipeline-num-layers 22
  --sequence-parallel
  --micro-batch-size 1
  --global-batch-size 32
  --recompute-granularity full
  --recompute-method uniform
  --recompute-num-layers 1
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
