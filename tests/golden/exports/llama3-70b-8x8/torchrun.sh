#!/usr/bin/env bash
# meshplan export: torchrun (torch 2.13 (torch.distributed.run))
# model llama3-70b on 8 node(s) × 8 h100-sxm5-80gb; plan rank 1
# tp=8 pp=4 dp=2 micro_batch_size=1 num_microbatches=128 global_batch_size=256 seq_len=8192
# schedule=interleaved-1f1b virtual_stages=2 stage_layers=[8, 11, 11, 10, 10, 10, 11, 9]
# recompute=selective sequence_parallel=true zero_stage=1 precision=bf16
# Run this same script on each of the 8 nodes (MASTER_ADDR = the first node's address).
set -euo pipefail

# The plan's layout, for the launched program (docs/exports.md; runtime.env.mesh_from_env()).
export MESHPLAN_PLAN=plan.json
export MESHPLAN_TP=8
export MESHPLAN_PP=4
export MESHPLAN_DP=2
export MESHPLAN_CP=1
export MESHPLAN_CP_COMM=p2p
export MESHPLAN_EP=1
export MESHPLAN_ETP=1
export MESHPLAN_MICRO_BATCH_SIZE=1
export MESHPLAN_NUM_MICROBATCHES=128
export MESHPLAN_GLOBAL_BATCH_SIZE=256
export MESHPLAN_SEQ_LEN=8192
export MESHPLAN_SCHEDULE=interleaved-1f1b
export MESHPLAN_VIRTUAL_STAGES=2
export MESHPLAN_STAGE_LAYERS=8,11,11,10,10,10,11,9
export MESHPLAN_RECOMPUTE=selective
export MESHPLAN_SEQUENCE_PARALLEL=1
export MESHPLAN_ZERO_STAGE=1
export MESHPLAN_PRECISION=bf16

torchrun \
  --nnodes 8 \
  --nproc-per-node 8 \
  --rdzv-backend c10d \
  --rdzv-endpoint "${MASTER_ADDR:?set MASTER_ADDR to the first node address}:29500" \
  --rdzv-id llama-train \
  --max-restarts 0 \
  -m runtime.train \
  --plan plan.json
