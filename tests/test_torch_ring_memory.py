"""What torch's experimental ring attention holds in memory (cost model 55): the buffers of one attention backward
under torchtitan's default all-gather rotation (``workload.context_parallel.torch_ring_buffer_bytes``), where a rank's
memory counts them (``memory.rank_buffers``: against the loss's tensors, never with them) and that the memory screens
read the same bytes as the priced class, each against a hand count from torch
``distributed/tensor/experimental/_attention.py`` (``_templated_ring_attention_backward``, ``_AllGatherRotater``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from planner.compose.context_parallel import class_terms, memory_class_terms, ring_buffer_bytes
from planner.compose.cost import Candidate, Context
from planner.compose.memory import rank_buffers
from planner.specs import ClusterSpec, TrainingSpec
from planner.specs.catalog import get_gpu, get_model
from planner.workload.context_parallel import torch_ring_buffer_bytes


def hand(heads_local: int, mbs: int, seq: int, cp: int) -> int:
    """The backward's buffers in bytes, counted tensor by tensor (bf16 = 2, fp32 = 4, head dim 128)."""
    if cp == 1:
        return 0
    q = mbs * seq * heads_local * 128  # elements of one rank's queries = of its repeated K, of V
    gathered = cp * (q + q) * 2  # all_gather_tensor(cat(K, V)) of the cp ranks, bf16
    contiguous = (q + q) * 2  # key.contiguous(), value.contiguous()
    dq_acc = q * 4  # zeros_like(query, dtype=float32)
    dkv_held = (q + q) * 4  # grad_key, grad_value (received / _partial_update)
    dkv_sent = (q + q) * 4  # torch.cat([grad_key.flatten(), grad_value.flatten()])
    dkv_recv = (q + q) * 4  # permute_tensor's output on this rank
    block = 3 * q * 2  # grad_query_, grad_key_, grad_value_ of the flash backward, bf16
    return gathered + contiguous + dq_acc + dkv_held + dkv_sent + dkv_recv + block


# (model, micro-batch, local tokens, tp, cp, query heads per rank)
CASES = [
    ("llama3.1-8b", 1, 32768, 1, 1, 32),
    ("llama3.1-8b", 1, 32768, 1, 2, 32),
    ("llama3.1-8b", 1, 32768, 1, 8, 32),
    ("llama3.1-8b", 2, 8192, 2, 4, 16),
    ("llama3-405b", 1, 32768, 8, 2, 16),
    ("llama3-405b", 1, 32768, 8, 8, 16),
]


@pytest.mark.parametrize(("model", "mbs", "seq", "tp", "cp", "heads"), CASES)
def test_ring_backward_buffers(model, mbs, seq, tp, cp, heads):
    assert torch_ring_buffer_bytes(get_model(model), mbs, seq, tp, cp, 2) == hand(heads, mbs, seq, cp)


def test_the_405b_ring_at_cp_8_in_gib():
    # one 32 K-token sequence, 16 heads a rank: 0.25 GiB of K + V a CP rank, gathered from 8; 2.375 GiB besides
    assert torch_ring_buffer_bytes(get_model("llama3-405b"), 1, 32768, 8, 8, 2) == int((8 * 0.25 + 2.375) * 2**30)


# (recompute_tmp, z3_tmp, p2p, loss, cp_tmp, pp, rank, expected): the loss's tensors and the ring's are never both held
BUFFER_CASES = [
    (10, 3, 1, 40, 7, 1, 0, 10 + 3 + 40),  # one rank: the loss's 40 > the ring's 7
    (10, 3, 1, 5, 7, 1, 0, 10 + 3 + 7),  # the ring's 7 > the loss's 5
    (10, 3, 1, 40, 7, 4, 1, 10 + 3 + 2 * 1 + 7),  # a middle pipeline rank: no loss, two p2p buffers, the ring
    (10, 3, 1, 40, 7, 4, 3, 10 + 3 + 2 * 1 + 40),  # the LM head's rank
    (10, 3, 1, 40, 0, 4, 1, 10 + 3 + 2 * 1),  # no CP
]


@pytest.mark.parametrize(("rtmp", "z3", "p2p", "loss", "ring", "pp", "r", "expected"), BUFFER_CASES)
def test_rank_buffers_take_the_larger_of_loss_and_ring(rtmp, z3, p2p, loss, ring, pp, r, expected):
    s = SimpleNamespace(recompute_tmp=rtmp, z3_tmp=z3, p2p_bytes=p2p, logits_fp32=loss, cp_tmp=ring)
    assert rank_buffers(s, SimpleNamespace(pp=pp), r) == expected  # type: ignore[arg-type]


def ctx_of(stack: str) -> Context:
    return Context(
        model=get_model("llama3.1-8b"),
        gpu=get_gpu("h100-sxm5-80gb"),
        cluster=ClusterSpec(gpu="h100-sxm5-80gb", num_nodes=1, gpus_per_node=8),
        training=TrainingSpec(global_batch_size=8, seq_len=65536, stack=stack),
    )


# (stack, cp, exchange, expected bytes): torch's ring only (torchtitan's all-gather rotation), at s / cp local tokens
STACK_CASES = [
    ("torchtitan", 4, "all_gather", hand(32, 1, 65536 // 4, 4)),
    ("torchtitan", 2, "all_gather", hand(32, 1, 65536 // 2, 2)),
    ("torchtitan", 1, "all_gather", 0),
    ("megatron", 4, "all_gather", 0),
]


@pytest.mark.parametrize(("stack", "cp", "comm", "expected"), STACK_CASES)
def test_priced_and_screened_classes_hold_the_ring(stack, cp, comm, expected):
    ctx = ctx_of(stack)
    c = Candidate(1, 1, 8 // cp, 1, "1f1b", 1, "full", False, 3, cp=cp, cp_comm=comm)
    assert ring_buffer_bytes(ctx, c) == expected
    assert class_terms(ctx, c).cp_tmp == memory_class_terms(ctx, c).cp_tmp == expected
