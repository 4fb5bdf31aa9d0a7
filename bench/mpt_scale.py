"""The llm-foundry MPT rows' physics-only error against GPU count (issue 27 §2), in ~5 s instead of the whole bench.

Prices the 78 ``composer-fsdp`` rows of ``bench/bench_fidelity.py`` with identity residuals (its ``request`` and
``predict_step_time``, the same numbers as its "physics" column) and prints, per row, the GPU count, gradient
accumulation steps (GA = ⌈global ÷ (GPUs · micro)⌉), micro-batch, measured and priced step, the physics error, and
the planner's own data-parallel communication time of the step (``dp_sync_s`` ÷ σ: the FSDP all-gathers and
reduce-scatters it overlaps with compute, ``compose.layer_group.OVERLAP_SLOWDOWN``). Then, within each (table, model,
GA) series, how the unpriced gap (measured − priced, the smallest-n row's gap scaled by the priced step) grows with
the GPU count beside how much the priced communication time grows — the comparison docs/validation.md reports.

Run: ``python bench/mpt_scale.py`` (``--json out.json`` writes the rows).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_fidelity import load_all, request  # noqa: E402
from planner.answer.calibrate import predict_step_time  # noqa: E402
from planner.api import estimate_plan  # noqa: E402
from planner.compose.layer_group import OVERLAP_SLOWDOWN  # noqa: E402
from planner.specs import Residuals  # noqa: E402

STACK = "composer-fsdp"


def mpt_rows() -> list[dict[str, Any]]:
    """One dict per MPT row: its series key, GPUs, GA, micro-batch, measured and priced step (s), error, DP comm (s)."""
    data = load_all()
    out = []
    for row in data["runs"]:
        if row["stack"] != STACK:
            continue
        req = request(row, data["gpus"])
        physics = predict_step_time(req, Residuals())
        dp_sync = estimate_plan(req).estimate.breakdown.dp_sync_s  # σ × the overlapped DP collectives
        n, gbs, mb = row["cluster"]["num_gpus"], row["batch"]["global"], row["batch"]["micro"]
        measured = gbs * row["seq_len"] / (row["measured"]["tokens_per_s_per_gpu"] * n)
        table = "h100-large" if "_large_" in row["id"] else row["cluster"]["gpu"]
        out.append(
            {
                "id": row["id"],
                "series": f"{table} {row['model_name']}",
                "gpus": n,
                "ga": math.ceil(gbs / (n * mb)),
                "micro": mb,
                "measured_s": measured,
                "physics_s": physics,
                "error": measured / physics - 1,
                "dp_comm_s": dp_sync / OVERLAP_SLOWDOWN,
            }
        )
    return sorted(out, key=lambda r: (r["series"], r["ga"], r["gpus"]))


def growth(rows: list[dict[str, Any]]) -> list[tuple[str, int, int, float, float]]:
    """Per (series, GA) with a fixed micro-batch, each larger-n row against the smallest: (series, GA, GPUs, growth of
    the unpriced gap per micro-batch, growth of the priced DP communication per micro-batch), seconds."""
    series: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    for r in rows:
        series.setdefault((r["series"], r["ga"], r["micro"]), []).append(r)
    out = []
    for (name, ga, _), rs in sorted(series.items()):
        base = min(rs, key=lambda r: r["gpus"])
        scale_gap = (base["measured_s"] - base["physics_s"]) / base["physics_s"]
        for r in sorted(rs, key=lambda r: r["gpus"]):
            if r is base:
                continue
            gap = r["measured_s"] - r["physics_s"] - scale_gap * r["physics_s"]
            comm = r["dp_comm_s"] - base["dp_comm_s"]
            out.append((f"{name} (from {base['gpus']})", ga, r["gpus"], gap / ga, comm / ga))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, default=None, help="also write the per-row figures here")
    args = ap.parse_args(argv)
    rows = mpt_rows()
    print(
        f"{'run':46s} {'GPUs':>5s} {'GA':>3s} {'mb':>3s} {'meas s':>8s} {'phys s':>8s} {'error':>7s} {'DP comm s':>9s}"
    )
    for r in rows:
        print(
            f"{r['id']:46s} {r['gpus']:5d} {r['ga']:3d} {r['micro']:3d} {r['measured_s']:8.3f} {r['physics_s']:8.3f}"
            f" {100 * r['error']:+6.1f}% {r['dp_comm_s']:9.3f}"
        )
    errs = [abs(r["error"]) for r in rows]
    print(
        f"\n{len(rows)} rows, physics-only MAPE {100 * sum(errs) / len(errs):.1f}%, mean {100 * sum(r['error'] for r in rows) / len(rows):+.1f}%"
    )
    print("\nGrowth with GPUs at a fixed micro-batch and GA (ms per micro-batch): unpriced gap vs priced DP comm")
    for name, ga, n, gap, comm in growth(rows):
        print(f"{name:34s} GA {ga:2d} {n:4d} GPUs  gap {1e3 * gap:+8.1f}  DP comm {1e3 * comm:+8.1f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
