#!/usr/bin/env bash
# meshplan export: Megatron-LM (pretrain_gpt.py arguments) (Megatron-LM main@000c4ac2 (arguments.py), megatron-core 0.16.1)
# model tiny-llama on 1 node(s) × 4 a100-sxm4-40gb; plan rank 1
# tp=1 pp=2 dp=2 micro_batch_size=2 num_microbatches=4 global_batch_size=16 seq_len=128
# schedule=interleaved-zero-bubble virtual_stages=2 stage_layers=[2, 2, 2, 2]
# recompute=none sequence_parallel=false zero_stage=0 precision=bf16
# Usage: source this file, then add data/tokenizer/optimizer arguments, e.g.
#   torchrun <launcher flags> pretrain_gpt.py "${MESHPLAN_MEGATRON_ARGS[@]}" --data-path ... --tokenizer-type ...
# !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
# WARNING: this target cannot express all of the plan (1 issue(s)):
# WARNING: Megatron-LM has no interleaved zero-bubble schedule: exported as interleaved 1F1B with
#   the same chunks; the bubble is larger than planned, so the plan's step-time estimate does not
#   hold
# !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
MESHPLAN_MEGATRON_ARGS=(
  --tensor-model-parallel-size 1
  --pipeline-model-parallel-size 2
  --num-virtual-stages-per-pipeline-rank 2
  --micro-batch-size 2
  --global-batch-size 16
  --bf16
  --num-layers 8
  --hidden-size 64
  --ffn-hidden-size 192
  --num-attention-heads 8
  --group-query-attention
  --num-query-groups 4
  --seq-length 128
  --max-position-embeddings 128
  --position-embedding-type rope
  --normalization RMSNorm
  --swiglu
  --disable-bias-linear
  --untie-embeddings-and-output-weights
)
