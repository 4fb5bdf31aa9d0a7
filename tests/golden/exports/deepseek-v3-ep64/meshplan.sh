#!/usr/bin/env bash
# meshplan export: meshplan runtime (meshplan run) (meshplan 0.1 (runtime/cli.py `meshplan run`))
# model deepseek-v3 on 32 node(s) × 8 h100-sxm5-80gb; plan rank 1
# tp=1 pp=4 dp=64 micro_batch_size=1 num_microbatches=16 global_batch_size=1024 seq_len=4096
# schedule=1f1b virtual_stages=1 stage_layers=[16, 15, 15, 15]
# recompute=none sequence_parallel=false zero_stage=1 precision=bf16
# Run this same script on each of the 32 nodes (MASTER_ADDR = the first node's address).
# Add --steps N (default 10), --data tokens.bin, --report run.json … as needed (meshplan run --help).
set -euo pipefail

meshplan \
  run \
  --plan plan.json \
  --nproc-per-node 8 \
  --nnodes 32 \
  --rdzv-endpoint "${MASTER_ADDR:?set MASTER_ADDR to the first node address}:29500"
