#!/usr/bin/env bash
# meshplan export: torchrun (torch 2.13 (torch.distributed.run))
# model llama3-8b on 1 node(s) × 8 h100-sxm5-80gb; plan rank 1
# tp=2 pp=4 dp=1 micro_batch_size=1 num_microbatches=32 global_batch_size=32 seq_len=8192
# schedule=1f1b virtual_stages=1 stage_layers=[7, 9, 9, 7]
# recompute=none sequence_parallel=true zero_stage=1 precision=bf16
# Run on the one node.
set -euo pipefail

torchrun \
  --standalone \
  --nnodes 1 \
  --nproc-per-node 8 \
  --max-restarts 0 \
  -m runtime.train \
  --plan plan.json
