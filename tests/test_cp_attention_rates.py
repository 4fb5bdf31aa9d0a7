"""The attention core under context parallelism at the kernels it runs (cost model 63): the local causal square, then
cp − 1 load-balanced rectangles with no mask (torch ``_templated_ring_attention``: ``_is_causal_behavior`` is
``NOT_IS_CAUSAL`` for every block after the first; TE ``AttnFuncWithCPAndKVP2P``: half the KV or half the queries),
at FlashAttention-2's full-square rate (``pricing.gpu.FLASH_FULL_TFLOPS``); and the causal rate beyond the published
lengths (its masked diagonal shrinking as 1/L). Each case against a hand count from the figures' labels."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.compose.context_parallel import cp_view
from planner.compose.cost import Context
from planner.pricing.gpu import attention_time, cp_block_ratio, flash_rate
from planner.specs import ClusterSpec, TrainingSpec
from planner.specs.catalog import get_gpu, get_model


def ctx_of(
    seq: int, stack: str | dict = "torchtitan", gpu: str = "h100-sxm5-80gb", model: str = "llama3.1-8b"
) -> Context:
    return Context(
        model=get_model(model),
        gpu=get_gpu(gpu),
        cluster=ClusterSpec(gpu=gpu, num_nodes=1, gpus_per_node=8),
        training=TrainingSpec(global_batch_size=1, seq_len=seq, stack=stack),
    )


# (seq, TFLOP/s): FlashAttention-2 fwd+bwd without the causal mask, head dim 128, the labels of panel (b) of
# flash-attention assets/flash2_h100_fwd_bwd_benchmark.png (H100 SXM5, whose clock the catalog's H100 SXM has).
FULL_H100_128 = [(512, 248), (1024, 294), (2048, 320), (4096, 326), (8192, 335), (16384, 338), (65536, 338)]


@pytest.mark.parametrize(("seq", "tflops"), FULL_H100_128)
def test_full_square_rate_is_the_published_one(seq, tflops):
    assert flash_rate(ctx_of(seq), 128, seq, causal=False) == pytest.approx(tflops, rel=1e-9)


# (seq, causal TFLOP/s by hand): inside the table the causal panel's label (d); beyond 16K the diagonal's share of the
# time halves with each doubling: 1/R = 1/338 + (1/328 − 1/338)·16384/seq.
CAUSAL_H100_128 = [
    (8192, 308.0),
    (16384, 328.0),
    (32768, 1 / (1 / 338 + (1 / 328 - 1 / 338) / 2)),
    (131072, 1 / (1 / 338 + (1 / 328 - 1 / 338) / 8)),
]


@pytest.mark.parametrize(("seq", "tflops"), CAUSAL_H100_128)
def test_causal_rate_inside_and_beyond_the_table(seq, tflops):
    assert flash_rate(ctx_of(seq), 128, seq) == pytest.approx(tflops, rel=1e-12)


def test_no_full_table_for_the_triton_kernel():
    ctx = ctx_of(8192, stack={"base": "torchtitan", "flash_kernel": "triton"})
    assert ctx.stack.flash_kernel == "triton"
    assert flash_rate(ctx, 128, 8192, causal=False) is None
    assert flash_rate(ctx, 128, 32768) == flash_rate(ctx, 128, 16384)  # no full table: clamped as before


def flops_fwd(pairs: float, heads: int = 32, d: int = 128) -> float:
    """Forward FLOPs of ``pairs`` (query, key) pairs: QKᵀ and PV, 2·d each."""
    return 4.0 * pairs * d * heads


# (whole seq, cp): Llama 3.1 8B (32 heads of 128) on one H100 SXM, b = 1, tp = 1. Each rank: the causal square of its
# 2c = s/cp tokens ((2c)²/2 pairs at the causal rate of 2c), then cp − 1 rectangles of 2c × c pairs at the full rate
# of side c.
CP_CASES = [(65536, 2), (131072, 4), (262144, 8), (8192, 2), (16384, 4)]


@pytest.mark.parametrize(("seq", "cp"), CP_CASES)
def test_cp_attention_is_the_local_square_and_unmasked_rectangles(seq, cp):
    view = cp_view(ctx_of(seq), cp)
    c = seq // (2 * cp)
    causal = flash_rate(view, 128, 2 * c)
    full = flash_rate(view, 128, c, causal=False)
    assert causal is not None and full is not None
    hand = flops_fwd((2 * c) ** 2 / 2) / (causal * 1e12) + (cp - 1) * flops_fwd(2 * c * c) / (full * 1e12)
    f, b = attention_time(view, 1, 1)
    assert f == pytest.approx(hand, rel=1e-12)
    assert b == pytest.approx(2.5 * hand, rel=1e-12)  # FA2's backward, 2.5× the forward's FLOPs


@pytest.mark.parametrize(("seq", "cp"), [(65536, 2), (131072, 4), (262144, 8), (524288, 8)])
def test_long_cp_attention_costs_what_one_causal_call_does(seq, cp):
    """Where every block is past the table (c ≥ 16K), the local square's diagonal is 1/cp of the whole sequence's
    and the rectangles run at the full rate: a rank's attention is the whole causal call's ÷ cp."""
    whole = attention_time(ctx_of(seq), 1, 1)
    part = attention_time(cp_view(ctx_of(seq), cp), 1, 1)
    assert part[0] * cp == pytest.approx(whole[0], rel=1e-9)


@pytest.mark.parametrize(("seq", "cp"), [(4096, 2), (8192, 2), (8192, 4), (16384, 2), (32768, 2), (32768, 8)])
def test_cp_attention_is_never_faster_than_the_whole_call(seq, cp):
    """``search.cp_degrees`` skips a CP class whose cp = 1 twin does the same per-rank work: its attention is no
    faster (shorter kernels at the table's lengths)."""
    whole = attention_time(ctx_of(seq), 1, 1)
    part = attention_time(cp_view(ctx_of(seq), cp), 1, 1)
    assert part[0] * cp >= whole[0] * (1 - 1e-12)


def test_no_rectangle_discount_without_a_flash_table():
    for ctx in (
        ctx_of(65536, stack={"base": "torchtitan", "attention": "unfused"}),
        ctx_of(65536, gpu="b200-sxm-192gb"),
    ):
        view = cp_view(ctx, 2)
        assert cp_block_ratio(view) == 1.0
        f, b = attention_time(view, 1, 1)
        lf, lb = attention_time(replace(view, cp=1), 1, 1)
        assert (f, b) == pytest.approx((2 * lf, 2 * lb), rel=1e-12)
