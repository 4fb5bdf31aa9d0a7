#!/usr/bin/env bash
# meshplan export: meshplan runtime (meshplan run) (meshplan 0.1 (runtime/cli.py `meshplan run`))
# model tiny-llama on 1 node(s) × 4 a100-sxm4-40gb; plan rank 1
# tp=1 pp=2 dp=2 micro_batch_size=2 num_microbatches=4 global_batch_size=16 seq_len=128
# schedule=interleaved-zero-bubble virtual_stages=2 stage_layers=[2, 2, 2, 2]
# recompute=none sequence_parallel=false zero_stage=0 precision=bf16
# Run on the one node.
# Add --steps N (default 10), --data tokens.bin, --report run.json … as needed (meshplan run --help).
set -euo pipefail

meshplan \
  run \
  --plan plan.json \
  --nproc-per-node 4
