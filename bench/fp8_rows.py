"""The FP8 rows' physics-only error (and their BF16 twins'), in seconds instead of the whole bench.

Prices every FP8 row of ``bench/bench_fidelity.py`` that the planner can express, and the BF16 rows of the same
source and model (their twins), with its ``evaluate`` (the same numbers as its "physics" column). Error: + = priced
faster than measured (measured ÷ priced − 1). The FP8 rows' errors before and after cost model 56: docs/validation.md.

Run: ``python bench/fp8_rows.py`` (``--all`` also prints BF16 rows of every source that has an FP8 row).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_fidelity import evaluate, fp8_recipe, load_all, reasons_not_expressible  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--all", action="store_true")
    a = p.parse_args()
    data = load_all()
    runs = [r for r in data["runs"] if not reasons_not_expressible(r)]
    fp8_models = {(r.get("source", {}).get("name", ""), r["model_name"]) for r in runs if r["precision"] == "fp8"}
    for row in runs:
        key = (row.get("source", {}).get("name", ""), row["model_name"])
        if row["precision"] != "fp8" and not (a.all and key in fp8_models):
            continue
        r = evaluate(row, data["gpus"])
        if r.physics_error is None:
            continue
        physics = r.measured_step_time_s / (1 + r.physics_error)
        rec = str(fp8_recipe(row) or row["precision"])
        n = row["cluster"]["num_gpus"] or 0
        print(
            f"{row['id'][:64]:64s} {rec:10s} {n:5d} meas {r.measured_step_time_s:8.3f} phys {physics:8.3f} "
            f"{r.physics_error:+7.1%}"
        )


if __name__ == "__main__":
    main()
