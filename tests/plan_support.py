"""A plan request from the fields the search tests tabulate (model, GPU, nodes, GPUs a node, global batch, sequence,
other training fields): one builder instead of the same dict spelt out in each test."""

from __future__ import annotations

from typing import Any

from planner.specs import PlanRequest


def search_request(
    model: Any, gpu: str, nodes: int, gpn: int, gbs: int, seq: int, training: dict | None = None
) -> PlanRequest:
    return PlanRequest.model_validate(
        {
            "model": model,
            "cluster": {"gpu": gpu, "num_nodes": nodes, "gpus_per_node": gpn},
            "training": {"global_batch_size": gbs, "seq_len": seq, **(training or {})},
        }
    )
