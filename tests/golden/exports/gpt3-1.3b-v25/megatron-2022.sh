#!/usr/bin/env bash
# meshplan export: Megatron-LM 2022 (pretrain_gpt.py arguments) (Megatron-LM main 52e636888c (2022-11-29))
# model gpt3-1.3b on 1 node(s) × 8 a100-sxm4-80gb; plan rank 1
# tp=2 pp=4 dp=1 micro_batch_size=1 num_microbatches=64 global_batch_size=64 seq_len=2048
# schedule=interleaved-1f1b virtual_stages=2 stage_layers=[3, 3, 3, 3, 3, 3, 3, 3]
# recompute=full sequence_parallel=false zero_stage=0 precision=bf16
# Usage: source this file, then add data/tokenizer/optimizer arguments, e.g.
#   python -m torch.distributed.launch <launcher flags> pretrain_gpt.py "${MESHPLAN_MEGATRON_ARGS[@]}" --data-path ... --vocab-file ... --merge-file ...
# megatron/arguments.py raises without it (--sequence-parallel, or the asynchronous TP all-reduce, on by default).
export CUDA_DEVICE_MAX_CONNECTIONS=1

MESHPLAN_MEGATRON_ARGS=(
  --tensor-model-parallel-size 2
  --pipeline-model-parallel-size 4
  --num-layers-per-virtual-pipeline-stage 3
  --micro-batch-size 1
  --global-batch-size 64
  --recompute-granularity full
  --recompute-method uniform
  --recompute-num-layers 1
  --bf16
  --DDP-impl local
  --num-layers 24
  --hidden-size 2048
  --num-attention-heads 16
  --seq-length 2048
  --max-position-embeddings 2048
)
