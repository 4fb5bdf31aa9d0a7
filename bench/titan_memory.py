"""The torchtitan rows' peak memory against the published one (issue 24/27), in ~1 s instead of the whole bench.

Prices every row of ``bench/bench_fidelity.py`` on a torchtitan stack that publishes a peak (its ``request``, the same
plan as its memory column) and prints, per row, the published and predicted peak GiB, the error, the step time with the
built-in residuals and the physics-only one (identity residuals, ``predict_step_time``): a memory-only change leaves
the last two as they were.

Run: ``python bench/titan_memory.py`` (``--json out.json`` writes the rows).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_fidelity import load_all, mlperf_row, request  # noqa: E402
from planner.answer.calibrate import predict_step_time  # noqa: E402
from planner.api import estimate_plan  # noqa: E402
from planner.specs import Residuals  # noqa: E402


def titan_rows() -> list[dict[str, Any]]:
    """One dict per torchtitan row with a published peak: id, published and predicted GiB, step and physics step (s)."""
    data = load_all()
    out = []
    for row in data["runs"]:
        published = row["measured"].get("peak_memory_gib")
        if not row["stack"].startswith("torchtitan") or not published:
            continue
        req = request(mlperf_row(row), data["gpus"])
        est = estimate_plan(req).estimate
        out.append(
            {
                "id": row["id"],
                "published_gib": published,
                "predicted_gib": est.peak_memory_gib,
                "error": est.peak_memory_gib / published - 1,
                "step_s": est.step_time_s,
                "physics_s": predict_step_time(req, Residuals()),
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args()
    rows = titan_rows()
    print(f"{'row':58} {'published':>9} {'predicted':>9} {'error':>7} {'step s':>9} {'physics s':>9}")
    for r in rows:
        print(
            f"{r['id']:58} {r['published_gib']:9.1f} {r['predicted_gib']:9.1f} {r['error']:+7.1%}"
            f" {r['step_s']:9.3f} {r['physics_s']:9.3f}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
