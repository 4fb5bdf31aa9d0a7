#!/usr/bin/env bash
# meshplan export: Megatron-LM (pretrain_gpt.py arguments) (Megatron-LM main@000c4ac2 (arguments.py), megatron-core 0.16.1)
# model deepseek-v3 on 32 node(s) × 8 h100-sxm5-80gb; plan rank 1
# tp=1 pp=4 dp=64 micro_batch_size=1 num_microbatches=16 global_batch_size=1024 seq_len=4096
# schedule=1f1b virtual_stages=1 stage_layers=[16, 15, 15, 15]
# recompute=none sequence_parallel=false zero_stage=1 precision=bf16
# Usage: source this file, then add data/tokenizer/optimizer arguments, e.g.
#   torchrun <launcher flags> pretrain_gpt.py "${MESHPLAN_MEGATRON_ARGS[@]}" --data-path ... --tokenizer-type ...
MESHPLAN_MEGATRON_ARGS=(
  --tensor-model-parallel-size 1
  --pipeline-model-parallel-size 4
  --decoder-first-pipeline-num-layers 16
  --num-experts 256
  --moe-router-topk 8
  --moe-ffn-hidden-size 2048
  --expert-model-parallel-size 64
  --expert-tensor-parallel-size 1
  --moe-grouped-gemm
  --moe-token-dispatcher-type alltoall
  --moe-shared-expert-intermediate-size 2048
  --moe-layer-freq '([0]*3+[1]*58)'
  --moe-router-score-function sigmoid
  --moe-router-num-groups 8
  --moe-router-group-topk 4
  --micro-batch-size 1
  --global-batch-size 1024
  --use-distributed-optimizer
  --bf16
  --num-layers 61
  --hidden-size 7168
  --ffn-hidden-size 18432
  --num-attention-heads 128
  --seq-length 4096
  --max-position-embeddings 163840
  --position-embedding-type rope
  --normalization RMSNorm
  --swiglu
  --disable-bias-linear
  --untie-embeddings-and-output-weights
  --multi-latent-attention
  --q-lora-rank 1536
  --kv-lora-rank 512
  --qk-head-dim 128
  --qk-pos-emb-head-dim 64
  --v-head-dim 128
)
