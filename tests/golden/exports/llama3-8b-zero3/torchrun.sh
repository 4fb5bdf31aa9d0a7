#!/usr/bin/env bash
# meshplan export: torchrun (torch 2.13 (torch.distributed.run))
# model llama3-8b on 2 node(s) × 8 h100-sxm5-80gb; plan rank 1
# tp=1 pp=1 dp=16 micro_batch_size=2 num_microbatches=4 global_batch_size=128 seq_len=4096
# schedule=1f1b virtual_stages=1 stage_layers=[32]
# recompute=full sequence_parallel=false zero_stage=3 precision=bf16
# Run this same script on each of the 2 nodes (MASTER_ADDR = the first node's address).
set -euo pipefail

# The plan's layout, for the launched program (docs/exports.md; runtime.env.mesh_from_env()).
export MESHPLAN_PLAN=plan.json
export MESHPLAN_TP=1
export MESHPLAN_PP=1
export MESHPLAN_DP=16
export MESHPLAN_CP=1
export MESHPLAN_CP_COMM=p2p
export MESHPLAN_EP=1
export MESHPLAN_ETP=1
export MESHPLAN_MICRO_BATCH_SIZE=2
export MESHPLAN_NUM_MICROBATCHES=4
export MESHPLAN_GLOBAL_BATCH_SIZE=128
export MESHPLAN_SEQ_LEN=4096
export MESHPLAN_SCHEDULE=1f1b
export MESHPLAN_VIRTUAL_STAGES=1
export MESHPLAN_STAGE_LAYERS=32
export MESHPLAN_RECOMPUTE=full
export MESHPLAN_SEQUENCE_PARALLEL=0
export MESHPLAN_ZERO_STAGE=3
export MESHPLAN_PRECISION=bf16

torchrun \
  --nnodes 2 \
  --nproc-per-node 8 \
  --rdzv-backend c10d \
  --rdzv-endpoint "${MASTER_ADDR:?set MASTER_ADDR to the first node address}:29500" \
  --rdzv-id llama-train \
  --max-restarts 0 \
  -m runtime.train \
  --plan plan.json
