#!/usr/bin/env bash
# meshplan export: torchrun (torch 2.13 (torch.distributed.run))
# model tiny-llama on 1 node(s) × 4 a100-sxm4-40gb; plan rank 1
# tp=1 pp=2 dp=2 micro_batch_size=2 num_microbatches=4 global_batch_size=16 seq_len=128
# schedule=interleaved-zero-bubble virtual_stages=2 stage_layers=[2, 2, 2, 2]
# recompute=none sequence_parallel=false zero_stage=0 precision=bf16
# Run on the one node.
set -euo pipefail

# The plan's layout, for the launched program (docs/exports.md; runtime.env.mesh_from_env()).
export MESHPLAN_PLAN=plan.json
export MESHPLAN_TP=1
export MESHPLAN_PP=2
export MESHPLAN_DP=2
export MESHPLAN_CP=1
export MESHPLAN_CP_COMM=p2p
export MESHPLAN_EP=1
export MESHPLAN_ETP=1
export MESHPLAN_MICRO_BATCH_SIZE=2
export MESHPLAN_NUM_MICROBATCHES=4
export MESHPLAN_GLOBAL_BATCH_SIZE=16
export MESHPLAN_SEQ_LEN=128
export MESHPLAN_SCHEDULE=interleaved-zero-bubble
export MESHPLAN_VIRTUAL_STAGES=2
export MESHPLAN_STAGE_LAYERS=2,2,2,2
export MESHPLAN_RECOMPUTE=none
export MESHPLAN_SEQUENCE_PARALLEL=0
export MESHPLAN_ZERO_STAGE=0
export MESHPLAN_PRECISION=bf16

torchrun \
  --standalone \
  --nnodes 1 \
  --nproc-per-node 4 \
  --max-restarts 0 \
  -m runtime.train \
  --plan plan.json
