#!/usr/bin/env bash
# meshplan export: torchrun (torch 2.13 (torch.distributed.run))
# model llama3-8b on 1 node(s) × 8 h100-sxm5-80gb; plan rank 1
# tp=2 pp=4 dp=1 micro_batch_size=1 num_microbatches=16 global_batch_size=16 seq_len=4096
# schedule=gpipe virtual_stages=1 stage_layers=[8, 8, 8, 8]
# recompute=none sequence_parallel=false zero_stage=0 precision=fp16
# Run on the one node.
set -euo pipefail

# The plan's layout, for the launched program (docs/exports.md; runtime.env.mesh_from_env()).
export MESHPLAN_PLAN=plan.json
export MESHPLAN_TP=2
export MESHPLAN_PP=4
export MESHPLAN_DP=1
export MESHPLAN_CP=1
export MESHPLAN_CP_COMM=p2p
export MESHPLAN_EP=1
export MESHPLAN_ETP=1
export MESHPLAN_MICRO_BATCH_SIZE=1
export MESHPLAN_NUM_MICROBATCHES=16
export MESHPLAN_GLOBAL_BATCH_SIZE=16
export MESHPLAN_SEQ_LEN=4096
export MESHPLAN_SCHEDULE=gpipe
export MESHPLAN_VIRTUAL_STAGES=1
export MESHPLAN_STAGE_LAYERS=8,8,8,8
export MESHPLAN_RECOMPUTE=none
export MESHPLAN_SEQUENCE_PARALLEL=0
export MESHPLAN_ZERO_STAGE=0
export MESHPLAN_PRECISION=fp16

torchrun \
  --standalone \
  --nnodes 1 \
  --nproc-per-node 8 \
  --max-restarts 0 \
  -m runtime.train \
  --plan plan.json
