"""Planning time of `planner.plan` on realistic requests: the model, cluster and batch of every published
training run `bench/bench_fidelity.py` expresses (its data files and its mapping of each row, with the row's
stack and precision), nothing pinned, top_k 3, plus the instances of `bench/bench_plan.py`.

    python bench/bench_plan_wide.py                # every case, CPU time of one plan() each
    python bench/bench_plan_wide.py --repeat 3     # min CPU time of 3 runs (a shared machine)
    python bench/bench_plan_wide.py -k gpt3        # only cases whose id contains the string

Per case: CPU seconds of ``plan()`` (``time.process_time``: this process's CPU on every thread, so every
CP-SAT worker counts), wall seconds, solver status, gap (objective vs bound) and the best plan.
At the end: median, p90, worst CPU time, how many were proven optimal, the machine's load average,
and the runs that cannot be expressed with why. Targets (issue 12): every case proven — OPTIMAL, or INFEASIBLE
over the whole space of the request's stack (the large family's tied-embedding GPTs on ``meshplan`` and
``torchtitan``, which run no pipeline with tied embeddings: a proof that nothing fits, counted apart) — median
≤ 0.3 s, worst ≤ 1 s.

The ``large:`` family (issue 26, ``LARGE``): 80–130-layer models of 500B–1T parameters (prime-rich and
prime layer counts: 105 = 3·5·7, 97, 101, 113, 127) on 1,000–16,384 A100 or H100, on each of the training
stacks (``planner.specs.stacks``), nothing pinned, top 3: the requests a planner exists for.

    python bench/bench_plan_wide.py -k large:     # only the large family
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_plan import INSTANCES, STACK, TRAINING  # noqa: E402

from bench import machine_speed  # noqa: E402
from planner.api import plan  # noqa: E402
from planner.specs import PlanRequest  # noqa: E402
from planner.specs.errors import MeshplanError  # noqa: E402

TARGETS = {"median": 0.3, "worst": 1.0}


def _gpt(name: str, layers: int, hidden: int, heads: int) -> dict:
    """A GPT-3-shaped model (FFN 4·d, GPT-2 vocabulary, tied embeddings), as Megatron-LM's scaling runs."""
    return {
        "name": name,
        "family": "gpt",
        "num_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_kv_heads": heads,
        "ffn_hidden_size": 4 * hidden,
        "vocab_size": 50257,
        "activation": "gelu",
        "norm": "layernorm",
        "tie_embeddings": True,
        "max_seq_len": 2048,
    }


def _llama(name: str, layers: int, hidden: int, heads: int, ffn: int) -> dict:
    """A Llama-3-shaped model (GQA with 8 KV heads, SwiGLU, RMSNorm, 128K vocabulary)."""
    return {
        "name": name,
        "family": "llama",
        "num_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_kv_heads": 8,
        "ffn_hidden_size": ffn,
        "vocab_size": 128256,
        "activation": "swiglu",
        "norm": "rmsnorm",
        "tie_embeddings": False,
        "max_seq_len": 8192,
    }


A100, H100 = "a100-sxm4-80gb", "h100-sxm5-80gb"
GPT_530B = _gpt("gpt-530b", 105, 20480, 128)  # MT-NLG 530B (Smith et al. 2022): 105 = 3·5·7 layers
GPT_1T = _gpt("gpt-1t", 128, 25600, 160)  # Megatron-LM's 1T (Narayanan et al. 2021, Table 1)
GPT_462B = _gpt("gpt-462b", 113, 18432, 144)  # 113 layers (prime)
GPT_500B_97 = _gpt("gpt-500b", 97, 20736, 162)  # 97 layers (prime)
GPT_510B_80 = _gpt("gpt-510b", 80, 23040, 180)
GPT_119B = _gpt("gpt-119b", 95, 10240, 80)  # not in the 500B–1T range: the 1,536-H100 case
LLAMA_615B = _llama("llama-615b", 101, 24576, 192, 65536)  # 101 layers (prime)
LLAMA_1T = _llama("llama-1t", 127, 25600, 200, 86016)  # 127 layers (prime)
LLAMA_405B = "llama3-405b"  # 126 = 2·3²·7 layers

#: The large family: (id, model, gpu, nodes of 8, global batch, seq, stack).
LARGE = [
    ("gpt-530b 1120 A100 meshplan", GPT_530B, A100, 140, 1920, 2048, "meshplan"),
    ("gpt-530b 2240 A100 megatron", GPT_530B, A100, 280, 1920, 2048, "megatron"),
    ("gpt-530b 4480 A100 deepspeed", GPT_530B, A100, 560, 1920, 2048, "deepspeed"),
    ("gpt-530b 11200 A100 meshplan", GPT_530B, A100, 1400, 2800, 2048, "meshplan"),
    ("gpt-530b 2240 H100 torchtitan", GPT_530B, H100, 280, 1920, 2048, "torchtitan"),
    ("gpt-1t 3072 A100 meshplan", GPT_1T, A100, 384, 3072, 2048, "meshplan"),
    ("gpt-1t 3072 A100 megatron", GPT_1T, A100, 384, 3072, 2048, "megatron"),
    ("gpt-1t 16384 H100 deepspeed", GPT_1T, H100, 2048, 4096, 2048, "deepspeed"),
    ("gpt-462b 6144 H100 meshplan", GPT_462B, H100, 768, 3072, 2048, "meshplan"),
    ("gpt-462b 6144 H100 torchtitan", GPT_462B, H100, 768, 3072, 2048, "torchtitan"),
    ("gpt-119b 1536 H100 meshplan", GPT_119B, H100, 192, 1536, 2048, "meshplan"),
    ("gpt-500b-97L 4096 A100 megatron", GPT_500B_97, A100, 512, 2048, 2048, "megatron"),
    ("gpt-510b-80L 1024 H100 deepspeed", GPT_510B_80, H100, 128, 1024, 2048, "deepspeed"),
    ("llama-615b-101L 8192 H100 torchtitan", LLAMA_615B, H100, 1024, 2048, 8192, "torchtitan"),
    ("llama-615b-101L 2048 H100 megatron", LLAMA_615B, H100, 256, 1024, 8192, "megatron"),
    ("llama-1t-127L 16384 H100 megatron", LLAMA_1T, H100, 2048, 4096, 8192, "megatron"),
    ("llama-1t-127L 4096 H100 meshplan", LLAMA_1T, H100, 512, 2048, 8192, "meshplan"),
    ("llama3-405b 8192 H100 megatron", LLAMA_405B, H100, 1024, 2048, 8192, "megatron"),
]


def large_cases() -> list[tuple[str, dict]]:
    """(id, request) of the large family (``LARGE``)."""
    return [
        (
            "large: " + cid,
            {
                "model": model,
                "cluster": {"gpu": gpu, "num_nodes": nodes, "gpus_per_node": 8},
                "training": {"global_batch_size": gbs, "seq_len": seq, "stack": stack},
            },
        )
        for cid, model, gpu, nodes, gbs, seq, stack in LARGE
    ]


def published_cases() -> tuple[list[tuple[str, dict]], dict[str, list[str]]]:
    """(id, request) of every published run `bench/bench_fidelity.py` expresses (its data files, its mapping of
    each row's model, cluster, batch, precision and stack), with the parallel layout and search options left free
    as its free-plan column plans them; and the runs it cannot express, with why. Runs with identical planning
    inputs are timed once (the first id)."""
    import bench_fidelity as bf

    data = bf.load_all()
    out: list[tuple[str, dict]] = []
    seen: set[str] = set()
    skipped: dict[str, list[str]] = {}
    for row in data["runs"]:
        why = bf.reasons_not_expressible(row)
        if why:
            skipped[row["id"]] = why
            continue
        try:
            req = bf.request(row, data["gpus"])
        except MeshplanError as exc:
            skipped[row["id"]] = [f"the planner rejects it: {exc.field}: {exc.message}"]
            continue
        body = req.model_dump(mode="json", exclude={"parallel", "options", "top_k"})
        key = json.dumps(body, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append((row["id"], body))
    return out, skipped


def cases() -> list[tuple[str, dict]]:
    """(id, request) of every case: the bench_plan instances, then the published runs."""
    out = []
    for name, model, gpu, nodes, gpn, gbs, seq in INSTANCES:
        out.append(
            (
                "bench_plan: " + name,
                {
                    "model": model,
                    "cluster": {"gpu": gpu, "num_nodes": nodes, "gpus_per_node": gpn},
                    "training": {
                        "global_batch_size": gbs,
                        "seq_len": seq,
                        **({"stack": STACK[model]} if model in STACK else {}),
                        **TRAINING.get(name, ((), {}))[1],
                    },
                },
            )
        )
    return out + published_cases()[0] + large_cases()


def quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=1, help="runs per case; the minimum CPU time is reported")
    ap.add_argument("-k", default="", help="only cases whose id contains this string")
    ap.add_argument("--time-limit", type=float, default=None, help="options.time_limit_s (default: the planner's)")
    ap.add_argument("--json", type=Path, default=None, help="write each case's status, CPU s and top-3 plans here")
    args = ap.parse_args()
    record: dict[str, dict] = {}
    print(f"{'case':46s} {'cpu s':>6s} {'wall s':>6s} {'status':>8s} {'gap':>6s}  best plan")
    cpu_times: list[float] = []
    optimal = infeasible = 0
    for cid, body in cases():
        if args.k not in cid:
            continue
        body = dict(body, top_k=3)
        if args.time_limit is not None:
            body["options"] = {"time_limit_s": args.time_limit}
        req = PlanRequest.model_validate(body)
        best_cpu = best_wall = float("inf")
        for _ in range(args.repeat):
            c0, w0 = time.process_time(), time.perf_counter()
            resp = plan(req)
            best_cpu = min(best_cpu, time.process_time() - c0)
            best_wall = min(best_wall, time.perf_counter() - w0)
        s = resp.solver
        gap = (
            (s.objective_value - s.best_objective_bound) / s.objective_value
            if s.objective_value and s.best_objective_bound is not None
            else float("nan")
        )
        optimal += s.status == "OPTIMAL"
        infeasible += s.status == "INFEASIBLE"  # proven: nothing the request's stack runs fits
        cpu_times.append(best_cpu)
        best = resp.plans[0] if resp.plans else None
        what = (
            f"{best.estimate.step_time_s:.3f} s, {best.explanation.summary}"[:110]
            if best
            else f"infeasible: {resp.infeasible.reason[:90] if resp.infeasible else '?'}"
        )
        print(f"{cid[:46]:46s} {best_cpu:6.2f} {best_wall:6.2f} {s.status:>8s} {gap:6.1%}  {what}", flush=True)
        record[cid] = {
            "status": s.status,
            "cpu_s": round(best_cpu, 3),
            "objective": s.objective_value,
            "bound": s.best_objective_bound,
            "load": os.getloadavg()[0],
            "top": [
                {"parallel": p.parallel.model_dump(mode="json"), "step_time_s": p.estimate.step_time_s}
                for p in resp.plans
            ],
        }
    if args.json is not None:
        args.json.write_text(json.dumps(record, indent=1))
    if not cpu_times:
        return
    med, p90, worst = statistics.median(cpu_times), quantile(cpu_times, 0.9), max(cpu_times)
    print(
        f"\n{len(cpu_times)} cases: CPU s median {med:.3f}, p90 {p90:.3f}, worst {worst:.3f}; "
        f"{optimal}/{len(cpu_times)} proven optimal, {infeasible} proven infeasible; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
        f"on {os.cpu_count()} CPUs"
    )
    print(machine_speed.describe())
    print(
        f"targets: every case proven (OPTIMAL, or INFEASIBLE over the stack's whole space) "
        f"{'met' if optimal + infeasible == len(cpu_times) else 'NOT met'}; "
        f"median ≤ {TARGETS['median']} s {'met' if med <= TARGETS['median'] else 'NOT met'}; "
        f"worst ≤ {TARGETS['worst']} s {'met' if worst <= TARGETS['worst'] else 'NOT met'}"
    )
    if not args.k:
        skipped = published_cases()[1]
        print(f"\n{len(skipped)} published runs the planner cannot express:")
        for rid, why in skipped.items():
            print(f"  {rid[:46]:46s} {'; '.join(why)}")


if __name__ == "__main__":
    main()
