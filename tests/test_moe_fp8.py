"""FP8 in a mixture-of-experts block (cost model 41): Megatron-core's grouped experts run Transformer Engine's FP8
``GroupedLinear`` (core_v0.15 ``moe/experts.py:837-840, 881-887, 977-978``; TE v2.9 ``grouped_linear.py:93-127,
313-327``, ``csrc/extensions/cast.cpp:103-150``, ``csrc/quantizer.cpp:497-536``, ``module/fp8_padding.py:113-139``),
and the dense MLP a MoE MLP replaces is taken away at the precision the block's op list priced it. Against hand
formulas written here from that code: the per-expert quantization's bytes and kernels by recipe, the padding passes,
which GEMMs run in FP8, and the FP8 terms of ``expert_seconds`` as the sum of those pieces."""

from __future__ import annotations

import pytest

from planner.answer.request import context
from planner.pricing.expert_parallel import expert_seconds, fp8_flags
from planner.pricing.gpu import gemm_time, hbm_time
from planner.specs import PlanRequest
from planner.workload.expert_parallel import expert_work
from planner.workload.fp8 import grouped_cast_ops


def _ctx(recipe: str | None, stack: str = "megatron", model: str = "qwen3-30b-a3b", gpu: str = "h100-sxm5-80gb"):
    training = {"global_batch_size": 512, "seq_len": 4096, "stack": stack}
    if recipe is not None:
        training |= {"precision": "fp8", "fp8_recipe": recipe}
    req = {"model": model, "cluster": {"gpu": gpu, "num_nodes": 2, "gpus_per_node": 8}}
    return context(PlanRequest.model_validate(req | {"training": training}))


# (recipe, GPU, bytes per quantized element: amax pass + cast read 2 / write 1 + the columnwise copy, kernels a tensor
# group of 16 local experts: delayed one fused multi_cast_transpose, current amax + scale + cast an expert, MXFP8 one
# quantize an expert)
RECIPE_CASES = [
    ("current", "h100-sxm5-80gb", 2 + 3 + 1, 3 * 16),
    ("delayed", "h100-sxm5-80gb", 0 + 3 + 1, 1),
    ("mxfp8", "b200-sxm-192gb", 0 + (3 + 1 / 32) + 1, 16),
]


@pytest.mark.parametrize(("recipe", "gpu", "per", "kernels"), RECIPE_CASES)
@pytest.mark.parametrize(("rows", "h", "f", "padded"), [(4096, 2048, 768, True), (1024, 2880, 2880, False)])
def test_grouped_casts_against_hand_formulas(recipe, gpu, per, kernels, rows, h, f, padded) -> None:
    ctx = _ctx(recipe, gpu=gpu)
    local, elt = 16, 2
    fwd, bwd = grouped_cast_ops(ctx, rows, local, h, f, elt, padded)
    n = rows * local
    # fc1's input (h) and fc2's (f) forward; fc2's output gradient (h) and fc1's (2f: w1 and w3) backward
    assert [op.nbytes for op in fwd[:2]] == [pytest.approx(per * n * h), pytest.approx(per * n * f)]
    assert [op.nbytes for op in bwd[:2]] == [pytest.approx(per * n * h), pytest.approx(per * n * 2 * f)]
    assert {op.kernels for op in fwd[:2] + bwd[:2]} == {kernels}
    pad = 2.0 * n * (2 * h * elt + 4)  # hidden rows padded + output unpadded (read + write), the fp32 probabilities
    assert [op.nbytes for op in fwd[2:]] == [op.nbytes for op in bwd[2:]] == ([pytest.approx(pad)] if padded else [])
    assert all(op.kernels == 3 for op in fwd[2:] + bwd[2:])


def test_no_fp8_no_casts() -> None:
    assert grouped_cast_ops(_ctx(None), 4096, 16, 2048, 768, 2, True) == ((), ())


@pytest.mark.parametrize(
    ("recipe", "stack", "grouped"),
    [
        ("current", "megatron", True),
        ("delayed", "megatron", True),
        ("rowwise", "torchtitan", False),
        (None, "megatron", False),
    ],
)
def test_which_gemms_run_in_fp8(recipe, stack, grouped) -> None:
    """The router never; the grouped experts on megatron (TE GroupedLinear); the dense MLP taken away whenever the
    block priced it in FP8 (any recipe)."""
    ctx = _ctx(recipe, stack)
    w = expert_work(ctx.model, 2, 4096, 1, False, 8, 1, ctx.elt, "none", 6.0, ctx.stack.moe_dispatch, "te", True)
    moe, dense = fp8_flags(ctx, w)
    if recipe is None:
        assert moe == dense == ()
        return
    assert moe == (False, grouped, grouped) and dense == (True, True)


@pytest.mark.parametrize("recipe", ["current", "delayed"])
def test_expert_seconds_fp8_terms_by_hand(recipe: str) -> None:
    """``expert_seconds`` of the 25.11 Qwen3-30B-A3B layout (mbs 2, ep 8: 16 experts of 4096 rows) equals, term by
    term, GEMMs at their precision and the memory-bound bytes written out here, each kernel at its size's HBM rate."""
    ctx = _ctx(recipe)
    m, r = ctx.model, ctx.residuals
    assert m.moe is not None
    h, f, E, k = m.hidden_size, m.moe.expert_ffn_hidden_size, m.moe.num_experts, m.moe.top_k
    T, local, fd, e = 2 * 4096, E // 8, m.ffn_hidden_size, ctx.elt
    rows = T * k * 8 // E
    w = expert_work(m, 2, 4096, 1, False, 8, 1, e, "none", 3.0 * e, "megatron", "te", True)

    def gemm3(mm, n, kk, c, q):  # forward, backward (data + weight gradients: split accumulator, cost model 56)
        return gemm_time(ctx, mm, n, kk, c, fp8=q), gemm_time(ctx, mm, kk, n, c, fp8=q, backward=True) + gemm_time(
            ctx, kk, n, mm, c, fp8=q, backward=True
        )

    parts = [gemm3(T, E, h, 1, False), gemm3(rows, f, h, 2 * local, True), gemm3(rows, h, f, local, True)]
    dense = [gemm3(T, fd, h, 2, True), gemm3(T, h, fd, 1, True)]
    gf = sum(p[0] for p in parts) - sum(d[0] for d in dense)
    gb = sum(p[1] for p in parts) - sum(d[1] for d in dense)
    # grouped casts: each tensor group (fc1 / fc2 input forward, fc2 / fc1 output gradient backward) in its kernels
    # (current: amax + scale + cast an expert; delayed: one fused kernel), its bytes spread over them; the padding's 3
    # kernels each way; less the dense MLP's casts (``cast_ops``' rule: inputs h (w1 = w3's) and fd, output gradients
    # 2·fd and h; amax + cast kernels under current scaling; one orientation: transposes in backward)
    per, ker, a, dk = (6.0, 3 * local, 5.0, 2) if recipe == "current" else (4.0, 1, 3.0, 1)

    def group(width: int) -> float:
        return ker * hbm_time(ctx, per * rows * local * width / ker)

    pad = 3 * hbm_time(ctx, 2.0 * rows * local * (2 * h * e + 4) / 3)
    dense_in, dense_grads = T * (h + fd), T * (2 * fd + h)
    cast_f = group(h) + group(f) + pad - dk * 2 * hbm_time(ctx, a * dense_in / (dk * 2))
    cast_b = group(h) + group(2 * f) + pad - dk * 3 * hbm_time(ctx, a * dense_grads / (dk * 3))
    cast_b -= 5 * hbm_time(ctx, 2.0 * (dense_in + dense_grads) / 5)
    mem = hbm_time(ctx, w.mem_bytes) - hbm_time(ctx, w.dense_mem_bytes)
    s = expert_seconds(ctx, w, 1, 8, "none")
    assert s.fwd == pytest.approx(r.compute_scale * gf + r.memory_scale * (mem + cast_f), rel=1e-9)
    assert s.bwd == pytest.approx(r.compute_scale * gb + r.memory_scale * (2 * mem + cast_b), rel=1e-9)
