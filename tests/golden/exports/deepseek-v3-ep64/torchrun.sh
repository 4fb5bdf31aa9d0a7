#!/usr/bin/env bash
# meshplan export: torchrun (torch 2.13 (torch.distributed.run))
# model deepseek-v3 on 32 node(s) × 8 h100-sxm5-80gb; plan rank 1
# tp=1 pp=4 dp=64 micro_batch_size=1 num_microbatches=16 global_batch_size=1024 seq_len=4096
# schedule=1f1b virtual_stages=1 stage_layers=[16, 15, 15, 15]
# recompute=none sequence_parallel=false zero_stage=1 precision=bf16
# Run this same script on each of the 32 nodes (MASTER_ADDR = the first node's address).
set -euo pipefail

# The plan's layout, for the launched program (docs/exports.md; runtime.env.mesh_from_env()).
export MESHPLAN_PLAN=plan.json
export MESHPLAN_TP=1
export MESHPLAN_PP=4
export MESHPLAN_DP=64
export MESHPLAN_CP=1
export MESHPLAN_CP_COMM=p2p
export MESHPLAN_EP=64
export MESHPLAN_ETP=1
export MESHPLAN_MICRO_BATCH_SIZE=1
export MESHPLAN_NUM_MICROBATCHES=16
export MESHPLAN_GLOBAL_BATCH_SIZE=1024
export MESHPLAN_SEQ_LEN=4096
export MESHPLAN_SCHEDULE=1f1b
export MESHPLAN_VIRTUAL_STAGES=1
export MESHPLAN_STAGE_LAYERS=16,15,15,15
export MESHPLAN_RECOMPUTE=none
export MESHPLAN_SEQUENCE_PARALLEL=0
export MESHPLAN_ZERO_STAGE=1
export MESHPLAN_PRECISION=bf16

torchrun \
  --nnodes 32 \
  --nproc-per-node 8 \
  --rdzv-backend c10d \
  --rdzv-endpoint "${MASTER_ADDR:?set MASTER_ADDR to the first node address}:29500" \
  --rdzv-id llama-train \
  --max-restarts 0 \
  -m runtime.train \
  --plan plan.json
