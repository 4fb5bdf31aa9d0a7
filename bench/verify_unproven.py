"""Are the NOT PROVEN answers of `bench/bench_plan_wide.py` optimal? Each class an answer lists below it
(``solver.unproven``) is solved offline by the schedule MIP (``planner.search.schedule_mip``: SCIP over the class's
whole dependency graph, exact) with the answer less 1 µs as its cutoff: INFEASIBLE means no cut of that class beats the
answer; a cut found under it is a plan the planner missed.

    python bench/verify_unproven.py                      # every case of the wide benchmark the planner leaves unproven
    python bench/verify_unproven.py -k nemo2412 --class-limit-s 60 --all

Per case: how many listed classes were settled, and why it stopped (a class the MIP left open within
``--class-limit-s`` seconds, one too large to write (``--max-ops`` operations), a mixture of dense and MoE
blocks (not written), or a faster cut). Without ``--all`` a case stops at its first class left open: its answer cannot
be verified then. At the end: answers verified optimal, refuted (a faster cut), open.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_plan_wide import cases  # noqa: E402

from planner.api import context, parse_request, plan  # noqa: E402
from planner.compose.cost import class_costs  # noqa: E402
from planner.search.schedule_mip import class_optimum  # noqa: E402
from planner.search.space import enumerate_candidates  # noqa: E402
from planner.specs import PlanRequest  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", default="", help="only cases whose id contains this")
    ap.add_argument("--class-limit-s", type=float, default=20.0, help="SCIP's time limit for one class")
    ap.add_argument("--max-ops", type=int, default=20_000, help="largest schedule graph written (2·m·chunks)")
    ap.add_argument("--all", action="store_true", help="go on past a class left open")
    args = ap.parse_args(argv)
    tally = {"verified": 0, "refuted": 0, "open": 0}
    for cid, body in cases():
        if args.k not in cid:
            continue
        solver = plan(PlanRequest.model_validate(body)).solver
        if solver.status != "FEASIBLE" or solver.objective_value is None:
            continue
        answer_ns = round(solver.objective_value * 1e9)
        settled, stop, faster, t0 = 0, "", None, time.process_time()
        for u in solver.unproven:
            req = parse_request(PlanRequest.model_validate({**body, "parallel": u.parallel.model_dump()}))
            ctx = context(req)
            (cand,) = enumerate_candidates(ctx, req.parallel, req.options)
            cc = class_costs(ctx, cand)
            if cc.moe_prefix is not None or 2 * cc.m * cc.chunks > args.max_ops:
                why = "dense and MoE blocks" if cc.moe_prefix is not None else f"{2 * cc.m * cc.chunks} operations"
                stop = stop or f"{cand.describe()}: {why}"
                if not args.all:
                    break
                continue
            got = class_optimum(cc, args.class_limit_s, cutoff_ns=answer_ns - 1000)
            if got.status == "INFEASIBLE":
                settled += 1
                continue
            if got.objective_ns is not None:  # a cut under the cutoff: faster than the answer
                faster = faster or f"{cand.describe()}: {got.objective_ns / 1e9:.6f} s at {got.stage_layers}"
            stop = stop or f"{cand.describe()}: left open in {args.class_limit_s:g} s"
            if not args.all:
                break
        verdict = "refuted" if faster else "verified" if settled == len(solver.unproven) else "open"
        tally[verdict] += 1
        print(
            f"{cid[:58]:58s} {solver.objective_value:.6f} s  {verdict:8s} {settled}/{len(solver.unproven)} classes"
            f"  {time.process_time() - t0:6.1f} s CPU  {faster or stop}",
            flush=True,
        )
    print(f"answers verified optimal {tally['verified']}, refuted {tally['refuted']}, open {tally['open']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
