#!/usr/bin/env bash
# meshplan export: meshplan runtime (meshplan run) (meshplan 0.1 (runtime/cli.py `meshplan run`))
# model llama3-8b on 1 node(s) × 8 h100-sxm5-80gb; plan rank 1
# tp=2 pp=4 dp=1 micro_batch_size=1 num_microbatches=16 global_batch_size=16 seq_len=4096
# schedule=gpipe virtual_stages=1 stage_layers=[8, 8, 8, 8]
# recompute=none sequence_parallel=false zero_stage=0 precision=fp16
# Run on the one node.
# Add --steps N (default 10), --data tokens.bin, --report run.json … as needed (meshplan run --help).
set -euo pipefail

meshplan \
  run \
  --plan plan.json \
  --nproc-per-node 8
