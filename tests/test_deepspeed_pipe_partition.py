"""Cost model 41: DeepSpeed's PipelineEngine partitions its pipeline sends over the TP group (``Stack.p2p_scatter_gather``
on the ``deepspeed`` preset). With tp > 1 each rank sends its 1/tp of the activation (forward) and of its gradient
(backward) as a ``PartitionedTensor`` and the receiver all-gathers it over TP (``PartitionedTensor.full()``):
``pipe_partitioned`` / ``grad_partitioned`` default True (microsoft/DeepSpeed 38327e07f6 runtime/config.py:467-468),
``is_pipe_partitioned = is_model_parallel and ...`` (runtime/pipe/engine.py:144-145), the partition before the send
(engine.py:743-757, 1062-1075) and the gathers on arrival (engine.py:719-727, 824-845); both directions since v0.5.4
(e2fdd254e, "Big science related changes", 2021-09-29). ``deepspeed-2021`` (v0.5.0: ``is_grad_partitioned = False``)
keeps the whole sends. Each boundary's lag is checked against the hand formula: send(act / tp) over the boundary's
link + all_gather(act, tp) over NVLink."""

from __future__ import annotations

import pytest

from planner.specs.stacks import STACKS
from tests.p2p_support import assert_scattered_sends, assert_whole_sends

#: (preset, partitions its sends over TP, the code fact)
PRESETS = [
    ("deepspeed", True, "engine.py:144-145 is_pipe_partitioned / is_grad_partitioned = is_model_parallel and config"),
    ("deepspeed-2021", False, "v0.5.0 engine.py:113-114: activations partitioned, is_grad_partitioned = False"),
]


@pytest.mark.parametrize("stack,flag,fact", PRESETS, ids=[p[0] for p in PRESETS])
def test_which_deepspeed_presets_partition(stack: str, flag: bool, fact: str) -> None:
    assert STACKS[stack].p2p_scatter_gather is flag, fact


#: (pins, nodes, the link of every boundary, precision)
LAG_CASES = [
    ({"tp": 8, "pp": 4, "dp": 1}, 4, "inter_node", "bf16"),  # a stage per node: every boundary on the network
    ({"tp": 2, "pp": 4, "dp": 1}, 1, "intra_node", "bf16"),  # the pipeline inside a node
    ({"tp": 4, "pp": 2, "dp": 4}, 4, "inter_node", "fp16"),  # 16 GPUs a stage
    ({"tp": 4, "pp": 4, "dp": 2, "micro_batch_size": 2}, 4, "inter_node", "bf16"),
]


@pytest.mark.parametrize("pins,nodes,link,precision", LAG_CASES)
def test_a_partitioned_send_is_act_over_tp_plus_the_all_gather(pins: dict, nodes: int, link: str, precision: str):
    """Each boundary on ``deepspeed``: send(act / tp) + all_gather(act, tp) with act = s·b·h 16-bit bytes, blocking
    both ends (cost model 28); ``deepspeed-2021`` sends act whole over the same link."""
    assert_scattered_sends("deepspeed", nodes, link, precision, zero_stage=1, recompute="full", **pins)
    if precision == "fp16":  # v0.5.0 has no bf16
        assert_whole_sends("deepspeed-2021", nodes, link, precision, zero_stage=1, recompute="full", **pins)


def test_one_tp_rank_sends_whole() -> None:
    """tp = 1: no TP group to partition over (``is_model_parallel`` False): the send of act alone."""
    assert_whole_sends("deepspeed", 4, "inter_node", "bf16", zero_stage=1, recompute="full", tp=1, pp=4, dp=8)
