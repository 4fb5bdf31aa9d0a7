"""FSDP2 under ``torch.distributed.pipelining`` holds a stage's gradients unsharded, in its reduce dtype, across the
micro-batches of a step (cost model 47; ``workload.accumulation.accumulated_grad_bytes``, ``memory.state_bytes``).

The pipeline stage turns gradient sync off on every backward but the last (torch 2.13.0
``distributed/pipelining/stage.py:844-847``; ``perform_reduce_grad`` :1164-1190 turns it back on for one
``post_backward``), and FSDP2 then replaces each unsharded 16-bit ``.grad`` by its copy in the reduce dtype and adds
the next micro-batches into it (``_fsdp_param_group.py:605-611``, ``_fsdp_param.py:802-819``): with torchtitan's
``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=float32)``, 4 bytes per parameter of the stage, at ZeRO-2
(``reshard_after_forward=False``, torchtitan's default under PP) as at ZeRO-3. The byte counts below are written out
by hand from Llama 3 8B's shapes, not taken from the planner."""

from __future__ import annotations

import pytest

from planner.api import estimate_plan
from planner.compose.memory import GIB, state_bytes
from planner.workload.accumulation import accumulated_grad_bytes, dp_schedule

# Llama 3 8B (h 4096, FFN 14336, 8 KV heads of 128, vocabulary 128256): one block's parameters, by hand
H, F, KV, V = 4096, 14336, 8 * 128, 128256
BLOCK = 2 * H * H + 2 * H * KV + 3 * H * F + 2 * H  # wq, wo; wk, wv; w1, w2, w3; two RMSNorm weights
EMBED = V * H
RANK0_OF_2 = 16 * BLOCK + EMBED  # pp 2 cut 16 / 16: the first stage holds the embedding
WHOLE = 32 * BLOCK + EMBED + V * H + H  # pp 1: every block, the embedding, the LM head and the final norm

#: (bytes per parameter of the whole accumulated gradient by engine, training and reduce element size)
ACCUMULATED = [
    ("fsdp2", 2, 4, 4),  # torchtitan: bf16 .grad upcast to the fp32 reduce dtype (to_accumulated_grad_if_needed)
    ("fsdp2_deferred", 2, 4, 4),  # the bundled runtime
    ("fsdp2", 2, 2, 2),  # reduce_dtype = param dtype: no upcast, autograd accumulates the bf16 .grad
    ("fsdp1_no_sync", 2, 4, 2),  # FSDP1 under no_sync: the unsharded flat parameter's gradient, its own dtype
]


@pytest.mark.parametrize(("mode", "elt", "reduce_elt", "expect"), ACCUMULATED)
def test_accumulated_gradient_dtype(mode: str, elt: int, reduce_elt: int, expect: int) -> None:
    assert accumulated_grad_bytes(mode, elt, reduce_elt) == expect  # type: ignore[arg-type]


#: (precision, ZeRO stage, dp, layout, whole-gradient bytes) -> (weights, gradients, optimizer) bytes per parameter
STATES = [
    ("bf16", 2, 8, "master", 0, (2, 2 / 8, 12 / 8)),  # ZeRO-2 reduced every micro-batch: sharded 16-bit gradients
    ("bf16", 2, 8, "master", 4, (2, 4, 12 / 8)),  # deferred under PP: the whole fp32 accumulation
    ("bf16", 3, 8, "master", 4, (2 / 8, 4, 12 / 8)),
    ("bf16", 3, 8, "fsdp2", 4, (4 / 8, 4, 8 / 8)),  # the runtime's layout: fp32 parameters sharded, Adam moments
    ("bf16", 2, 8, "fsdp2", 4, (4 / 8 + 2, 4, 8 / 8)),
    ("fp16", 3, 4, "master", 2, (2 / 4, 2, 12 / 4)),  # FSDP1 no_sync: 16-bit whole gradients
    ("bf16", 1, 8, "master", 4, (2, 2, 12 / 8)),  # ZeRO-1's gradients are whole anyway (16-bit): unchanged
]


@pytest.mark.parametrize(("precision", "zero", "dp", "layout", "whole", "expect"), STATES)
def test_state_bytes_with_whole_gradients(
    precision: str, zero: int, dp: int, layout: str, whole: int, expect: tuple[float, float, float]
) -> None:
    assert tuple(state_bytes(precision, "adam", zero, dp, layout, whole)) == pytest.approx(expect)


def test_whole_gradients_where_a_sharded_gradient_stage_defers_its_reduction() -> None:
    """ZeRO-2 and ZeRO-3 under a pipeline schedule on FSDP2; not ZeRO-0/1 (whole anyway), not DeepSpeed (reduces
    every micro-batch), not Megatron (ZeRO-0/1 only)."""
    assert [dp_schedule("fsdp2", z, True).whole_grads for z in range(4)] == [False, False, True, True]
    assert [dp_schedule("fsdp2", z, False).whole_grads for z in range(4)] == [False] * 4
    assert [dp_schedule("deepspeed", z, False).whole_grads for z in range(4)] == [False] * 4


def _request(stack: str, pp: int, zero: int) -> dict:
    par = {"tp": 1, "pp": pp, "micro_batch_size": 1, "zero_stage": zero, "schedule": "1f1b"}
    if pp == 2:
        par["stage_layers"] = [16, 16]
    return {
        "model": "llama3-8b",
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 2, "gpus_per_node": 8},
        "training": {"global_batch_size": 64, "seq_len": 4096, "stack": stack},
        "parallel": par,
        "options": {"memory_headroom": 0.0},
    }


#: (stack, pp, ZeRO stage) -> rank 0's gradient bytes, by hand: 16 GPUs, so dp = 16 / pp
GRADIENTS = [
    ("torchtitan", 2, 2, 4 * RANK0_OF_2),  # fp32, unsharded (was 2 / dp bytes)
    ("torchtitan", 2, 3, 4 * RANK0_OF_2),  # fp32, unsharded (was 2 bytes: the parameter dtype)
    ("torchtitan", 1, 2, 2 * WHOLE / 16),  # no pipeline: reduce-scattered every micro-batch, sharded
    ("torchtitan", 1, 3, 2 * WHOLE / 16),
    ("meshplan", 2, 3, 4 * RANK0_OF_2),  # the bundled runtime runs the same torch pipelining + FSDP2
    ("meshplan", 2, 2, 4 * RANK0_OF_2),  # fsdp2 layout: whole fp32 below ZeRO-3 (unchanged)
    ("megatron", 2, 1, 4 * RANK0_OF_2),  # no FSDP2: Megatron's whole fp32 main_grad buffer under bf16 (cost model 51)
]


@pytest.mark.parametrize(("stack", "pp", "zero", "expect"), GRADIENTS)
def test_rank0_gradients_against_hand_counts(stack: str, pp: int, zero: int, expect: float) -> None:
    mem = estimate_plan(_request(stack, pp, zero)).estimate.memory_per_stage[0]
    assert mem.gradients_gib == pytest.approx(expect / GIB, rel=1e-4)
