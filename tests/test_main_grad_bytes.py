"""Megatron's DDP keeps every gradient in a contiguous ``main_grad`` buffer in the dtype it reduces in, whole even
under the distributed optimizer (cost model 51; ``memory.state_bytes(main_grads=...)``).

Megatron-LM core_v0.16.1 ``megatron/training/arguments.py:711-724`` (``--bf16`` sets
``accumulate_allreduce_grads_in_fp32``), ``training.py:1295`` (``grad_reduce_in_fp32``),
``megatron/core/distributed/distributed_data_parallel.py:147`` (``grad_dtype = torch.float if grad_reduce_in_fp32
else param.dtype``). The expected bytes are Megatron's own table (``docs/user-guide/features/dist_optimizer.md``:
bf16 parameters with fp32 gradients 18 bytes per parameter, 6 + 12/d distributed; fp32 16, 8 + 8/d)."""

from __future__ import annotations

import pytest

from planner.api import estimate_plan
from planner.compose.memory import GIB, state_bytes

#: (precision, ZeRO stage, dp, main_grad bytes) -> bytes per parameter, Megatron's table
TABLE = [
    ("bf16", 0, 8, 4, 18),  # non-distributed optimizer
    ("bf16", 1, 8, 4, 6 + 12 / 8),  # distributed optimizer: the grad buffer whole
    ("bf16", 1, 64, 4, 6 + 12 / 64),
    ("fp32", 0, 8, 4, 16),
    ("fp32", 1, 8, 4, 8 + 8 / 8),
    ("bf16", 0, 8, 0, 16),  # no main_grad buffer (autograd's 16-bit .grad): as before
]


@pytest.mark.parametrize(("precision", "zero", "dp", "main", "expect"), TABLE)
def test_state_bytes_against_megatrons_table(precision: str, zero: int, dp: int, main: int, expect: float) -> None:
    assert state_bytes(precision, "adam", zero, dp, "master", 0, main).total == pytest.approx(expect)


# Llama 3 8B: the parameters of one GPU at tp 1, pp 1 (by hand: 32 blocks, embedding, LM head, final norm)
H, F, KV, V = 4096, 14336, 8 * 128, 128256
PARAMS = 32 * (2 * H * H + 2 * H * KV + 3 * H * F + 2 * H) + 2 * V * H + H


@pytest.mark.parametrize(
    ("stack", "precision", "grad_bytes"),
    [
        ("megatron", "bf16", 4),  # main_grad hooks (grad_add main_grad_fused): fp32 under bf16
        ("megatron", "fp16", 2),  # fp16: the buffer in the parameter dtype (no accumulate_allreduce_grads_in_fp32)
        ("torchtitan", "bf16", 2),  # no main_grad buffer: unchanged
    ],
)
def test_gradients_of_a_zero1_rank(stack: str, precision: str, grad_bytes: int) -> None:
    zero = 1 if stack == "megatron" else 0
    req = {
        "model": "llama3-8b",
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 2, "gpus_per_node": 8},
        "training": {"global_batch_size": 64, "seq_len": 2048, "stack": stack, "precision": precision},
        "parallel": {"tp": 1, "pp": 1, "micro_batch_size": 1, "zero_stage": zero, "recompute": "full"},
        "options": {"memory_headroom": 0.0},
    }
    mem = estimate_plan(req).estimate.memory_per_stage[0]
    assert mem.gradients_gib == pytest.approx(grad_bytes * PARAMS / GIB, rel=1e-4)
