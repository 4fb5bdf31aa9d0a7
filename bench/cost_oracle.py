"""An exact oracle of the cost model: every integer it prices, over a fixed set of requests.

For each request it writes the class costs of every class the search may visit (``ClassCosts``: chunk
times, lags, the TP and ZeRO-3 parts, activation peaks, the shared end-of-step and memory terms, FLOPs),
the evaluation of each class at its even cut, and the planner's answer (``plan``, top 3) without its
timings. A refactor that leaves the cost model alone leaves this output byte-identical; compare digests:

    python bench/cost_oracle.py --out before.json     # on the old code
    python bench/cost_oracle.py --out after.json      # on the new code; then cmp before.json after.json

(The answer of ``bench/bench_fidelity.py --json`` is the second half of the oracle.)
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner import plan  # noqa: E402
from planner.answer.request import context  # noqa: E402
from planner.compose.cost import class_costs, evaluate  # noqa: E402
from planner.search.space import enumerate_candidates  # noqa: E402
from planner.specs import HostDispatch, PlanRequest  # noqa: E402
from planner.specs.layout import even_stage_layers  # noqa: E402
from tests.host_support import CPU  # noqa: E402

#: A host "GPU" (the tests' slow host), to which every measured dispatch class is added (distinct values, so a
#: class priced in the wrong place shows).
HOST = CPU


def _host_dispatch() -> HostDispatch:
    values: dict[str, Any] = {}
    for i, name in enumerate(HostDispatch.model_fields):
        if "bytes" in name:
            values[name] = 1 << (16 + i % 4)
        elif name == "cpu_share":
            values[name] = 0.45
        else:
            values[name] = (3 + i) * 1.5
    return HostDispatch(**values)


def _gpu(model: str, gpu: str, nodes: int, gpn: int, gbs: int, seq: int, **extra: Any) -> dict:
    return {
        "model": model,
        "cluster": {"gpu": gpu, "num_nodes": nodes, "gpus_per_node": gpn},
        "training": {"global_batch_size": gbs, "seq_len": seq, **extra.pop("training", {})},
        **extra,
    }


def requests() -> list[tuple[str, dict]]:
    host = HOST.model_copy(update={"host_dispatch": _host_dispatch()}).model_dump()
    cases: list[tuple[str, dict]] = [
        ("llama3-70b h100 64", _gpu("llama3-70b", "h100-sxm5-80gb", 8, 8, 512, 8192)),
        ("gpt3-175b a100 1024", _gpu("gpt3-175b", "a100-sxm4-80gb", 128, 8, 1536, 2048)),
        (
            "llama3-8b h100 16 megatron",
            _gpu("llama3-8b", "h100-sxm5-80gb", 2, 8, 256, 8192, training={"stack": "megatron"}),
        ),
        (
            "llama2-7b a100 8 torchtitan",
            _gpu("llama2-7b", "a100-sxm4-80gb", 1, 8, 64, 4096, training={"stack": "torchtitan"}),
        ),
        (
            "gpt3-13b a100-40 32 deepspeed",
            _gpu("gpt3-13b", "a100-sxm4-40gb", 4, 8, 512, 2048, training={"stack": "deepspeed"}),
        ),
        ("llama3-405b h100 128", _gpu("llama3-405b", "h100-sxm5-80gb", 16, 8, 256, 8192)),
        ("tiny-gpt h100 4", _gpu("tiny-gpt", "h100-sxm5-80gb", 1, 4, 8, 64)),
        (
            "tiny-gpt host 4",
            {
                **_gpu("tiny-gpt", "h100-sxm5-80gb", 1, 4, 8, 64, training={"precision": "fp32"}),
                "cluster": {"gpu": host, "num_nodes": 1, "gpus_per_node": 4},
            },
        ),
        (
            "tiny-gpt host 2 nodes",
            {
                **_gpu("tiny-gpt", "h100-sxm5-80gb", 1, 4, 16, 64, training={"precision": "fp32"}),
                "cluster": {"gpu": host, "num_nodes": 2, "gpus_per_node": 2},
            },
        ),
        ("qwen2.5-7b b200 8", _gpu("qwen2.5-7b", "b200-sxm-192gb", 1, 8, 128, 4096)),
    ]
    return cases


def _plain(x: Any) -> Any:
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return {k: _plain(v) for k, v in zip(x._fields, x, strict=True)}
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, float):
        return repr(x)
    return x


def oracle(name: str, body: dict) -> dict:
    req = PlanRequest.model_validate(body)
    ctx = context(req)
    classes = []
    for cand in enumerate_candidates(ctx, req.parallel, req.options):
        cc = class_costs(ctx, cand)
        row = _plain(cc)
        n = even_stage_layers(ctx.model.num_layers, cand.chunks)
        if n is not None and min(n) > 0:
            ev = evaluate(cc, n)
            row["even"] = [n, ev.objective_ns, ev.makespan_ns, ev.end_ns, ev.memory_bytes]
        classes.append(row)
    resp = plan(body | {"top_k": 3})
    answer = resp.model_dump(mode="json", exclude={"solver": {"wall_time_s"}})
    for p in answer.get("plans", []):
        p.get("inputs", {}).pop("planned_at", None)
    return {"name": name, "classes": classes, "answer": answer}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", default=None, help="one request by name")
    args = ap.parse_args()
    out = [oracle(n, b) for n, b in requests() if args.only in (None, n)]
    text = json.dumps(out, indent=1, sort_keys=True, default=str)
    args.out.write_text(text)
    for row in out:
        digest = hashlib.sha256(json.dumps(row, sort_keys=True, default=str).encode()).hexdigest()[:16]
        print(f"{row['name']:<32} {len(row['classes']):>5} classes  {digest}")
    print(f"all {hashlib.sha256(text.encode()).hexdigest()[:16]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
