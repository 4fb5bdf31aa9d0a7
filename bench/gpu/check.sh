#!/usr/bin/env bash
# One short GPU check (issue 11 "Also"), run from the repo root on a one-GPU machine by the `device` tool:
#   microbenchmarks (bench/gpu_microbench.py), the bundled runtime's layers profiled on CUDA
#   (`meshplan profile model --device cuda`) and one-GPU training runs of an 8-layer Llama 3 8B
#   (`meshplan run`, RunReport with predicted vs measured). Everything lands in $OUT (default ./gpu-out);
#   bench/gpu_calibration.py turns it into the comparison tables and an H200 calibration.
# Each step has its own time limit, so a failing step leaves the others' results.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
if [ -d .whl ] && [ -z "${NO_WHEELS:-}" ]; then  # meshplan's own dependencies, carried as wheels to a machine without them
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
step() { local name=$1 limit=$2; shift 2; local t=$SECONDS; echo "== $name (limit ${limit}s)"
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1; local rc=$?; echo "   rc=$rc in $((SECONDS - t)) s"; tail -n 25 "$OUT/$name.log"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit,memory.total --format=csv >"$OUT/nvidia-smi.csv" 2>&1
cat "$OUT/nvidia-smi.csv"
[ "${MICRO:-1}" = 1 ] && step microbench "${T_MICRO:-110}" $PY bench/gpu_microbench.py --out "$OUT/microbench.json" ${MICRO_ARGS:-}
step profile "${T_PROFILE:-80}" $PY -m api.cli profile model --model "${MODEL:-bench/gpu/llama3-8b-8l.json}" --device "${DEVICE:-cuda}" \
  --micro-batch-sizes "${MBS:-1,2}" --tp "${TPS:-1,2,4,8}" --seq-len "${SEQ:-8192}" --dtype bf16 --no-progress --out "$OUT/profile.json"
step run-mbs1 "${T_RUN:-100}" $PY -m api.cli run --plan "${PLAN1:-bench/gpu/plan-mbs1.json}" --steps "${STEPS:-12}" --report "$OUT/run-mbs1.json"
step run-mbs2 "${T_RUN:-100}" $PY -m api.cli run --plan "${PLAN2:-bench/gpu/plan-mbs2.json}" --steps "${STEPS:-12}" --report "$OUT/run-mbs2.json"

[ "${COMPILE:-1}" = 1 ] && step run-mbs1-compile "${T_COMPILE:-120}" $PY -m api.cli run --plan "${PLAN1:-bench/gpu/plan-mbs1.json}" --steps "${STEPS:-12}" --compile --report "$OUT/run-mbs1-compile.json"
for p in "${PLAN1:-bench/gpu/plan-mbs1.json}" "${PLAN2:-bench/gpu/plan-mbs2.json}"; do  # one profiled step each
  [ "${TRACE:-1}" = 1 ] && step "trace-$(basename "$p" .json | sed 's/^plan-//')" "${T_TRACE:-100}" $PY bench/gpu/trace_step.py --plan "$p" --out "$OUT/trace-$(basename "$p" .json | sed 's/^plan-//').json"
done
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>&1
ls -la "$OUT"
