"""``memory.rank_memory`` (each chunk's one copy priced once per rank, the pending gradients once per set of chunks
done) against the rank's peaks from its terms (``memory.memory_terms``, every peak priced on its own), rank by rank
on random cuts of classes with and without chunks done, dense and MoE."""

from __future__ import annotations

import random

import pytest

from planner.answer.request import context
from planner.compose.cost import class_costs
from planner.compose.memory import memory_terms, peaks, rank_memory
from planner.search.space import enumerate_candidates
from planner.specs import PlanRequest

REQUESTS = [
    ("mixtral-8x22b", "h100-sxm5-80gb", 16, 8, 256, 4096, {"stack": "megatron"}),
    ("deepseek-v3", "h100-sxm5-80gb", 32, 8, 1920, 4096, {"stack": "megatron"}),
    (
        "llama3-70b",
        "h100-sxm5-80gb",
        8,
        8,
        1024,
        8192,
        {"precision": "fp8", "fp8_recipe": "tensorwise", "stack": "torchtitan"},
    ),
    ("llama4-maverick", "h100-sxm5-80gb", 8, 8, 512, 4096, {"stack": "torchtitan"}),
]


def random_cut(rng: random.Random, L: int, chunks: int) -> list[int]:
    cuts = sorted(rng.sample(range(1, L), chunks - 1))
    return [b - a for a, b in zip([0, *cuts], [*cuts, L])]


@pytest.mark.parametrize("spec", REQUESTS, ids=lambda s: s[0])
def test_rank_memory_is_the_highest_peak(spec: tuple) -> None:
    model, gpu, nodes, gpn, gbs, seq, extra = spec
    req = PlanRequest.model_validate(
        {
            "model": model,
            "cluster": {"gpu": gpu, "num_nodes": nodes, "gpus_per_node": gpn},
            "training": {"global_batch_size": gbs, "seq_len": seq, **extra},
        }
    )
    ctx, rng = context(req), random.Random(len(model))
    cands = enumerate_candidates(ctx, req.parallel, req.options)
    for c in cands[:: max(1, len(cands) // 30)]:
        cc = class_costs(ctx, c)
        if cc.chunks > cc.num_layers:
            continue
        for _ in range(3):
            n = random_cut(rng, cc.num_layers, cc.chunks)
            for r in range(c.pp):
                done = None if cc.done is None else cc.done[r]
                t = memory_terms(cc.shared, c, n, r, cc.live[r], done=done)
                assert rank_memory(cc, n, r) == max(peaks(t))
