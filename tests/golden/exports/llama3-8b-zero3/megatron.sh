#!/usr/bin/env bash
# meshplan export: Megatron-LM (pretrain_gpt.py arguments) (Megatron-LM main@000c4ac2 (arguments.py), megatron-core 0.16.1)
# model llama3-8b on 2 node(s) × 8 h100-sxm5-80gb; plan rank 1
# tp=1 pp=1 dp=16 micro_batch_size=2 num_microbatches=4 global_batch_size=128 seq_len=4096
# schedule=1f1b virtual_stages=1 stage_layers=[32]
# recompute=full sequence_parallel=false zero_stage=3 precision=bf16
# Usage: source this file, then add data/tokenizer/optimizer arguments, e.g.
#   torchrun <launcher flags> pretrain_gpt.py "${MESHPLAN_MEGATRON_ARGS[@]}" --data-path ... --tokenizer-type ...
MESHPLAN_MEGATRON_ARGS=(
  --tensor-model-parallel-size 1
  --pipeline-model-parallel-size 1
  --micro-batch-size 2
  --global-batch-size 128
  --recompute-granularity full
  --recompute-method uniform
  --recompute-num-layers 1
  --use-megatron-fsdp
  --data-parallel-sharding-strategy optim_grads_params
  --ckpt-format fsdp_dtensor
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
