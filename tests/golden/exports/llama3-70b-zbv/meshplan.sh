#!/usr/bin/env bash
# meshplan export: meshplan runtime (meshplan run) (meshplan 0.1 (runtime/cli.py `meshplan run`))
# model llama3-70b on 4 node(s) × 8 h100-sxm5-80gb; plan rank 1
# tp=8 pp=4 dp=1 micro_batch_size=1 num_microbatches=32 global_batch_size=32 seq_len=8192
# schedule=zbv-zero-bubble virtual_stages=2 stage_layers=[9, 10, 10, 11, 11, 10, 10, 9]
# recompute=full sequence_parallel=true zero_stage=0 precision=bf16
# Run this same script on each of the 4 nodes (MASTER_ADDR = the first node's address).
# Add --steps N (default 10), --data tokens.bin, --report run.json … as needed (meshplan run --help).
set -euo pipefail

meshplan \
  run \
  --plan plan.json \
  --nproc-per-node 8 \
  --nnodes 4 \
  --rdzv-endpoint "${MASTER_ADDR:?set MASTER_ADDR to the first node address}:29500"
