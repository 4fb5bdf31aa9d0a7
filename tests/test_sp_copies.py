"""torchtitan's sequence-parallel layout copies (``workload.sp_copies``, cost model 60): each all-gather along the
sequence (b > 1) is followed, and each reduce-scatter along it preceded, by a cat that reads and writes the whole
tensor once; async TP's fused pairs instead copy their local shards and sum their partials. Checked against a hand
count of the passes and their HBM time."""

from __future__ import annotations

import pytest

from planner.answer.request import context, parse_request
from planner.compose.layer_group import dense_parts
from planner.specs.stacks import STACKS
from planner.workload.sp_copies import sp_copy_bytes


def body(stack: str = "torchtitan") -> dict:
    return {
        "model": "llama3-8b",
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 8, "gpus_per_node": 8},
        "training": {"global_batch_size": 96, "seq_len": 8192, "stack": stack},
        "parallel": {"tp": 8, "dp": 8, "pp": 1, "sequence_parallel": True},
        "options": {"time_limit_s": 20, "num_workers": 1},
    }


ACT = 12 * 8192 * 4096 * 2  # one [b, s, h] bf16 residual-stream tensor of the async-TP benchmark's 8B rows


def test_counts_by_hand():
    titan = STACKS["torchtitan"]
    c = 2.0 * ACT  # one copy: the whole tensor read and written
    # vanilla TP, op-level SAC: forward 2 AG + 2 RS; backward 2 RS + 2 AG + the 2 rerun AGs
    f, b = sp_copy_bytes(titan, 12, 8, True, "selective", ACT, ACT, False)
    assert (sum(f), sum(b)) == (4 * c, 6 * c) and len(f) == 4 and len(b) == 6
    # async TP fuses the 4 forward pairs and the 2 backward AGs: no layout copy for those, but each fused AG copies
    # its local shard twice (2 x 2 x ACT/8) and each fused RS sums the 8 partials (read ACT, write ACT/8); the
    # 2 backward RS and the 2 rerun AGs keep their layout copies
    f, b = sp_copy_bytes(titan, 12, 8, True, "selective", ACT, ACT, True)
    shard_copies, partial_sum = 2 * (2 * ACT / 8), ACT + ACT / 8
    assert sum(f) == pytest.approx(2 * shard_copies + 2 * partial_sum) and len(f) == 6
    assert sum(b) == pytest.approx(2 * shard_copies + 4 * c) and len(b) == 8
    # b = 1: the fused passes alone
    f1, b1 = sp_copy_bytes(titan, 1, 8, True, "selective", ACT, ACT, True)
    assert sum(f1) == pytest.approx(sum(f)) and sum(b1) == pytest.approx(2 * shard_copies)
    # full recomputation reruns the forward's copies; no recomputation, none rerun
    assert sum(sp_copy_bytes(titan, 12, 8, True, "full", ACT, ACT, False)[1]) == 8 * c
    assert sum(sp_copy_bytes(titan, 12, 8, True, "none", ACT, ACT, False)[1]) == 4 * c
    # FP8 all-gathers copy 1-byte elements; reduce-scatters stay 16-bit
    f, _ = sp_copy_bytes(titan, 12, 8, True, "none", ACT, ACT / 2, False)
    assert sum(f) == 2 * ACT + 2 * c
    # b = 1 (a view for the gather), no SP, no TP, a stack whose sequence dim leads: nothing
    assert sp_copy_bytes(titan, 1, 8, True, "selective", ACT, ACT, False) == ((), ())
    assert sp_copy_bytes(titan, 12, 8, False, "selective", ACT, ACT, False) == ((), ())
    assert sp_copy_bytes(titan, 12, 1, True, "selective", ACT, ACT, False) == ((), ())
    assert sp_copy_bytes(STACKS["megatron"], 12, 8, True, "selective", ACT, ACT, False) == ((), ())


def test_priced_at_hbm_bandwidth():
    """The block's extra forward/backward seconds are the copies at the achieved HBM rate of a > 100 MB transfer
    (``HBM_EFFICIENCY`` 0.90), × the memory residual: 4 and 6 copies of 2 × 805 MB on an H100 (3.35 TB/s)."""
    ctx = context(parse_request(body()))
    d = dense_parts(ctx, 12, 8, True, "selective", False)
    one = 2 * ACT / (ctx.gpu.hbm_bandwidth_GBps * 1e9 * 0.90) * ctx.residuals.memory_scale
    assert d.f_more == pytest.approx(4 * one) and d.b_more == pytest.approx(6 * one)
    assert 0.45e-3 < one / ctx.residuals.memory_scale < 0.55e-3  # 1.61 GB at 3.0 TB/s achieved
    other = context(parse_request(body("megatron")))
    m = dense_parts(other, 12, 8, True, "selective", False)
    assert (m.f_more, m.b_more) == (0.0, 0.0)
