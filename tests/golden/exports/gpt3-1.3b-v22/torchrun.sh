#!/usr/bin/env bash
# meshplan export: torchrun (torch 2.13 (torch.distributed.run))
# model gpt3-1.3b on 1 node(s) × 8 a100-sxm4-80gb; plan rank 1
# tp=2 pp=4 dp=1 micro_batch_size=1 num_microbatches=64 global_batch_size=64 seq_len=2048
# schedule=interleaved-1f1b virtual_stages=2 stage_layers=[3, 3, 3, 3, 3, 3, 3, 3]
# recompute=selective sequence_parallel=true zero_stage=1 precision=bf16
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
export MESHPLAN_NUM_MICROBATCHES=64
export MESHPLAN_GLOBAL_BATCH_SIZE=64
export MESHPLAN_SEQ_LEN=2048
export MESHPLAN_SCHEDULE=interleaved-1f1b
export MESHPLAN_VIRTUAL_STAGES=2
export MESHPLAN_STAGE_LAYERS=3,3,3,3,3,3,3,3
export MESHPLAN_RECOMPUTE=selective
export MESHPLAN_SEQUENCE_PARALLEL=1
export MESHPLAN_ZERO_STAGE=1
export MESHPLAN_PRECISION=bf16

torchrun \
  --standalone \
  --nnodes 1 \
  --nproc-per-node 8 \
  --max-restarts 0 \
  -m runtime.train \
  --plan plan.json
