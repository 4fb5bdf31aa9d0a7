"""torchtitan's context parallelism as torch's experimental ``context_parallel`` runs it (cost model 44): the collectives
of ``_AllGatherRotater`` and the fp32 dK/dV ring, the memory-bound passes of ``_SDPAMerger`` and the backward's fp32
accumulation (``planner.workload.context_parallel``), and what they add to a torchtitan CP block (compose), each against
a hand count from torch ``distributed/tensor/experimental/_attention.py`` (late 2024)."""

from __future__ import annotations

import pytest

from planner.compose.context_parallel import cp_exposed, ring_pass_seconds, torch_ring
from planner.compose.cost import Candidate, Context
from planner.specs import ClusterSpec, TrainingSpec
from planner.specs.catalog import get_gpu, get_model
from planner.workload.context_parallel import cp_block_comms, kv_bytes, torch_ring_passes

# (local tokens, tp): one rank's K and V repeated to the 32 query heads of Llama 3.1 8B (head dim 128, bf16) against
# the 8 KV heads the other stacks exchange.
KV_CASES = [
    (32768, 1, 2 * 32768 * 32 * 128 * 2, 2 * 32768 * 8 * 128 * 2),
    (8192, 2, 2 * 8192 * 16 * 128 * 2, 2 * 8192 * 4 * 128 * 2),
]


@pytest.mark.parametrize(("seq", "tp", "repeated", "plain"), KV_CASES)
def test_torchtitan_exchanges_k_and_v_at_the_query_heads(seq, tp, repeated, plain):
    m = get_model("llama3.1-8b")
    assert kv_bytes(m, 1, seq, tp, 2, repeated=True) == repeated
    assert kv_bytes(m, 1, seq, tp, 2) == plain


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_torch_all_gather_and_fp32_dkv_ring(cp):
    m = get_model("llama3.1-8b")
    kvr = 2 * 32768 * 32 * 128 * 2
    c = cp_block_comms(m, cp, "all_gather", 1, 32768, 1, 2, torch_ring=True)
    # forward: one all-gather of cat(K, V) beside the first block; nothing blocking
    assert [(x.op, x.nbytes, x.count) for x in c.fwd_ring] == [("all_gather", cp * kvr, 1)] and not c.fwd_blocking
    # backward: the same gather, then cp − 1 fp32 dK/dV sends beside the blocks, the last one exposed; no reduce-scatter
    assert [(x.op, x.nbytes, x.count) for x in c.bwd_ring] == [
        ("all_gather", cp * kvr, 1),
        ("send_recv", 2 * kvr, cp - 1),
    ]
    assert [(x.op, x.nbytes, x.count) for x in c.bwd_blocking] == [("send_recv", 2 * kvr, 1)]
    assert c.ring_size == cp


def hand_passes(cp: int, fused: bool) -> tuple[int, int]:
    """Bytes per element n of one rank's queries, β = 2, fp32 = 4, counted line by line from torch's _attention.py."""
    fwd = 2 * (2 + 2)  # key.contiguous(), value.contiguous(): read + write bf16
    cats = 1 if fused else cp - 1  # compiled: the cats the all-gather rotater never reads are dead code (Inductor)
    fwd += cats * (4 + 4)  # torch.cat([key.flatten(), value.flatten()]) before each send but the last
    fwd += 2 + 4  # the first block's out.to(float32)
    merge = (4 + 2 + 4) if fused else (2 + 4) + (8 + 4) + (4 + 4) + (8 + 4)  # cast; out − out_b; × sigmoid; out − ·
    fwd += (cp - 1) * merge
    fwd += 4 + 2  # results(): out.to(bf16)
    bwd = 3 * 4  # zeros_like(query/key/value, dtype=float32)
    bwd += 2 * (2 + 2) + cats * (4 + 4)  # contiguous K, V; cat before each send but the last
    bwd += cp * (3 * (4 + 2 + 4) + (8 + 8))  # dQ, dK, dV += block grads (fp32 += bf16); cat(dK, dV) fp32 to send
    bwd += (cp - 1) * 2 * (4 + 4)  # _partial_update's torch.cat of dK and dV after the first block
    bwd += (4 + 2) + (8 + 4)  # grad_query.to(bf16), the received dK/dV .to(bf16)
    return fwd, bwd


@pytest.mark.parametrize("cp", [2, 4, 8])
@pytest.mark.parametrize("fused", [False, True])
def test_merge_and_accumulation_passes(cp, fused):
    assert torch_ring_passes(1, cp, 2, fused) == hand_passes(cp, fused)
    assert torch_ring_passes(1000, cp, 2, fused) == tuple(1000 * x for x in hand_passes(cp, fused))


def titan_ctx(stack: str = "torchtitan") -> Context:
    return Context(
        model=get_model("llama3.1-8b"),
        gpu=get_gpu("h100-sxm5-80gb"),
        cluster=ClusterSpec(gpu="h100-sxm5-80gb", num_nodes=1, gpus_per_node=8),
        training=TrainingSpec(global_batch_size=1, seq_len=262144, stack=stack),
    )


def test_passes_only_on_torchtitan_and_at_achieved_hbm():
    c = Candidate(1, 1, 1, 1, "1f1b", 1, "full", False, 3, cp=8, cp_comm="all_gather")
    ctx = titan_ctx()
    assert torch_ring(ctx)
    n = 32768 * 32 * 128  # one rank's queries: 32 K local tokens × 32 heads × 128
    rate = ctx.gpu.hbm_bandwidth_GBps * 1e9 * 0.90  # an fp32 tensor of n is ≥ 100 MB: 0.90 of the datasheet rate
    f, b = ring_pass_seconds(ctx, c)
    hf, hb = hand_passes(8, fused=False)  # the preset's eager kernels
    assert f == pytest.approx(hf * n / rate) and b == pytest.approx(hb * n / rate)
    # full recomputation reruns the forward (its exchange and passes) in backward
    ef, eb = cp_exposed(ctx, c)
    assert ef >= f and eb >= b + f
    other = titan_ctx("megatron")
    assert not torch_ring(other) and ring_pass_seconds(other, c) == (0.0, 0.0)
