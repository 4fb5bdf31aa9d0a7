#!/usr/bin/env bash
# meshplan export: meshplan runtime (meshplan run) (meshplan 0.1 (runtime/cli.py `meshplan run`))
# model gpt3-1.3b on 1 node(s) × 8 a100-sxm4-80gb; plan rank 1
# tp=2 pp=4 dp=1 micro_batch_size=1 num_microbatches=64 global_batch_size=64 seq_len=2048
# schedule=interleaved-1f1b virtual_stages=2 stage_layers=[3, 3, 3, 3, 3, 3, 3, 3]
# recompute=selective sequence_parallel=true zero_stage=1 precision=bf16
# Run on the one node.
# Add --steps N (default 10), --data tokens.bin, --report run.json … as needed (meshplan run --help).
set -euo pipefail

meshplan \
  run \
  --plan plan.json \
  --nproc-per-node 8
