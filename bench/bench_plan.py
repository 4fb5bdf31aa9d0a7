"""Planning time of `planner.plan` on the issue's instances, with the configurations considered and,
where enumeration is affordable, the brute force's time on the same instance.

    python bench/bench_plan.py                   # all instances
    python bench/bench_plan.py --quick           # skip the 16,384-GPU instances
    python bench/bench_plan.py --no-interleaved  # as before interleaving was searched by default (comparison)
    python bench/bench_plan.py --cp-everywhere   # without the CP policies on any request (issue 26's measurement)

Target: each under 1 s on the 2-core CI machine with the full (default) search space, OPTIMAL. The
default space includes interleaved 1F1B (v = 2…8) with Megatron-LM's uniform chunks.
Columns: wall and CPU time of ``planner.plan`` (CPU time moves less with the load of a shared machine), solver status, configuration classes enumerated, classes
costed (the others were bounded out by the quick bound), classes solved with CP-SAT, classes simulated
at their one allowed cut (interleaved's uniform split), stage cuts the classes span (what a brute force would score), the best step time and MFU, and the brute force's
time on the same instance where it is affordable, as a ratio to the search.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from math import comb
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import planner.search.cp_degrees  # noqa: E402
import planner.search.space  # noqa: E402
from bench import machine_speed  # noqa: E402
from planner.answer.request import context  # noqa: E402
from planner.api import plan
from planner.search.bruteforce import brute_force  # noqa: E402
from planner.search.space import enumerate_candidates, forced_cut  # noqa: E402
from planner.specs import PlanRequest  # noqa: E402

INSTANCES = [
    ("Llama 3 405B, 2048×8 H100, gbs 2048, seq 8192", "llama3-405b", "h100-sxm5-80gb", 2048, 8, 2048, 8192),
    ("GPT-3 175B, 128×8 A100-80GB, gbs 1536, seq 2048", "gpt3-175b", "a100-sxm4-80gb", 128, 8, 1536, 2048),
    ("Llama 3 70B, 8×8 H100, gbs 1024, seq 8192", "llama3-70b", "h100-sxm5-80gb", 8, 8, 1024, 8192),
    ("Llama 3 8B, 1×8 H100, gbs 256, seq 8192", "llama3-8b", "h100-sxm5-80gb", 1, 8, 256, 8192),
    ("tiny-gpt, 1×8 H100, gbs 32, seq 128 (brute-force reference)", "tiny-gpt", "h100-sxm5-80gb", 1, 8, 32, 128),
    # issue 24: long context, where context parallelism is searched (Llama 3 used TP8 CP16 PP16 DP8 at 131K)
    ("Llama 3 405B, 2048×8 H100, gbs 128, seq 131072", "llama3-405b", "h100-sxm5-80gb", 2048, 8, 128, 131072),
    # issue 23: a mixture of experts with expert parallelism searched (Megatron-core runs it; the MCore reference
    # mapping for this model and cluster is TP4 EP2 PP8 VP7, GBS 256, seq 4096: notes §2)
    ("Mixtral 8x22B, 16×8 H100, gbs 256, seq 4096 (megatron)", "mixtral-8x22b", "h100-sxm5-80gb", 16, 8, 256, 4096),
    # issue 23: dense layers then MoE ones (3 + 58) and latent attention; DeepSeek-V3's pre-training batch (its paper,
    # arXiv 2412.19437 §4.2: 15,360 sequences of 4,096 tokens) on 2,048 GPUs (its H800 cluster, here H100)
    ("DeepSeek-V3, 256×8 H100, gbs 15360, seq 4096 (megatron)", "deepseek-v3", "h100-sxm5-80gb", 256, 8, 15360, 4096),
]
#: Instances with more training settings (issue 24: FP8 on the stacks that run it).
TRAINING = {
    "Llama 3 70B FP8 (torchtitan tensorwise), 8×8 H100, gbs 1024, seq 8192": (
        ("llama3-70b", "h100-sxm5-80gb", 8, 8, 1024, 8192),
        {"precision": "fp8", "fp8_recipe": "tensorwise", "stack": "torchtitan"},
    ),
}
INSTANCES += [(name, *args) for name, (args, _) in TRAINING.items()]
#: The training stack of an instance (default: the request's default); MoE needs one with a MoE block.
STACK = {"mixtral-8x22b": "megatron", "deepseek-v3": "megatron"}
BRUTE_FORCE_LIMIT = 300_000  # configurations (class × cut) the brute force may score


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="skip the 16,384-GPU instances")
    ap.add_argument(
        "--no-interleaved", action="store_true", help="search GPipe and 1F1B only when the schedule is not pinned"
    )
    ap.add_argument(
        "--cp-everywhere",
        action="store_true",
        help="search every CP degree at every length on every request (cp_degrees.CP_FULL_GPUS unbounded)",
    )
    args = ap.parse_args()
    if args.cp_everywhere:
        planner.search.cp_degrees.CP_FULL_GPUS = 1 << 62
    if args.no_interleaved:
        planner.search.space.DEFAULT_SCHEDULES = ("gpipe", "1f1b")
    print(machine_speed.describe())
    print(
        f"{'instance':58s} {'plan s':>7s} {'cpu s':>6s} {'status':>8s} {'classes':>8s} {'costed':>7s} {'solved':>7s} {'sim':>4s} {'cuts':>10s} {'step s':>8s} {'MFU':>6s}  brute force"
    )
    for name, model, gpu, nodes, gpn, gbs, seq in INSTANCES:
        if args.quick and nodes * gpn >= 16_384:
            continue
        req = PlanRequest.model_validate(
            {
                "model": model,
                "cluster": {"gpu": gpu, "num_nodes": nodes, "gpus_per_node": gpn},
                "training": {
                    "global_batch_size": gbs,
                    "seq_len": seq,
                    **({"stack": STACK[model]} if model in STACK else {}),
                    **TRAINING.get(name, ((), {}))[1],
                },
            }
        )
        t0, c0 = time.perf_counter(), time.process_time()
        resp = plan(req)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        ctx = context(req)
        cands = enumerate_candidates(ctx, req.parallel, req.options)
        L = ctx.model.num_layers
        cuts = sum(1 if forced_cut(ctx, req.parallel, c) is not None else comb(L - 1, c.chunks - 1) for c in cands)
        note = next((n for n in resp.solver.notes if "solved" in n), "")
        costed = re.search(r"(\d+) costed", note)
        solved = re.search(r"(\d+) solved", note)
        simulated = re.search(r"(\d+) simulated", note)
        costed, solved = (costed.group(1) if costed else "?"), (solved.group(1) if solved else "?")
        simulated = simulated.group(1) if simulated else "?"
        best = resp.plans[0].estimate if resp.plans else None
        bf = "not feasible (too many cuts)"
        if cuts <= BRUTE_FORCE_LIMIT:
            t1 = time.perf_counter()
            ref, scored = brute_force(context(req), req.parallel, req.options)
            bwall = time.perf_counter() - t1
            same = bool(ref) and abs(ref[0][0] / 1e9 - resp.solver.objective_value) < 1e-9
            bf = f"{bwall:.2f} s for {scored} configurations ({bwall / wall:.0f}× the search), same optimum: {same}"
        print(
            f"{name:58s} {wall:7.2f} {cpu:6.2f} {resp.solver.status:>8s} {resp.solver.configurations_considered:8d} {costed:>7s} {solved:>7s} {simulated:>4s} {cuts:10.3g} "
            f"{best.step_time_s if best else float('nan'):8.3f} {best.mfu if best else float('nan'):6.1%}  {bf}"
        )
        if resp.plans:
            print(f"    best: {resp.plans[0].explanation.summary}")
        else:
            print(f"    infeasible: {resp.infeasible.reason}")


if __name__ == "__main__":
    main()
