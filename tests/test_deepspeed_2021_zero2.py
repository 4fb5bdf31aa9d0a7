"""Issue 27 §2: ZeRO-2 as DeepSpeed v0.5.0 issues it (``deepspeed-2021``): one ``dist.reduce`` per owner slice of each
gradient bucket (``planner.workload.zero2_reduce``, deepspeed/runtime/zero/stage2.py:853-939) priced as NCCL's ring
reduce (``planner.pricing.nccl``, tuning.cc of v2.10.3-1 / v2.23.4-1) on the compute stream. The slices against an
element-by-element walk of the flat buffers, NCCL's reduce against the tuner's formulas written out by hand."""

from __future__ import annotations

import math

import pytest

from planner.answer.request import context, parse_request
from planner.compose.layer_group import layer_group
from planner.compose.terms import shared_terms
from planner.pricing.collectives import Groups, owner_reduce_seconds
from planner.pricing.grad_add import grad_add_seconds
from planner.pricing.nccl import Topo, pairs
from planner.specs.catalog import get_model
from planner.specs.stacks import STACKS
from planner.workload.accumulation import add_bytes, dp_schedule
from planner.workload.zero2_reduce import DECAY, NO_DECAY, module_params, owner_reduces


def _walk(params: list[tuple[int, int]], dp: int, bucket: int) -> list[int]:
    """Independent: every element's owner in its group's padded flat buffer, the bucket cut by the overflow rule,
    runs of one owner in bucket order (each gradient's elements in offset order, gradients in reverse)."""
    flat: dict[int, list[int]] = {0: [], 1: []}
    where = []
    for g, n in params:
        where.append((g, len(flat[g])))
        flat[g] += [0] * n
    owner = {g: [i // math.ceil(len(f) / dp) for i in range(len(f))] for g, f in flat.items() if f}
    out, run, last, filled = [], 0, None, 0
    for (g, n), (_, o) in zip(reversed(params), reversed(where)):
        if filled + n > bucket:
            out += [run] if run else []
            run, last, filled = 0, None, 0
        for i in range(o, o + n):
            if owner[g][i] != last:
                out += [run] if run else []
                run, last = 0, owner[g][i]
            run += 1
        filled += n
    return out + ([run] if run else [])


@pytest.mark.parametrize(
    ("params", "dp", "bucket"),
    [
        ([(DECAY, 10), (NO_DECAY, 4), (DECAY, 6)], 2, 12),
        ([(DECAY, 10), (NO_DECAY, 4), (DECAY, 6)], 3, 100),
        ([(NO_DECAY, 3), (DECAY, 50), (NO_DECAY, 5), (DECAY, 7), (NO_DECAY, 2)], 8, 20),
        ([(DECAY, 97), (NO_DECAY, 13)] * 5, 16, 150),
        ([(DECAY, 97), (NO_DECAY, 13)] * 5, 64, 1000),  # partitions of 8 and 2 elements
        ([(DECAY, 5), (DECAY, 300)], 4, 200),  # a gradient over the bucket: alone in its own
    ],
)
def test_the_owner_slices_match_an_element_walk(params, dp, bucket) -> None:
    assert list(owner_reduces(tuple(params), dp, bucket)) == _walk(params, dp, bucket)


def test_a_small_bucket_by_hand() -> None:
    """Groups [10, 6] (decay) and [4] (no decay) on 2 ranks: partitions of 8 and 2. Bucket order: the 6 (decay
    10..15: owner 1), the 4 (no decay 0..3: owners 0, 1), then the 10 overflows 12: bucket 1 = [6 → 1, 2 → 0,
    2 → 1]; bucket 2 = the 10 (decay 0..9: 8 → 0, 2 → 1)."""
    assert owner_reduces(((DECAY, 10), (NO_DECAY, 4), (DECAY, 6)), 2, 12) == (6, 2, 2, 8, 2)


def test_a_gpt_block_in_megatrons_groups() -> None:
    """GPT-3 1.3B (h 2048): embeddings, then per block ln1 (w, b), query_key_value (w, b), dense (w, b), ln2 (w, b),
    dense_h_to_4h (w, b), dense_4h_to_h (w, b), then the final LayerNorm; weights decay, norms and biases do not."""
    m = get_model("gpt3-1.3b")
    p = module_params(m, 1)
    h = 2048
    assert p[:2] == ((DECAY, 50257 * h), (DECAY, 2048 * h))
    block = ((NO_DECAY, h),) * 2 + ((DECAY, 3 * h * h), (NO_DECAY, 3 * h), (DECAY, h * h), (NO_DECAY, h))
    block += ((NO_DECAY, h),) * 2 + ((DECAY, 4 * h * h), (NO_DECAY, 4 * h), (DECAY, 4 * h * h), (NO_DECAY, h))
    assert p[2:-2] == block * 24 and p[-2:] == ((NO_DECAY, h), (NO_DECAY, h))
    assert sum(n for _, n in p) == sum(owner_reduces(p, 256, 500_000_000))


def _topo(n: int, ppn: int) -> Topo:
    return Topo(n=n, ppn=ppn, channels=8, bw_intra=24.0, bw_inter=24.0, gen="ampere", cpu="amd")


@pytest.mark.parametrize(
    ("era", "n", "ppn", "expect"),
    [
        # (LL, LL128, Simple) latency µs = base + nRanks × hop (tuning.cc reduce branch, sameChannels 0; Simple at the
        # tree's hop); busBw: 8 × 24 = 192 (≤ 235 on sm80, 2.10), LL ÷ 4 / × 0.5 under llMaxBw (AMD, ≥ 3 nodes: 19),
        # LL128 × 0.92 under 20 GB/s a channel
        ("2.10", 8, 8, ((3.6 + 8 * 0.47, 10.0 + 8 * 1.9, 8.4 + 8 * 28.0), (min(87.7, 48.0), 160.0, 192.0))),
        ("2.10", 384, 8, ((3.6 + 384 * 2.7, 10.0 + 384 * 4.0, 8.4 + 384 * 28.0), (19.0, 160.0, 192.0))),
        ("2.23", 32, 8, ((6.6 + 32 * 2.7, 14.0 + 32 * 4.0, 8.4 + 32 * 14.0), (19.0, 160.0, 192.0))),
    ],
)
def test_ncclReduce_is_a_ring_of_nranks_steps(era, n, ppn, expect) -> None:
    ps = pairs("reduce", _topo(n, ppn), era)
    assert [p.algo for p in ps] == ["ring"] * 3
    assert [p.lat_us for p in ps] == pytest.approx(expect[0])
    assert [p.alg_bw for p in ps] == [p.bus_bw for p in ps]  # nRanks / nsteps = 1: a reduce's bus bytes are its bytes
    assert [p.bus_bw for p in ps] == pytest.approx(expect[1])


BASE = {
    "model": "gpt3-1.3b",
    "cluster": {"gpu": "a100-sxm4-80gb", "num_nodes": 4, "gpus_per_node": 8},
    "training": {"global_batch_size": 64, "seq_len": 2048, "stack": "deepspeed-2021", "precision": "fp16"},
    "parallel": {"tp": 1, "pp": 1, "micro_batch_size": 1, "dp": 32, "zero_stage": 2, "recompute": "full"},
}


def test_the_backward_waits_for_its_reduces() -> None:
    """The ZeRO-2 block's backward per micro-batch = its compute + its share of the micro-batch's reduces, one after
    another at NCCL's reduce price (no overlap: ``overlap_comm`` off at stage 2); today's preset reduce-scatters."""
    assert (STACKS["deepspeed-2021"].zero2_reduce, STACKS["deepspeed"].zero2_reduce) == ("owner", "reduce_scatter")
    ctx = context(parse_request(BASE))
    s = shared_terms(ctx, 1, 1, False, "full", 2, 32)
    lg = layer_group(ctx, 1, 1, False, "full", False, 1, 1, "transformer_block")
    g = Groups.of(ctx, 1, 32)
    segs = owner_reduces(module_params(ctx.model, 1), 32, 500_000_000)
    secs = sum(ctx.comm.time("reduce", 2 * n, 32, g.dp_link, g.per_node) for n in segs)
    share = secs * lg.params[0] / sum(segs)
    assert owner_reduce_seconds(ctx, module_params(ctx.model, 1), 2, g, lg.params)[0] == pytest.approx(share)
    # + the gradient-accumulation pass (cost model 37: the reduced 1/dp shard added in place, 3e/dp bytes a parameter;
    # checked against hand formulas in tests/test_grad_add.py)
    add = add_bytes("autograd", "deepspeed", 2, dp_schedule("deepspeed", 2, False), "fp16", 2, 2, 32)
    assert add.each == pytest.approx(3 * 2 / 32)
    each = grad_add_seconds(ctx, "transformer_block", 1, 1, lg.params, add)[0][0]
    assert s.bwd.layer == round((lg.work_b[0] + share + each) * 1e9)
