#!/usr/bin/env bash
# meshplan export: torchrun (torch 2.13 (torch.distributed.run))
# model llama3-70b on 4 node(s) × 8 h100-sxm5-80gb; plan rank 1
# tp=8 pp=4 dp=1 micro_batch_size=1 num_microbatches=32 global_batch_size=32 seq_len=8192
# schedule=zbv-zero-bubble virtual_stages=2 stage_layers=[9, 10, 10, 11, 11, 10, 10, 9]
# recompute=full sequence_parallel=true zero_stage=0 precision=bf16
# Run this same script on each of the 4 nodes (MASTER_ADDR = the first node's address).
set -euo pipefail

# The plan's layout, for the launched program (docs/exports.md; runtime.env.mesh_from_env()).
export MESHPLAN_PLAN=plan.json
export MESHPLAN_TP=8
export MESHPLAN_PP=4
export MESHPLAN_DP=1
export MESHPLAN_CP=1
export MESHPLAN_CP_COMM=p2p
export MESHPLAN_EP=1
export MESHPLAN_ETP=1
export MESHPLAN_MICRO_BATCH_SIZE=1
export MESHPLAN_NUM_MICROBATCHES=32
export MESHPLAN_GLOBAL_BATCH_SIZE=32
export MESHPLAN_SEQ_LEN=8192
export MESHPLAN_SCHEDULE=zbv-zero-bubble
export MESHPLAN_VIRTUAL_STAGES=2
export MESHPLAN_STAGE_LAYERS=9,10,10,11,11,10,10,9
export MESHPLAN_RECOMPUTE=full
export MESHPLAN_SEQUENCE_PARALLEL=1
export MESHPLAN_ZERO_STAGE=0
export MESHPLAN_PRECISION=bf16

torchrun \
  --nnodes 4 \
  --nproc-per-node 8 \
  --rdzv-backend c10d \
  --rdzv-endpoint "${MASTER_ADDR:?set MASTER_ADDR to the first node address}:29500" \
  --rdzv-id llama-train \
  --max-restarts 0 \
  -m runtime.train \
  --plan plan.json
