"""The interleaved-1F1B rows of ``bench/bench_fidelity.py`` outside torchtitan (MLPerf, NeMo, Megatron-Bridge), priced
in seconds instead of the whole bench (cost model 68: ``Stack.interleaved_all_warmup`` per preset).

Prints, per row, its stack's ``interleaved_all_warmup``, pp, v and m (micro-batches per step), the predicted step time
and peak memory; ``--json`` writes them, so that two checkouts can be compared row by row.

Run: ``python bench/interleaved_rows.py [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_fidelity import evaluate, load_all, moe_row, reasons_not_expressible, stack_of  # noqa: E402
from planner.specs.stacks import resolve  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the rows here")
    a = ap.parse_args()
    data = load_all()
    out = []
    for row in data["runs"]:
        if reasons_not_expressible(row) or row["stack"] == "torchtitan":
            continue
        full = moe_row(row)  # the row as bench_fidelity.request prices it (MLPerf, NeMo, Bridge fills)
        par = full["parallel"]
        v = par.get("virtual_stages") or 1
        if v <= 1:
            continue
        r = evaluate(row, data["gpus"])
        m = full["batch"]["global"] // (par["dp"] * full["batch"]["micro"])
        warm = resolve(stack_of(full)).interleaved_all_warmup
        out.append({"id": row["id"], "all_warmup": warm, "pp": par["pp"], "v": v, "m": m, "step_s": r.step_time_s})
        out[-1]["peak_gib"] = r.peak_memory_gib
    print(f"{'row':52} {'all-warm':>8} {'pp':>3} {'v':>3} {'m':>4} {'step s':>9} {'peak GiB':>9}")
    for o in out:
        print(
            f"{o['id'][:52]:52} {o['all_warmup']!s:>8} {o['pp']:3} {o['v']:3} {o['m']:4} {o['step_s']:9.4f} {o['peak_gib']:9.2f}"
        )
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
