"""The expert-parallel rows' error (as shipped and physics only), in seconds instead of the whole bench.

Prices every row of ``bench/bench_fidelity.py`` with ep > 1 that the planner can express, with its ``evaluate`` (the
same numbers as its "error" and "physics" columns), and names the others with the first reason they are not
expressible. Error: + = priced faster than measured (predicted ÷ measured − 1 in the row's metric; physics:
measured step ÷ physics step − 1). ``--breakdown`` adds each row's time breakdown.

Run: ``python bench/moe_rows.py`` (issue 23; the Qwen3-30B-A3B pair's analysis: docs/validation.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_fidelity import evaluate, load_all, reasons_not_expressible  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--breakdown", action="store_true")
    a = p.parse_args()
    data = load_all()
    for row in data["runs"]:
        if (row["parallel"].get("ep") or 1) <= 1:
            continue
        why = reasons_not_expressible(row)
        if why:
            print(f"{row['id'][:56]:56s} not expressible: {why[0][:60]}")
            continue
        r = evaluate(row, data["gpus"])
        physics = r.measured_step_time_s / (1 + r.physics_error)
        print(
            f"{row['id'][:56]:56s} meas {r.measured_step_time_s:7.3f} s  pred {r.step_time_s:7.3f}  "
            f"phys {physics:7.3f}  error {r.error:+7.1%}  physics {r.physics_error:+7.1%}"
        )
        if a.breakdown:
            print("    " + "  ".join(f"{k} {v:.3f}" for k, v in r.breakdown.items() if v))


if __name__ == "__main__":
    main()
