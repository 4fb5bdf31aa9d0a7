#!/usr/bin/env bash
# meshplan export: meshplan runtime (meshplan run) (meshplan 0.1 (runtime/cli.py))
# model llama3-70b on 4 node(s) × 8 h100-sxm5-80gb; plan rank 1
# tp=8 pp=4 dp=1 micro_batch_size=1 num_microbatches=32 global_batch_size=32 seq_len=8192
# schedule=zbv-zero-bubble virtual_stages=2 stage_layers=[9, 10, 10, 11, 11, 10, 10, 9]
# recompute=full sequence_parallel=true zero_stage=0 precision=bf16
# Run on each of the 4 nodes (the runtime's torchrun rendezvous uses MASTER_ADDR).
set -euo pipefail

meshplan \
  run \
  --plan plan.json \
  --nproc-per-node 8 \
  --nnodes 4
