"""A plan request from the fields the search tests tabulate (model, GPU, nodes, GPUs a node, global batch, sequence,
other training fields), and a random pricing context: one builder each instead of the same code spelt out in each test."""

from __future__ import annotations

import random
from typing import Any

from planner.compose.cost import Context
from planner.specs import ClusterSpec, PlanRequest, TrainingSpec
from planner.specs.catalog import get_gpu


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


def random_context(rng: random.Random, model: Any, gpu: str, training: TrainingSpec) -> Context:
    """A pricing context of ``model`` training as ``training`` on a small cluster of ``gpu`` drawn by ``rng`` (1–4
    nodes of 4 or 8 GPUs)."""
    nodes, gpn = rng.choice([(1, 8), (2, 8), (4, 8), (2, 4)])
    cluster = ClusterSpec(gpu=gpu, num_nodes=nodes, gpus_per_node=gpn)
    return Context(model=model, gpu=get_gpu(gpu), cluster=cluster, training=training)
