#!/usr/bin/env bash
# meshplan export: Megatron-LM (pretrain_gpt.py arguments) (Megatron-LM main@000c4ac2 (arguments.py), megatron-core 0.16.1)
# model llama3-8b on 1 node(s) × 8 h100-sxm5-80gb; plan rank 1
# tp=1 pp=2 dp=4 micro_batch_size=1 num_microbatches=16 global_batch_size=64 seq_len=4096
# schedule=1f1b virtual_stages=1 stage_layers=[16, 16]
# recompute=none sequence_parallel=false zero_stage=2 precision=bf16
# Usage: source this file, then add data/tokenizer/optimizer arguments, e.g.
#   torchrun <launcher flags> pretrain_gpt.py "${MESHPLAN_MEGATRON_ARGS[@]}" --data-path ... --tokenizer-type ...
# !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
# WARNING: this target cannot express all of the plan (1 issue(s)):
# WARNING: ZeRO-2 maps to Megatron's distributed optimizer, which shards optimizer states and
#   reduce-scatters gradients but keeps a full gradient buffer: gradient memory is higher than
#   planned
# !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
MESHPLAN_MEGATRON_ARGS=(
  --tensor-model-parallel-size 1
  --pipeline-model-parallel-size 2
  --micro-batch-size 1
  --global-batch-size 64
  --use-distributed-optimizer
  --bf16
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
