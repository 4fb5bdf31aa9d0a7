"""Cost model 27: FSDP2's copies on the compute stream around its collectives (``accumulation.fsdp2_copy_bytes``,
``terms.fsdp2_copies``): each all-gather's ``split_with_sizes_copy`` copy-out and each reduce-scatter's ``torch.cat``
copy-in into the reduce-dtype buffer (PyTorch ``_fsdp_collectives.py``; docs/planner.md, "FSDP2's copies"). The
bytes are counted by hand from the model's shapes; the seconds from the datasheet bandwidth and the HBM curve's
≥ 100 MB efficiency (0.90), written out here, not read from the code."""

from __future__ import annotations

import pytest

from planner.answer.request import context
from planner.compose.terms import kind_terms
from planner.specs import PlanRequest
from planner.workload.accumulation import CopyBytes, fsdp1_reduce_bytes, fsdp2_copy_bytes, predivide_factor

#: Llama 3 8B's block by hand: q and o 4096², k and v 4096·1024, three SwiGLU 4096·14336, two RMSNorm weights
LLAMA3_8B_BLOCK = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
assert LLAMA3_8B_BLOCK == 218_112_000

#: (engine, gathered 16-bit-equivalent elements, wire bytes, params, grad bytes, reduce bytes) -> (copy-out, copy-in)
CASES = [
    # torchtitan, bf16 weights gathered, fp32 reduce: read + write 2 B per weight; read 2 B + write 4 B per gradient
    ("fsdp2", LLAMA3_8B_BLOCK, 2, LLAMA3_8B_BLOCK, 2, 4, 872_448_000, 1_308_672_000),
    # the bundled runtime's FSDP2: the same calls
    ("fsdp2_deferred", 1_000, 2, 1_000, 2, 4, 4_000, 6_000),
    # FP8 all-gather: 80 of 100 weights travel at 1 B = 40 16-bit elements, so 60 gathered; gradients stay bf16
    ("fsdp2", 60, 2, 100, 2, 4, 240, 600),
    # reduce in the gradients' own dtype: cat still reads and writes every element
    ("fsdp2", 1_000, 2, 1_000, 2, 2, 4_000, 4_000),
    # FSDP1 gathers into its FlatParameter (no copy-out) but passes over the unsharded gradient (cost model 41,
    # ``fsdp1_reduce_bytes``, dp = 2 here): split-backward cat 2 + 2, cast to fp32 2 + 4, pre-divide 4 + 4 = 18 B
    ("fsdp1", 1_000, 2, 1_000, 2, 4, 0, 18_000),
    ("fsdp1_no_sync", 1_000, 2, 1_000, 2, 4, 0, 18_000),
    # Composer's PURE (reduce in bf16): no cast; cat 2 + 2, divide 2 + 2
    ("fsdp1", 1_000, 2, 1_000, 2, 2, 0, 8_000),
    # Megatron and DeepSpeed have their own buffers: not priced
    ("megatron", 1_000, 2, 1_000, 2, 4, 0, 0),
    ("deepspeed", 1_000, 2, 1_000, 2, 4, 0, 0),
]


@pytest.mark.parametrize(("mode", "gathered", "ge", "params", "gr", "rd", "out", "into"), CASES)
def test_copy_bytes_by_hand(mode, gathered, ge, params, gr, rd, out, into) -> None:
    assert fsdp2_copy_bytes(mode, gathered, ge, params, gr, rd) == CopyBytes(out, into)


def _ctx(stack):
    """torchtitan's 2024-04 A100 row: Llama 3 8B, 64 A100 80 GB, FSDP 64, local batch 1 at 8192 tokens."""
    return context(
        PlanRequest.model_validate(
            {
                "model": "llama3-8b",
                "cluster": {"gpu": "a100-sxm4-80gb", "num_nodes": 8, "gpus_per_node": 8},
                "training": {"global_batch_size": 64, "seq_len": 8192, "stack": stack},
                "parallel": {"tp": 1, "pp": 1, "micro_batch_size": 1, "zero_stage": 3, "recompute": "none"},
            }
        )
    )


#: (mbs, tp, sp, recompute, zero stage, dp, TP overlap, ep, etp, pipelined)
KEY = (1, 1, False, "none", 3, 64, False, 1, 1, False)


def test_a_block_pays_its_copies_on_the_compute_stream() -> None:
    """The same engine schedule (FSDP1 and FSDP2 both gather before forward and backward and reduce-scatter per
    micro-batch at ZeRO-3) with and without FSDP2's copies: a block's forward grows by one copy-out, its backward by
    a copy-out and the reduce copy-in, less FSDP1's own gradient passes (cost model 41: 18 B per parameter at dp 64
    with an fp32 reduce; none in forward) — the block's compute (≈ 20 ms) is far above its collectives (≈ 3–5 ms), so the
    overlap's slowdown term does not move."""
    with_copies = kind_terms(_ctx("torchtitan"), KEY, "transformer_block")
    without = kind_terms(_ctx({"base": "torchtitan", "grad_accumulation": "fsdp1"}), KEY, "transformer_block")
    bw = 2039e9 * 0.90  # A100 SXM4 80 GB datasheet HBM × the achieved fraction above 100 MB
    out_s = 2 * LLAMA3_8B_BLOCK * 2 / bw  # 0.475 ms
    into_s = LLAMA3_8B_BLOCK * (2 + 4) / bw  # 0.713 ms
    assert with_copies.fwd.layer - without.fwd.layer == pytest.approx(out_s * 1e9, abs=2)
    fsdp1_s = LLAMA3_8B_BLOCK * 18 / bw  # 2.139 ms: cat 2 + 2, cast 2 + 4, pre-divide 4 + 4
    assert with_copies.bwd.layer - without.bwd.layer == pytest.approx((out_s + into_s - fsdp1_s) * 1e9, abs=2)
    # the LM head is a unit too: 128,256 × 4096 weights (untied) and the final RMSNorm's 4096
    head = 128_256 * 4096 + 4096
    assert with_copies.fwd.head - without.fwd.head == pytest.approx(2 * head * 2 / bw * 1e9, abs=2)
    # and they count as DP time in the breakdown (the ZeRO-3 part of the term)
    assert with_copies.fwd_z3.layer - without.fwd_z3.layer == pytest.approx(out_s * 1e9, abs=2)


def test_no_copies_at_zero0() -> None:
    """ZeRO-0 is ``replicate``, not ``fully_shard``'s units: its all-reduce per micro-batch is priced without FSDP2's
    copies (the same terms as under the FSDP1 engine, which also all-reduces per micro-batch; FSDP1's NO_SHARD
    gradient passes are not priced either)."""
    z0 = (1, 1, False, "none", 0, 64, False, 1, 1, False)
    a = kind_terms(_ctx("torchtitan"), z0, "transformer_block")
    b = kind_terms(_ctx({"base": "torchtitan", "grad_accumulation": "fsdp1"}), z0, "transformer_block")
    assert (a.fwd, a.bwd) == (b.fwd, b.bwd)
    assert a.bwd_z3.layer > 0  # the all-reduce itself is there


#: FSDP1's pre-divide factor by hand (``default_hooks._get_gradient_predivide_factor``: double while dp divides and
#: dp / factor > factor): dp -> factor; the divide pass runs wherever it exceeds 1
PREDIVIDE = [(1, 1), (2, 2), (4, 2), (8, 4), (16, 4), (32, 8), (64, 8), (128, 16), (512, 32), (6, 4), (12, 4)]


@pytest.mark.parametrize(("dp", "factor"), PREDIVIDE)
def test_predivide_factor_by_hand(dp, factor) -> None:
    assert predivide_factor(dp) == factor


#: (params, grad bytes, reduce bytes, dp) -> bytes: cat 2e, cast e + r where r != e, divide 2r where dp >= 2
FSDP1_CASES = [
    (314_639_360, 2, 4, 8, 314_639_360 * 18),  # MPT-13B's block (12·5120² + 13·5120) under Composer's DEFAULT
    (314_639_360, 2, 2, 8, 314_639_360 * 8),  # the same under PURE (bf16 reduce)
    (1_000, 2, 4, 1, 1_000 * 10),  # one rank: factor 1, no divide
    (1_000, 4, 4, 8, 1_000 * 16),  # fp32 training: no cast; cat 4 + 4, divide 4 + 4
]


@pytest.mark.parametrize(("params", "e", "r", "dp", "expected"), FSDP1_CASES)
def test_fsdp1_reduce_bytes_by_hand(params, e, r, dp, expected) -> None:
    assert fsdp1_reduce_bytes(params, e, r, dp) == expected
