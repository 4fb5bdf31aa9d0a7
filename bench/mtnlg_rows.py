"""The three MT-NLG 530B rows (``mt-nlg-2022``, arXiv 2201.11990 §2.4) priced alone, in ~2 s instead of the whole bench.

Prints, per row, the measured and priced step (s), the physics error (``bench_fidelity.evaluate``'s column), the
priced breakdown, and the per-slot view of a 1F1B pipeline: measured step ÷ (m + p − 1) slots, m the micro-batches
per pipeline (global ÷ (dp · micro)), p = 35 — the figure docs/validation.md compares with the priced slot.
``--micro N`` prices the rows at another micro-batch (a sensitivity, not the rows' expression: the paper does not
state the runs' micro-batch; see the rows' ``assumed``).

Run: ``python bench/mtnlg_rows.py`` (``--micro 2``).
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_fidelity import evaluate, load_all  # noqa: E402

GROUP = "mt-nlg-2022"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--micro", type=int, default=None, help="price at this micro-batch instead of the rows' own")
    args = ap.parse_args(argv)
    data = load_all()
    print("id                    dp  m    measured  priced   physics  slot meas/priced  breakdown (s)")
    for row in data["runs"]:
        if row["source_group"] != GROUP:
            continue
        if args.micro is not None:
            row = copy.deepcopy(row)
            row["batch"]["micro"] = args.micro
        r = evaluate(row, data["gpus"])
        par, b = row["parallel"], row["batch"]
        m = b["global"] // (par["dp"] * b["micro"])
        slots = m + par["pp"] - 1
        bd = r.breakdown
        parts = " ".join(f"{k.removesuffix('_s')} {v:.2f}" for k, v in bd.items() if v)
        print(
            f"{row['id']:<21} {par['dp']:>2} {m:>4} {r.measured_step_time_s:>8.2f} {r.step_time_s:>8.2f}"
            f" {r.physics_error * 100:>+7.1f}%  {r.measured_step_time_s / slots:.3f}/{r.step_time_s / slots:.3f}  {parts}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
