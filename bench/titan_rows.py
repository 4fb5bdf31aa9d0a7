"""The torchtitan rows' step time against the published one (issues 24/27), in seconds instead of the whole bench.

Prices every expressible row of ``bench/bench_fidelity.py`` whose source group names torchtitan with its ``evaluate``
(the same numbers as the bench's columns) and prints, per row, the published step, the predicted one with the built-in
residuals and with identity residuals (physics only), and the physics-only error (+ = priced faster than measured,
measured ÷ physics − 1). ``--breakdown`` adds the physics-only time breakdown of every context-parallel row (and
``--all`` of every row), with the per-block attention time and the CP exchange's exposed seconds.

Run: ``python bench/titan_rows.py`` (``--breakdown``, ``--all``, ``--match SUBSTRING``, ``--json out.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_fidelity import evaluate, load_all, mlperf_row, reasons_not_expressible, request  # noqa: E402
from planner.answer.estimate import build_estimate  # noqa: E402
from planner.specs import Residuals  # noqa: E402
from planner.specs.calibration import Calibration  # noqa: E402


def physics_breakdown(req: Any) -> tuple[dict[str, float], dict[str, float]]:
    """The physics-only (identity residuals) time breakdown of ``req``'s pinned plan, and its CP figures per block
    and micro-batch: the attention forward/backward and the exchange's exposed forward/backward seconds."""
    from planner.answer.request import complete_pins, context
    from planner.compose.context_parallel import cp_exposed, cp_view, ring_pass_seconds
    from planner.compose.cost import class_costs
    from planner.compose.cost import evaluate as ev_plan
    from planner.pricing.gpu import attention_time

    ctx = context(req)
    ctx.calibration = Calibration(gpu=ctx.gpu.id, stack=ctx.stack.id, residuals=Residuals())
    ctx.__dict__.pop("residuals", None)
    ctx.__dict__.pop("comm", None)
    cand, n = complete_pins(ctx, req)
    cc = class_costs(ctx, cand)
    ev = ev_plan(cc, n, record=True)
    bd = build_estimate(ctx, cc, n, ev).breakdown.model_dump()
    cp: dict[str, float] = {}
    if cand.cp > 1:
        af, ab = attention_time(cp_view(ctx, cand.cp), cand.micro_batch_size, cand.tp)
        ef, eb = cp_exposed(ctx, cand)
        pf, pb = ring_pass_seconds(ctx, cand)
        cp = {"attn_f": af, "attn_b": ab, "exposed_f": ef, "exposed_b": eb, "passes_f": pf, "passes_b": pb}
        cp["blocks"] = float(ctx.model.num_layers) / cand.pp
        cp["microbatches"] = float(cc.m)
    return bd, cp


def titan_rows(match: str = "") -> list[dict[str, Any]]:
    data = load_all()
    out = []
    for row in data["runs"]:
        if "torchtitan" not in row["source_group"] or match not in row["id"] or reasons_not_expressible(row):
            continue
        r = evaluate(row, data["gpus"])
        physics = r.measured_step_time_s / (1 + r.physics_error)
        out.append(
            {
                "id": row["id"],
                "group": row["source_group"],
                "cp": row["parallel"].get("cp") or 1,
                "measured_s": r.measured_step_time_s,
                "predicted_s": r.step_time_s,
                "physics_s": physics,
                "physics_error": r.physics_error,
                "error": r.error,
                "row": row,
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--breakdown", action="store_true", help="physics breakdown of the CP rows")
    ap.add_argument("--all", action="store_true", help="with --breakdown: of every row")
    ap.add_argument("--match", default="", help="only rows whose id contains this")
    ap.add_argument("--json", type=Path, help="write the rows here")
    a = ap.parse_args()
    data = load_all()
    rows = titan_rows(a.match)
    print(f"{'row':58} {'measured':>9} {'predicted':>9} {'physics':>9} {'phys err':>8} {'err':>7}")
    for r in rows:
        print(
            f"{r['id'][:58]:58} {r['measured_s']:9.3f} {r['predicted_s']:9.3f} {r['physics_s']:9.3f}"
            f" {r['physics_error']:+8.1%} {r['error']:+7.1%}"
        )
    errs = [abs(r["physics_error"]) for r in rows]
    print(f"{len(rows)} rows, physics-only MAPE {sum(errs) / len(errs):.1%}, max {max(errs):.1%}")
    if a.breakdown:
        for r in rows:
            if r["cp"] == 1 and not a.all:
                continue
            bd, cp = physics_breakdown(request(mlperf_row(r["row"]), data["gpus"]))
            parts = " ".join(f"{k[:-2]} {v:.3f}" for k, v in bd.items() if v)
            print(f"\n{r['id']}: physics {sum(bd.values()):.3f} s = {parts}")
            if cp:
                print(
                    "  per block & micro-batch (ms): "
                    + " ".join(f"{k} {v * 1e3:.2f}" for k, v in cp.items() if k not in ("blocks", "microbatches"))
                )
    if a.json:
        a.json.write_text(json.dumps([{k: v for k, v in r.items() if k != "row"} for r in rows], indent=1))


if __name__ == "__main__":
    main()
