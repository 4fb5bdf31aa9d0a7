"""Compare two ``bench/bench_plan_wide.py --json`` records (before, after) as the Markdown table of docs/planner.md
(issue 26): per case the status and CPU s (with the gap when not proven), whether the first plan and the top 3
(configuration and cut) are the same, and the top-3 step times before → after; then median / worst CPU s and how
many cases were proven on each side.

    python bench/compare_wide.py before.json after.json [-k large:]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def status(r: dict) -> str:
    gap = ""
    if r["status"] == "FEASIBLE" and r["objective"] and r["bound"] is not None:
        gap = f" ({(r['objective'] - r['bound']) / r['objective']:.1%})"
    return f"{r['status']} {r['cpu_s']:.2f}{gap}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("-k", default="", help="only cases whose id contains this string")
    args = ap.parse_args()
    b, a = json.loads(args.before.read_text()), json.loads(args.after.read_text())
    keys = [k for k in a if k in b and args.k in k]

    def cfg(t: dict) -> str:
        return json.dumps(t["parallel"], sort_keys=True)

    def steps(xs: list[float]) -> str:
        return ", ".join(f"{x:.3f}" for x in xs) or "–"

    print("| case | before | after (gap) | top-1 / top-3 same | top-3 step s before → after |")
    print("|---|---|---|---|---|")
    for k in keys:
        rb, ra = b[k], a[k]
        tb, ta = [t["step_time_s"] for t in rb["top"]], [t["step_time_s"] for t in ra["top"]]
        same1 = [cfg(t) for t in rb["top"][:1]] == [cfg(t) for t in ra["top"][:1]]
        same3 = [cfg(t) for t in rb["top"]] == [cfg(t) for t in ra["top"]]
        change = steps(tb) if same3 else f"{steps(tb)} → {steps(ta)}"
        if tb and ta and ta[0] != tb[0]:
            change += f" (first plan {100 * (ta[0] - tb[0]) / tb[0]:+.1f} %)"
        print(
            f"| {k.split(', gbs')[0]} | {status(rb)} | {status(ra)} | "
            f"{'yes' if same1 else '**no**'} / {'yes' if same3 else 'no'} | {change} |"
        )
    for label, rec in (("before", b), ("after", a)):
        cpu = [rec[k]["cpu_s"] for k in keys]
        proven = sum(rec[k]["status"] == "OPTIMAL" for k in keys)
        infeasible = sum(rec[k]["status"] == "INFEASIBLE" for k in keys)
        print(
            f"\n{label}: {len(keys)} cases, CPU s median {statistics.median(cpu):.3f}, worst {max(cpu):.3f}; "
            f"{proven} OPTIMAL, {infeasible} INFEASIBLE (proven), {len(keys) - proven - infeasible} not proven"
        )


if __name__ == "__main__":
    main()
