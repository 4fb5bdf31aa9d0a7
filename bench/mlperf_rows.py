"""The MLPerf Training GPT-3 175B rows' physics-only error and time breakdown, in seconds instead of the whole bench.

Prices the ``mlperf-3.1`` / ``mlperf-4.0`` rows of ``bench/bench_fidelity.py`` (as ``bench/fidelity_mlperf.py``
expresses them) and the NeMo 24.07 GPT-3 175B rows (group ``nemo-2407``) beside them, with identity residuals (its
``evaluate``: the same numbers as its "physics" column), and prints per row the layout, measured and priced step,
the physics error (+ = priced faster than measured: measured ÷ priced − 1) and the priced step's breakdown
(``TimeBreakdown``, seconds), then the unpriced gap (measured − priced step, s) beside what it might scale with: the
micro-batches a pipeline rank runs (m), its model chunks × micro-batches (m·v) and layers × micro-batches
(m·L/pp). Issue 27: v3.1 and v4.0 are the same benchmark on the same Eos DGX H100s; the gap's pattern is reported in
docs/validation.md ("Cost model 58: MLPerf GPT-3 175B by round").

Run: ``python bench/mlperf_rows.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_fidelity import evaluate, load_all, moe_row, reasons_not_expressible  # noqa: E402
from bench.fidelity_mlperf import GROUPS  # noqa: E402

TWINS = ("nemo-2407", "nemo-2412")
PARTS = ("compute_s", "tp_comm_s", "pp_bubble_s", "pp_p2p_s", "dp_sync_s", "optimizer_s")


def main() -> int:
    data = load_all()
    head = f"{'run':40s} {'GPUs':>5s} {'tp/pp/v/mb':>11s} {'meas':>7s} {'phys':>7s} {'err':>7s} "
    print(head + " ".join(f"{p[:-2]:>8s}" for p in PARTS) + f" {'gap s':>7s} {'m':>4s} {'m·v':>5s} {'m·L/pp':>6s}")
    for row in data["runs"]:
        if row["source_group"] not in GROUPS + TWINS or "175" not in row["model_name"]:
            continue
        if reasons_not_expressible(row):
            continue
        r = evaluate(row, data["gpus"])
        if r.physics_error is None:
            continue
        filled = moe_row(row)  # as bench_fidelity expresses it (fidelity_mlperf / fidelity_nemo filled)
        par, b = filled["parallel"], filled["batch"]
        lay = f"{par['tp']}/{par['pp']}/{par['virtual_stages'] or 1}/{b['micro']}"
        phys = r.measured_step_time_s / (1 + r.physics_error)
        # the breakdown is the residual-scaled estimate's; scale to the physics step for a like-for-like split
        k = phys / r.step_time_s
        parts = " ".join(f"{k * r.breakdown[p]:8.3f}" for p in PARTS)
        m = b["global"] // (b["micro"] * par["dp"])
        v = par["virtual_stages"] or 1
        gap = r.measured_step_time_s - phys
        print(
            f"{row['id'][:40]:40s} {row['cluster']['num_gpus']:5d} {lay:>11s} {r.measured_step_time_s:7.3f} "
            f"{phys:7.3f} {r.physics_error:+7.1%} {parts} {gap:7.3f} {m:4d} {m * v:5d} "
            f"{m * filled['model']['layers'] // par['pp']:6d}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
